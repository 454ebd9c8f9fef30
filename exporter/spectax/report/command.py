"""`spectax report`: open the store, build the month's report, write it in the chosen format."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spectax.config import Settings
from spectax.report.build import Report, build_report
from spectax.report.figures import EndpointInfo
from spectax.report.period import Month
from spectax.report.progress import Progress
from spectax.report.read import ProjectionReader
from spectax.report.spend import SpendSource, spend_source_for
from spectax.store import Store

FORMATS = ("html", "md", "csv")
_SUFFIX = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".csv": "csv"}
# Placeholder addresses: the report needs the demo endpoints' billing, not their servers.
DEMO_URLS = {
    "code-assistant": "http://127.0.0.1:18001",
    "chat-creative": "http://127.0.0.1:18002",
    "chat-control": "http://127.0.0.1:18003",
}


class ReportError(RuntimeError):
    """A problem the user can fix (no store, bad month, unknown format)."""


@dataclass(frozen=True, slots=True)
class Written:
    path: Path | None  # None: standard output
    report: Report
    format: str


def pick_format(fmt: str | None, out: str | None) -> str:
    if fmt:
        return fmt
    if out and out != "-":
        return _SUFFIX.get(Path(out).suffix.lower(), "html")
    return "html"


def default_out(month: Month, fmt: str) -> str:
    return f"spectax-report-{month}.{fmt}"


def endpoint_infos(settings: Settings) -> dict[str, EndpointInfo]:
    """Billing mode and draft sizes per endpoint, from the configuration.

    Without configured endpoints spectax watches the built-in simulated servers
    (`spectax run`, `spectax demo`), so the report describes those.
    """
    endpoints = settings.config.endpoints
    if not endpoints:
        from spectax.cli.demo import demo_endpoints
        from spectax.config import EndpointConfig
        from spectax.simulate import DEMO_PROFILES

        endpoints = [
            EndpointConfig.model_validate(e) for e in demo_endpoints(DEMO_URLS, DEMO_PROFILES)
        ]
    infos = {}
    for e in endpoints:
        spec = e.speculation
        infos[e.name] = EndpointInfo(
            name=e.name,
            configured=True,
            billing_mode=e.billing_mode,
            method=spec.method if spec else None,
            draft_weight_bytes=spec.draft_weight_bytes if spec else None,
            gpu_memory_bytes=e.gpu_memory_bytes,
            control=e.control,
        )
    return infos


async def make_report(
    settings: Settings,
    month: Month,
    endpoints: Sequence[str] | None,
    fmt: str,
    out: str | None,
    spend_source: SpendSource | None = None,
    progress: Progress | None = None,
) -> Written:
    if fmt not in FORMATS:
        raise ReportError(f"unknown format {fmt!r}: choose html, md or csv")
    url = settings.config.database_url
    _check_store_exists(url)
    progress = progress or Progress(0)
    spend_source = spend_source or spend_source_for(settings)
    store = await Store.open(url)
    try:
        async with ProjectionReader(url) as reader:
            report = await build_report(
                store, month, endpoint_infos(settings), endpoints, spend_source, progress, reader
            )
    finally:
        await store.close()
    try:
        text = render(report, fmt, progress)
    finally:
        progress.close()
    target = out or default_out(month, fmt)
    if target == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return Written(None, report, fmt)
    path = Path(target)
    await asyncio.to_thread(_write, path, text)
    return Written(path, report, fmt)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def render(report: Report, fmt: str, progress: Progress | None = None) -> str:
    if fmt == "md":
        from spectax.report.markdown import render_markdown

        return render_markdown(report)
    if fmt == "csv":
        from spectax.report.csvout import render_csv

        return render_csv(report)
    from spectax.report.charts import charts
    from spectax.report.html import render_html

    if progress is not None:
        progress.add_steps(1)
        progress.advance(label="drawing charts")
    chart_list = charts(report)
    return render_html(report, chart_list)


def _check_store_exists(url: str) -> None:
    """A report never creates a database: a missing SQLite file is an error that says why."""
    if not url.startswith("sqlite") or ":///" not in url:
        return
    path = url.split(":///", 1)[1].split("?", 1)[0]
    if path and path != ":memory:" and not Path(path).exists():
        raise ReportError(
            f"no history store at {path}: run the daemon (spectax run) for a while, or write a "
            "month of simulated history with `spectax demo --history 30d`, or give --config "
            "with your storage_url"
        )
