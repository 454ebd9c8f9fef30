"""`/metrics` at N endpoints, the request's own work: the page gathered, then gzipped, and
how much memory the request takes at its peak.

N monitors fed two recorded vLLM pages (tests/fixtures/vllm-0.32.0) give N snapshots; the
collector renders the page as a request does (`SnapshotCollector.render_page`), then
gzips it a part at a time as `web.py` does (both on the event loop since 2026-12-05; the
gzip was a worker thread's before). Each endpoint's snapshot is replaced before every
read, as in direct mode where every scrape replaces one, so every read formats and
compresses a fresh page. No HTTP: bench/scale.py measures the whole read beside the
scrapes.

    PYTHONPATH=exporter python bench/render.py [--endpoints 2000] [--reads 20]

It prints numbers, never fails on them.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import time
import tracemalloc
from pathlib import Path

from spectax.config import validate
from spectax.endpoint import EndpointMonitor
from spectax.exposition import SnapshotCollector, StoreStatus
from spectax.web import gzip_parts

PAGES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "vllm-0.32.0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--endpoints", type=int, default=2000)
    parser.add_argument("--reads", type=int, default=20)
    args = parser.parse_args()
    args.reads = max(args.reads, 1)
    endpoints = [
        {
            "name": f"replica-{i:05d}",
            "url": f"http://127.0.0.1:{1000 + i}/metrics",
            "gpu": "H100 SXM",
            "price": {"usd_per_hour": 3.99},
            "speculation": {"method": "draft_model", "draft_cost_ratio": 0.1},
        }
        for i in range(args.endpoints)
    ]
    settings = validate({"window": "5m", "endpoints": endpoints})
    monitors = {
        e.name: EndpointMonitor(e, settings.usd_per_hour.get(e.name), 300.0)
        for e in settings.config.endpoints
    }
    before = (PAGES / "spec_draft_2_mid.txt").read_text()
    after = (PAGES / "spec_draft_3_after.txt").read_text()
    for monitor in monitors.values():
        monitor.observe_page(0.0, before, 0.01)
        monitor.observe_page(15.0, after, 0.01)
    collector = SnapshotCollector(
        lambda: {name: m.snapshot for name, m in monitors.items()}, lambda: StoreStatus(0, 0)
    )
    loop_ms, worker_ms, whole_loop_ms, whole_worker_ms = [], [], [], []
    size = zipped = 0
    peak = 0.0
    for read in range(args.reads + 1):  # the last read traced, for its memory only
        for monitor in monitors.values():  # every snapshot new, as after a round of scrapes
            monitor.observe_page(30.0 + read, after, 0.01)
            collector.prerender(monitor.config.name, monitor.snapshot)
        traced = read == args.reads
        if traced:
            tracemalloc.start()
        started = time.perf_counter()
        page = collector.render_page()
        gathered = time.perf_counter()
        compressed = gzip_parts(page.blocks)
        done = time.perf_counter()
        if traced:
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
            break
        loop_ms.append((gathered - started) * 1000)
        worker_ms.append((done - gathered) * 1000)
        # The way before (until 2026-12-03): the page joined whole on the loop, then gzipped.
        started = time.perf_counter()
        body = b"".join(collector.render_page().parts)
        joined = time.perf_counter()
        gzip.compress(body, 1, mtime=0)
        whole_loop_ms.append((joined - started) * 1000)
        whole_worker_ms.append((time.perf_counter() - joined) * 1000)
        del body
        zipped = len(compressed)
        size = len(gzip.decompress(compressed))
    print(f"{args.endpoints} endpoints, {args.reads} reads, each of a fresh page")
    print(f"page {size / 1e6:.2f} MB, gzipped {zipped / 1e6:.2f} MB")
    for what, values in (
        ("gathered", loop_ms),
        ("gzipped a part at a time", worker_ms),
        ("whole page (before): on the event loop", whole_loop_ms),
        ("whole page (before): gzip in the worker", whole_worker_ms),
    ):
        print(f"{what}: median {statistics.median(values):.1f} ms, max {max(values):.1f} ms")
    print(f"peak memory a read allocates (tracemalloc): {peak:.1f} MiB")


if __name__ == "__main__":
    main()
