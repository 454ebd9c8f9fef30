"""Writing the month's report: open the store, build the report, render it, write the file.

The command line (`spectax.cli.report`) says which endpoints to describe; nothing here
knows the demo or the daemon.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from spectax.config import Settings
from spectax.endpoint_config import EndpointConfig
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


class ReportUsageError(ReportError):
    """The command asked for what is not there (a month, an endpoint, a format): exit 2."""


@dataclass(frozen=True, slots=True)
class Written:
    path: Path | None  # None: standard output
    report: Report
    format: str
    month: Month


def pick_format(fmt: str | None, out: str | None) -> str:
    """--format, else --out's suffix, else html; a .pdf is refused, never HTML under its name."""
    suffix = Path(out).suffix.lower() if out and out != "-" else ""
    if suffix == ".pdf":
        # A real PDF needs a browser engine to lay the HTML out; spectax ships none.
        raise ReportUsageError(
            f"--out {out}: spectax does not write PDF; the formats are html, md and csv "
            "(for a PDF, open the HTML report in a browser and print it to PDF)"
        )
    if fmt:
        return fmt
    return _SUFFIX.get(suffix, "html")


def pick_month(asked: Month | None, months: set[Month], today: Month) -> Month:
    """The month asked for, if it has history; by default the last complete month with history.

    The current month when it is the only one with history (a daemon started this month).
    """
    if asked is not None and asked in months:
        return asked
    if not months:
        raise ReportUsageError(
            "the store holds no history for these endpoints: run the daemon (spectax run) "
            "for a while, or write simulated history with `spectax demo --history 30d`"
        )
    if asked is not None:
        raise ReportUsageError(
            f"no history for {asked}: the store has history for {_months_text(months)}; "
            "give one of them with --month, or leave --month out for the last complete one"
        )
    complete = [m for m in months if m < today]
    return max(complete) if complete else max(months)


def check_endpoints(only: Sequence[str] | None, known: Iterable[str]) -> None:
    """Every --endpoint names a configured endpoint or one with history."""
    names = sorted(set(known))
    unknown = [name for name in only or () if name not in names]
    if unknown:
        raise ReportUsageError(
            f"unknown endpoint(s) {', '.join(unknown)}: the known endpoints are "
            f"{', '.join(names) if names else 'none (no configuration, no history)'}"
        )


def _months_text(months: set[Month]) -> str:
    return ", ".join(str(m) for m in sorted(months))


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
            engine=e.engine,
        )
    return infos


async def write_report(
    settings: Settings,
    month: Month | None,
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
            await store.rollup()  # so the months seen include the latest windows
            history = await reader.months()
            check_endpoints(only, [*infos, *history])
            seen = [history.get(name, set()) for name in (only or history)]
            month = pick_month(month, set().union(*seen), Month.of(datetime.now(UTC)))
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
        return Written(None, report, fmt, month)
    path = Path(target)
    await asyncio.to_thread(_write, path, text)
    return Written(path, report, fmt, month)


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
