"""`spectax backfill --from DATE --to DATE`: the fleet's past windows, from the history its
Prometheus already holds, so that the first cost review needs no month of waiting.

The windows are read exactly as the daemon reads them live (spectax.sources.prometheus,
the same queries at each window's end), assessed by the same monitors, and written with
the same rows: the store keys a window by endpoint, model and start, so a second run, or
one over windows the daemon already wrote, replaces each row by an equal one and adds
nothing. Windows are read a chunk at a time (CHUNK_SECONDS of raw samples per query).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from spectax.config import Settings, load_config
from spectax.endpoint import EndpointMonitor
from spectax.pipeline.windows import aligned_start
from spectax.report.progress import Progress
from spectax.scrape import USER_AGENT
from spectax.sources.fleet import carried, cursor_sample
from spectax.sources.prometheus import PrometheusReader, SourceError
from spectax.store import Store, WindowWrite
from spectax.store.rows import pending_write
from spectax.tariffs import running_pricing

# Two hours of raw samples per query and series: at a 15 s scrape interval 480 samples,
# far under what Prometheus (50M samples a query), Thanos and Mimir allow for a fleet of
# 20,000 replicas, and under the 11,000 points per series a query_range may return.
CHUNK_SECONDS = 2 * 3600.0


def add_parser(commands: Any) -> None:
    backfill = commands.add_parser(
        "backfill",
        help="write past windows of the fleet sources (Prometheus, Thanos, Mimir) into the store",
        description="Read the windows between --from and --to from the configuration's "
        "`sources:` and write them into the store, as the daemon would have written them "
        "live. Idempotent: running it twice, or over the daemon's windows, adds nothing twice.",
    )
    backfill.add_argument(
        "--config", type=Path, required=True, help="YAML configuration file with `sources:`"
    )
    for flag, dest, what in (("--from", "start", "first"), ("--to", "end", "end of the last")):
        backfill.add_argument(
            flag,
            dest=dest,
            required=True,
            type=_instant,
            metavar="DATE",
            help=f"the {what} window: 2026-11-01, 2026-11-01T06:00, UTC unless an offset says",
        )
    backfill.set_defaults(func=backfill_main)


def _instant(text: str) -> float:
    """2026-11-01, 2026-11-01T06:00 or with an offset; UTC unless it says otherwise."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date: {text!r} (e.g. 2026-11-01)") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def backfill_main(args: argparse.Namespace) -> int:
    settings = load_config(args.config)
    if not settings.config.sources:
        print(f"spectax backfill: {args.config} has no `sources:` to read", file=sys.stderr)
        return 2
    if args.end <= args.start:
        print("spectax backfill: --to must be after --from", file=sys.stderr)
        return 2
    windows = (len(boundaries(settings, args.start, args.end)) - 1) * len(settings.config.sources)
    progress = Progress(max(0, windows))

    def step(count: int) -> None:
        progress.advance(count, "windows read and written")
        if not progress.enabled:  # a log, a pipe: a line a chunk
            print(f"backfill: {progress.done}/{progress.total} windows", file=sys.stderr)

    try:
        written = asyncio.run(backfill(settings, args.start, args.end, step))
    except SourceError as exc:
        print(f"spectax backfill: {exc} (what was written stays; run it again)", file=sys.stderr)
        return 1
    finally:
        progress.close()
    print(f"wrote {written} window row(s)", file=sys.stderr)
    return 0


def boundaries(settings: Settings, start: float, end: float) -> list[float]:
    """The boundaries of the whole windows between `start` and `end`, up to the sources'
    `delay` ago: a window Prometheus may not hold whole yet is the live daemon's to write
    (so the progress counts those only: a --to in the future showed 30/719)."""
    length = settings.config.window
    end = min(end, time.time() - max(source.delay for source in settings.config.sources))
    first = -aligned_start(-start, length)  # the first boundary at or after start
    return [first + i * length for i in range(int((end - first) // length) + 1)]


async def backfill(
    settings: Settings,
    start: float,
    end: float,
    step: Callable[[int], None] = lambda count: None,
) -> int:
    """Write the whole windows between `start` and `end`; returns the rows written."""
    config = settings.config
    length = config.window
    bounds_all = boundaries(settings, start, end)
    chunk = max(1, int(CHUNK_SECONDS // length))
    reserved = {e.name for e in config.endpoints}
    store = await Store.open(config.database_url)
    rows = 0
    try:
        async with aiohttp.ClientSession(headers={"User-Agent": USER_AGENT}) as session:
            for source in config.sources:
                reader = PrometheusReader(source, session)
                monitors: dict[str, EndpointMonitor] = {}
                for i in range(0, len(bounds_all) - 1, chunk):
                    bounds = bounds_all[i : i + chunk + 1]
                    windows = await reader.windows(bounds)
                    writes: list[WindowWrite] = []
                    for window_end in bounds[1:]:
                        for name, interval in sorted(windows[window_end].items()):
                            if name in reserved:
                                continue
                            if (monitor := monitors.get(name)) is None:
                                endpoint = source.endpoint_config(name)
                                pricing = running_pricing(endpoint, settings.prices)
                                monitor = monitors[name] = EndpointMonitor(
                                    endpoint, pricing.usd_per_hour, length, gpu=pricing.gpu
                                )
                            fed = carried(monitor, interval, source)
                            observed = monitor.observe_interval(fed, cursor_sample(interval))
                            if observed is not None:
                                write = pending_write(observed)
                                writes.append((write.endpoint, write.rows, write.cursor))
                                rows += len(write.rows)
                    await store.save_many(writes)
                    step(len(bounds) - 1)
        await store.rollup()
    finally:
        await store.close()
    return rows
