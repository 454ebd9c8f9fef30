"""Writing the month's report: open the store, build the report, render it, write the file.

The command line (`spectax.cli.report`) says which endpoints to describe; nothing here
knows the demo or the daemon.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from spectax.config import EndpointConfig, Settings
from spectax.report.build import Report, build_report
from spectax.report.figures import EndpointInfo
from spectax.report.period import Month
from spectax.report.progress import Progress
from spectax.report.read import ProjectionReader
from spectax.report.render import FORMATS, render
from spectax.report.spend import SpendSource, spend_source_for
from spectax.store import Store

_SUFFIX = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".csv": "csv"}


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


def endpoint_infos(endpoints: Iterable[EndpointConfig]) -> dict[str, EndpointInfo]:
    """Billing mode and draft sizes per endpoint, from its configuration."""
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


async def write_report(
    settings: Settings,
    month: Month,
    infos: dict[str, EndpointInfo],
    only: Sequence[str] | None,
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
            report = await build_report(store, month, infos, only, spend_source, progress, reader)
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
