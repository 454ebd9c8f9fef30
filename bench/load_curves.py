"""The load curves' refresh (issue 34's curves, issue 31's CPU): what the daemon's job does
every `load_curve.refresh_interval` (5 minutes) in a worker thread, for every endpoint and
model that speculated: bin its windows by load (`load_curve`) and derive the K schedule
over batch sizes 1 to vLLM's largest (`draft_schedule`), i.e. `curve_book.speculating_curves`.
The store's read of the windows is not in it (`bench/store_ingest.py` has the store).

Each endpoint has a day of 5-minute windows (288) of one model, assessed by the real
assessment (`assess_window`) from the counts of the worked example of docs/economics.md
(EAGLE, K = 3, c = 0.05, B* = 32), at loads spread over 1 to 200 running requests, each
endpoint's acceptance its own. (The daemon reads a day as the rolled hours' bins and the
windows not rolled up yet, `store.load_samples`: 24 to ~230 samples an endpoint, so the
binning here is at the top of its range; the K schedule costs the same either way.) The
work is Python holding the GIL: while it runs, the event loop's scrapes and `/metrics`
reads wait their turn.

    PYTHONPATH=exporter python bench/load_curves.py [--endpoints 2000] [--daemon]

It prints numbers, never fails on them: the CPU of a refresh, and the memory its curves
keep and need while they are made (traced by tracemalloc: Python's own blocks, not RSS).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from spectax.config import validate
from spectax.curve_book import CurveBook, speculating_curves
from spectax.economics import Parameters, StepModel
from spectax.economics.assessment import AssessedWindow, assess_window
from spectax.economics.load_curve import LoadSample, sample_of
from spectax.economics.pricing import ModelSpend
from spectax.endpoint import EndpointMonitor
from spectax.pipeline.counts import Counts
from spectax.pipeline.windows import Window
from spectax.store import Store
from spectax.store.rows import window_rows

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SPEND = Decimal("2.50") * 300 / 3600
PARAMS = Parameters(
    draft_cost_ratio=0.05,
    step_model=StepModel(
        ridge_batch=32.0,
        step_overhead_ratio=0.1,
        source="sweep",
        relative_error=0.0,
        overhead_known=True,
    ),
)
LOADS = (1.0, 1.5, 3.0, 6.0, 12.0, 24.0, 48.0, 96.0, 200.0)


def day(rng: random.Random) -> list[LoadSample]:
    """A day of one endpoint's windows: the worked example's counts, its own acceptance."""
    found = []
    for assessed in assessed_windows(rng, 0.0, 288):
        sample = sample_of(assessed, MODEL)
        assert sample is not None
        found.append(sample)
    return found


def assessed_windows(
    rng: random.Random, first: float, count: int, model: str = MODEL
) -> list[AssessedWindow]:
    """`count` consecutive 5-minute windows of one endpoint from `first` (epoch seconds),
    each assessed: the worked example's counts at a load drawn from `LOADS`, with an
    acceptance of the endpoint's own (also `scale.py --history-hours`'s history)."""
    share = rng.uniform(0.6, 1.0)
    found = []
    for i in range(count):
        counts = Counts(
            generation_tokens=2800.0,
            drafts=1000.0,
            draft_tokens=3000.0,
            accepted_tokens=1800.0 * share,
            accepted_per_position=(800.0 * share, 600.0 * share, 400.0 * share),
            running_seconds=rng.choice(LOADS) * 300.0,
        )
        start = first + 300.0 * i
        spend = {
            model: ModelSpend(
                spend_usd=SPEND,
                busy_usd=SPEND,
                draft_load_usd=Decimal(0),
                cold_start_usd=Decimal(0),
            )
        }
        window = Window(start, start + 300.0, 300.0, 300.0, spend_usd=SPEND, models={model: counts})
        found.append(
            AssessedWindow(
                window,
                assess_window(window, PARAMS, spend, latency=False),
                spend,
                PARAMS.step_model,
                0.05,
            )
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--endpoints", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--daemon",
        action="store_true",
        help="instead, the daemon's refresh (CurveBook) from a store holding a day of windows: "
        "its RSS, in a process that did nothing before it",
    )
    args = parser.parse_args()
    if args.daemon:
        asyncio.run(daemon_refreshes(args.endpoints))
        return
    rng = random.Random(31)
    one = [day(rng) for _ in range(20)]  # 20 endpoints' days, each reused 1 in 20
    samples = {(f"replica-{i}", MODEL): one[i % len(one)] for i in range(args.endpoints)}
    best = float("inf")
    for _ in range(args.repeat):
        started = time.process_time()
        curves = speculating_curves(samples)
        best = min(best, time.process_time() - started)
    print(
        f"{args.endpoints} endpoints, {len(one[0])} windows each: a refresh takes {best:.2f} s "
        f"of CPU (best of {args.repeat}), {best / args.endpoints * 1e3:.2f} ms an endpoint; "
        f"{len(curves.curves)} curves"
    )
    del curves
    gc.collect()
    tracemalloc.start()
    curves = speculating_curves(samples)
    gc.collect()
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # (a piece per curve, or one bytes a family before 2e213e3)
    lines = sum(len(v) if isinstance(v, bytes) else sum(map(len, v)) for v in curves.lines.values())
    print(
        f"memory (tracemalloc): the curves kept {kept / 1e6:.1f} MB, their /metrics lines "
        f"{lines / 1e6:.1f} MB of it; {peak / 1e6:.1f} MB at the peak of making them at once"
    )


async def daemon_refreshes(endpoints: int, refreshes: int = 3) -> None:
    """The daemon's own refresh (`CurveBook.refresh`: the store's read, then a pair at a
    time) on a store holding a day of each endpoint's windows (`write_history`),
    `refreshes` times: the process's RSS over what it was before the first, after each, and
    its peak (VmHWM). RSS, not traced bytes: what the allocator keeps is what counts."""
    names = [f"replica-{i:05d}" for i in range(endpoints)]
    settings = validate(
        {
            "endpoints": [
                {
                    "name": name,
                    "url": "http://127.0.0.1:1",
                    "speculation": {"method": "draft_model", "draft_cost_ratio": 0.1},
                    "price": {"usd_per_hour": 3.99},
                }
                for name in names
            ]
        }
    )
    prices = settings.usd_per_hour
    watched = {
        e.name: EndpointMonitor(e, prices.get(e.name), 300.0).snapshot
        for e in settings.config.endpoints
    }
    with tempfile.TemporaryDirectory(prefix="spectax-curves-") as work:
        path = Path(work) / "spectax.sqlite"
        await write_history(path, names, 24.0)
        store = await Store.open(f"sqlite+aiosqlite:///{path}")
        try:
            book, base = CurveBook(), _status_mib("VmRSS")
            for i in range(refreshes):
                started = time.process_time()
                await book.refresh(store, datetime.now(UTC), 86400.0, watched)
                took = time.process_time() - started
                assert sorted(book.current.curves) == [(n, MODEL) for n in names]
                gc.collect()
                print(
                    f"the daemon's refresh {i + 1} ({took:.2f} s of CPU, the store's read "
                    f"included): RSS {_status_mib('VmRSS') - base:+.0f} MiB over before the "
                    f"first, peak {_status_mib('VmHWM') - base:+.0f} MiB"
                )
        finally:
            await store.close()


async def write_history(path: Path, names: list[str], hours: float, model: str = MODEL) -> None:
    """Each endpoint's 5-minute windows of `model` over the last `hours`, assessed
    (`assessed_windows`: loads of 1 to 200 running requests, each endpoint's own acceptance)
    and written through the store, then rolled up: what a daemon that ran that long leaves
    (`scale.py --history-hours`, and `--daemon` here): load curves of a day, not of a
    fresh store's few minutes, with their refresh, their memory and their /metrics lines."""
    started = time.monotonic()
    store = await Store.open(f"sqlite+aiosqlite:///{path}")
    rng = random.Random(19)
    count = int(hours * 12)
    first = (time.time() // 300 - count) * 300  # the windows end at the last boundary
    try:
        for name in names:
            windows = assessed_windows(rng, first, count, model)
            await store.save(name, [row for w in windows for row in window_rows(name, w)], None)
        await store.rollup()
    finally:
        await store.close()
    print(
        f"history: {count} windows of each of {len(names)} endpoints written and rolled up in "
        f"{time.monotonic() - started:.0f} s"
    )


def _status_mib(key: str) -> float:
    """A line of /proc/self/status (VmRSS, VmHWM), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


if __name__ == "__main__":
    main()
