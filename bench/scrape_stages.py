"""Where a scrape's CPU goes, in microseconds per stage (issue 31).

One endpoint's scrape, stage by stage, on the page `scale.py` serves (a recorded vLLM page
whose counters grow between scrapes), each stage timed alone over --endpoints endpoints x
--scrapes scrapes with the process's own CPU clock (best of --repeat rounds):

    fetch        the HTTP GET through spectax's own client (a new connection per scrape, as
                 in a fleet), against a target server in another process: the client's CPU,
                 on the event loop --loop names (uvloop: the daemon's; asyncio: its fallback)
    parse        the engine's parser, text to EngineSample
    deltas       the interval since the last page (counter deltas, gauges integrated) and
                 its spend
    cursor       the page's sample packed, the cursor the next interval starts from
    sliding      the live gauges' sliding window: the interval added, the oldest taken
                 out, its sum packed and unpacked
    aligned      the open history window: the interval added, packed and unpacked
    assessment   the sliding window assessed (the economics and the latency quantiles
                 behind the gauges and the status page)
    open window  the open history window assessed and encoded as the store's rows
                 (written every second, so a kill -9 loses a second of scrapes)
    exposition   the endpoint's /metrics lines formatted, as the daemon does after a scrape
                 (SnapshotCollector.prerender: its settings families only when changed)
    whole        the monitor's own path for the same scrapes (all but fetch), for a check
                 that the stages add up

    PYTHONPATH=exporter python bench/scrape_stages.py [--endpoints 200] [--scrapes 20]
        [--loop asyncio|uvloop] [--only-fetch]

It prints numbers, never fails on them. Run it on a quiet machine: the figures are CPU
time, but a busy second core still slows the caches.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from collections.abc import Callable

from scale import PAGE, Targets, machine
from spectax import economics
from spectax.config import validate
from spectax.endpoint import EndpointMonitor
from spectax.engines import get_parser
from spectax.exposition import SnapshotCollector, StoreStatus
from spectax.pipeline.intervals import interval_between
from spectax.pipeline.packing import Cursor
from spectax.pipeline.windows import AlignedWindows, SlidingWindow
from spectax.store.rows import window_rows
from spectax.tariffs import tariff_of

WINDOW_SECONDS = 300.0
INTERVAL = 15.0
T0 = 1_700_000_100.0  # a few scrapes before a 5-minute boundary: windows close in the run

TARGET_SERVER = """
import sys
from aiohttp import web
page = open(sys.argv[2]).read()
async def metrics(request):
    return web.Response(text=page, content_type="text/plain")
app = web.Application()
app.router.add_get("/metrics", metrics)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def monitors(count: int) -> list[EndpointMonitor]:
    settings = validate(
        {
            "window": "5m",
            "endpoints": [
                {
                    "name": f"replica-{i}",
                    "url": f"http://127.0.0.1:{20000 + i}",
                    "price": {"usd_per_hour": 3.99},
                    "speculation": {"method": "draft_model", "draft_cost_ratio": 0.1},
                }
                for i in range(count)
            ],
        }
    )
    return [
        EndpointMonitor(c, settings.usd_per_hour[c.name], WINDOW_SECONDS)
        for c in settings.config.endpoints
    ]


def pages(count: int, scrapes: int) -> list[list[str]]:
    """Each scrape's page of each endpoint, counters grown by a scrape's worth each time."""
    targets = Targets(count)
    out = []
    for k in range(scrapes):
        targets.started = time.time() - k * INTERVAL
        out.append([targets.page(i) for i in range(count)])
    return out


def best_of(repeat: int, run: Callable[[], int]) -> float:
    """The least CPU seconds per call of `run` (which returns how many calls it made)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        calls = run()
        best = min(best, (time.process_time() - started) / calls)
    return best


class Stages:
    """Every stage's inputs, made once by running the pipeline, so each is timed alone."""

    def __init__(self, endpoints: int, scrapes: int):
        self.texts = pages(endpoints, scrapes)
        self.parse = get_parser("vllm")
        self.samples = [[self.parse(text) for text in row] for row in self.texts]
        self.monitor = monitors(1)[0]
        self.tariff = tariff_of(self.monitor.config, self.monitor.usd_per_hour)
        self.intervals = [
            [
                economics.price_interval(
                    interval_between(before, after, T0 + (k - 1) * INTERVAL, T0 + k * INTERVAL),
                    self.tariff,
                )
                for before, after in zip(self.samples[k - 1], row, strict=True)
            ]
            for k, row in enumerate(self.samples)
            if k > 0
        ]
        self.sliding_sums = []
        self.open_windows = []
        for column in zip(*self.intervals, strict=True):
            sliding, aligned = SlidingWindow(WINDOW_SECONDS), AlignedWindows(WINDOW_SECONDS)
            for interval in column:
                self.sliding_sums.append(sliding.add(interval))
                aligned.add(interval)
                self.open_windows.append(aligned.open)

    def run_parse(self) -> int:
        for row in self.texts:
            for text in row:
                self.parse(text)
        return sum(map(len, self.texts))

    def run_deltas(self) -> int:
        for k in range(1, len(self.samples)):
            for before, after in zip(self.samples[k - 1], self.samples[k], strict=True):
                economics.price_interval(
                    interval_between(before, after, T0, T0 + INTERVAL), self.tariff
                )
        return sum(map(len, self.samples[1:]))

    def run_cursor(self) -> int:
        for row in self.samples:
            for sample in row:
                Cursor.of(T0, sample).unpacked()
        return sum(map(len, self.samples))

    def run_sliding(self) -> int:
        for column in zip(*self.intervals, strict=True):
            window = SlidingWindow(WINDOW_SECONDS)
            for interval in column:
                window.add(interval)
        return sum(map(len, self.intervals))

    def run_aligned(self) -> int:
        for column in zip(*self.intervals, strict=True):
            windows = AlignedWindows(WINDOW_SECONDS)
            for interval in column:
                windows.add(interval)
                windows.open  # noqa: B018 (the flush unpacks it)
        return sum(map(len, self.intervals))

    def run_assessment(self) -> int:
        for window in self.sliding_sums:
            economics.assess_window(
                window,
                self.monitor.parameters(window),
                economics.spend_by_model(window, self.tariff),
            )
        return len(self.sliding_sums)

    def run_open_window(self) -> int:
        for window in self.open_windows:
            assessed = economics.AssessedWindow(
                window=window,
                assessments=economics.assess_window(
                    window,
                    self.monitor.parameters(window),
                    economics.spend_by_model(window, self.tariff),
                    latency=False,  # as the monitor assesses what it hands the store
                ),
                spend=economics.spend_by_model(window, self.tariff),
                step_model=self.monitor.step_model(window),
                draft_cost_ratio=0.1,
            )
            window_rows("replica-0", assessed)
        return len(self.open_windows)


