"""The command line of `spectax report` and `spectax demo --history` (wired in spectax.cli.main)."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spectax.config import Settings, load_config, validate
from spectax.endpoint_config import EndpointConfig
from spectax.report.charts import ChartsUnavailable
from spectax.report.period import Month
from spectax.report.progress import Progress
from spectax.report.render import FORMATS
from spectax.report.write import (
    ReportError,
    ReportUsageError,
    endpoint_infos,
    pick_format,
    write_report,
)


def add_report_parser(commands: Any) -> None:
    report = commands.add_parser(
        "report",
        help="the monthly cost review: spend, savings or tax, recommendations (HTML, MD, CSV)",
        description="The monthly cost review of the endpoints in the history store: spend and "
        "its basis, cost per million output tokens with and without speculation, net savings "
        "or tax, acceptance, hours paid and in tax, cold starts, draft overhead, month over "
        "month, and recommendations with the dollars at stake.",
    )
    report.add_argument(
        "--month",
        help="YYYY-MM (UTC), e.g. 2026-05; default: the last complete month with history "
        "(the current month when that is all there is)",
    )
    report.add_argument(
        "--endpoint", action="append", metavar="NAME", help="only this endpoint (repeatable)"
    )
    report.add_argument(
        "--format",
        choices=FORMATS,
        help="html (one self-contained file, with charts), md (tables, for tickets) or csv "
        "(one row per endpoint and day); default: from --out's suffix, else html",
    )
    report.add_argument(
        "--out",
        metavar="PATH",
        help="file to write (default spectax-report-YYYY-MM.FORMAT; - for standard output)",
    )
    report.add_argument(
        "--config",
        type=Path,
        help="YAML configuration file: storage_url, and each endpoint's billing_mode, "
        "gpu_memory_bytes and draft_weight_bytes (default: the demo's, and its history)",
    )
    report.set_defaults(func=report_main)


# `spectax demo --history` writes here, not into the live demo's spectax.sqlite: the live
# demo restored its ridge batch fit from this simulated history (B* = 89.6, issue 17).
DEMO_HISTORY_FILE = "demo-history.sqlite"


def demo_history_settings() -> Settings:
    """The demo's defaults with the store in DEMO_HISTORY_FILE, in the state directory:
    where `demo --history` writes and `report` without --config reads."""
    from spectax.simulate.demo_fleet import DEMO_DEFAULTS

    state = Path(validate(DEMO_DEFAULTS, "<demo>").config.state_directory)
    url = f"sqlite+aiosqlite:///{state / DEMO_HISTORY_FILE}"
    return validate({**DEMO_DEFAULTS, "storage_url": url}, "<demo history>")


def described_endpoints(settings: Settings) -> Sequence[EndpointConfig]:
    """The endpoints the report describes: the configured ones.

    Without configured endpoints the history can only be the simulated servers'
    (`spectax demo`; `spectax run` refuses to start without endpoints), so it describes those.
    """
    if settings.config.endpoints or settings.config.sources:  # fleet mode: found in the store
        return settings.config.endpoints
    from spectax.simulate.demo_fleet import demo_endpoint_configs

    return demo_endpoint_configs()


def report_main(args: argparse.Namespace) -> int:
    try:
        month = Month.parse(args.month) if args.month else None
        fmt = pick_format(args.format, args.out)
    except (ValueError, ReportUsageError) as exc:
        print(f"spectax report: {exc}", file=sys.stderr)
        return 2
    settings = load_config(args.config) if args.config else demo_history_settings()
    infos = endpoint_infos(described_endpoints(settings))
    try:
        written = asyncio.run(
            write_report(settings, month, infos, args.endpoint, fmt, args.out, progress=Progress(0))
        )
    except ReportUsageError as exc:
        print(f"spectax report: {exc}", file=sys.stderr)
        return 2
    except ReportError as exc:
        print(f"spectax report: {exc}", file=sys.stderr)
        return 1
    except ChartsUnavailable as exc:  # matplotlib missing: the message says how to get it
        print(f"spectax report: {exc}", file=sys.stderr)
        return 1
    if written.path is not None:
        report = written.report
        shown = f"{len(report.endpoints)} endpoint(s)" if not report.empty else "no history"
        print(f"wrote {written.path} ({written.format}, {written.month}, {shown})", file=sys.stderr)
    return 0


def demo_history_main(args: argparse.Namespace) -> int:
    """`spectax demo --history SPAN`: write simulated history, then say which report to run."""
    from spectax.simulate.demo_history import parse_span, write_demo_history

    try:
        span = parse_span(args.history)
    except ValueError as exc:
        print(f"spectax demo: {exc}", file=sys.stderr)
        return 2
    settings = load_config(args.config) if args.config else demo_history_settings()
    progress = Progress(0)

    def step(done: int, total: int) -> None:
        progress.total = max(total, 1)
        progress.done = done
        progress.advance(0, label="simulating and storing history")

    from spectax.simulate.demo_fleet import DEMO_SWEPT

    swept = DEMO_SWEPT if not args.config else None  # the embedded demo's story, as live
    try:
        written = asyncio.run(write_demo_history(settings, span, progress=step, swept=swept))
    finally:
        progress.close()
    month = written.main_month
    where = settings.config.database_url
    where = where.split(":///", 1)[-1] if where.startswith("sqlite") else "the configured store"
    config = f" --config {args.config}" if args.config else ""
    print(
        "\n".join(
            [
                f"Wrote {span / 86400:g} days of simulated history for "
                f"{', '.join(written.endpoints)} into {where}",
                f"({written.windows:,} windows of {written.window_seconds / 60:g} minutes each, "
                f"{written.cold_starts} cold starts in all).",
                "Now run:",
                f"  {command_path()} report --month {month} --format html "
                f"--out spectax-report-{month}.html{config}",
            ]
        )
    )
    return 0


def command_path(
    argv0: str | None = None, cwd: Path | None = None, on_path: str | None = None
) -> str:
    """How the user runs this spectax from where they are, for the next command we print.

    `spectax` when that is the one on PATH; else the running executable's path, relative
    when it is under the working directory (`.venv/bin/spectax` after the README's install).
    """
    exe = Path(argv0 if argv0 is not None else sys.argv[0])
    if exe.name != "spectax":  # python -m spectax, or a test runner: the venv's script
        exe = Path(sys.executable).parent / "spectax"
    if not exe.is_file():
        return "spectax"
    exe = exe.resolve()
    found = on_path if on_path is not None else shutil.which("spectax")
    if found and Path(found).resolve() == exe:
        return "spectax"
    here = (cwd or Path.cwd()).resolve()
    return str(exe.relative_to(here)) if exe.is_relative_to(here) else str(exe)