def collector() -> SnapshotCollector:
    return SnapshotCollector(dict, lambda: StoreStatus(0, 0))


def exposition(endpoints: int, scrapes: int) -> Callable[[], int]:
    """The daemon's prerender of each endpoint's snapshot, `scrapes` times, as if each were
    new (monitors that have seen three pages, made before, not timed)."""
    watched = monitors(endpoints)
    for k, row in enumerate(pages(endpoints, 3)):
        for monitor, text in zip(watched, row, strict=True):
            monitor.observe_page(T0 + k * INTERVAL, text, 0.01)
    daemon = collector()

    def run() -> int:
        for _ in range(scrapes):
            for monitor in watched:
                daemon._text._fragments_by_endpoint.clear()  # a new snapshot at each scrape
                daemon.prerender(monitor.config.name, monitor.snapshot)
        return endpoints * scrapes

    return run


def run_whole(texts: list[list[str]]) -> int:
    """The monitor's own path: observe_page (and flush, where the monitor has one), then the
    endpoint's lines, as the daemon does for each scrape."""
    watched = monitors(len(texts[0]))
    daemon = collector()
    for k, row in enumerate(texts):
        for monitor, text in zip(watched, row, strict=True):
            monitor.observe_page(T0 + k * INTERVAL, text, 0.01)
            flush = getattr(monitor, "flush", None)
            if flush is not None:
                flush()
            daemon.prerender(monitor.config.name, monitor.snapshot)
    return sum(map(len, texts))


def fetch_cpu(scrapes: int, loop: str = "asyncio") -> float:
    """The client's CPU per scrape through spectax's fetch, against a server in another
    process, 16 scrapes at a time, on asyncio's event loop or uvloop's."""
    from scale import free_port
    from spectax.scrape import fetch, scrape_session

    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", TARGET_SERVER, str(port), str(PAGE)])

    async def measure() -> float:
        url = f"http://127.0.0.1:{port}/metrics"
        async with scrape_session() as session:
            for _ in range(100):  # until the server answers
                try:
                    await fetch(session, url, 10, 10**8)
                    break
                except Exception:  # not listening yet
                    await asyncio.sleep(0.1)
            gate = asyncio.Semaphore(16)

            async def one() -> None:
                async with gate:
                    await fetch(session, url, 10, 10**8)

            started = time.process_time()
            await asyncio.gather(*(one() for _ in range(scrapes)))
            return (time.process_time() - started) / scrapes

    factory = asyncio.new_event_loop
    if loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(measure())
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--endpoints", type=int, default=200)
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-fetch", action="store_true")
    parser.add_argument("--only-fetch", action="store_true")
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    print(f"{args.endpoints} endpoints x {args.scrapes} scrapes, best of {args.repeat}\n")
    figures: dict[str, float] = {}
    if not args.no_fetch:
        figures["fetch"] = min(fetch_cpu(2000, args.loop) for _ in range(args.repeat))
        print(f"fetch on {args.loop}: {figures['fetch'] * 1e6:.0f} us per scrape")
        if args.only_fetch:
            return
    stages = Stages(args.endpoints, args.scrapes)
    timed: dict[str, Callable[[], int]] = {
        "parse": stages.run_parse,
        "deltas": stages.run_deltas,
        "cursor": stages.run_cursor,
        "sliding": stages.run_sliding,
        "aligned": stages.run_aligned,
        "assessment": stages.run_assessment,
        "open window": stages.run_open_window,
        "exposition": exposition(args.endpoints, args.scrapes),
    }
    for name, run in timed.items():
        figures[name] = best_of(args.repeat, run)
    whole = best_of(args.repeat, lambda: run_whole(stages.texts))
    total = sum(figures.values())
    print(f"{'stage':<14}{'us per scrape':>15}{'share':>8}")
    for name, seconds in figures.items():
        print(f"{name:<14}{seconds * 1e6:>15.0f}{seconds / total:>8.0%}")
    print(f"{'sum':<14}{total * 1e6:>15.0f}")
    staged = total - figures.get("fetch", 0.0)
    print(
        f"\nthe monitor's own path (all but fetch): {whole * 1e6:.0f} us per scrape; "
        f"its stages above add up to {staged * 1e6:.0f} us"
    )


if __name__ == "__main__":
    main()
