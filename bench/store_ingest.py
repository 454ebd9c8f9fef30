"""Store ingest: closed windows written per second, SQLite and PostgreSQL, one by one and batched.

At a window boundary every endpoint closes its window at the same aligned
instant: with 2,000 endpoints, 2,000 writes (window rows, the hour marked for
rollup, the cursor) reach the store within one scrape interval. This writes
such a boundary's worth, several times over, through `Store.save` (one
transaction per write, as spectax did before) and through `Store.save_many` in
the daemon's batch size (one transaction per batch), on SQLite and on
PostgreSQL. The rows are real: one endpoint's windows from recorded vLLM
pages fed through a monitor, repeated under other endpoint names.

    python bench/store_ingest.py [--endpoints 2000] [--boundaries 3]
        [--postgres postgresql+asyncpg://postgres@127.0.0.1:5432/postgres]

Then the open windows, stored after every scrape (so that a kill -9 loses no
scraped traffic): at 2,000 endpoints every 15 s, 133 scrapes a second, each an
open window's rows and its cursor, rewritten in place. Written one transaction
per scrape, and as the writer does, one transaction a second
(OPEN_WINDOW_SECONDS) for the scrapes of that second; the figure that matters
is the CPU share at 133 scrapes a second.

PostgreSQL gets a throwaway database (created, then dropped); unreachable, it
is left out with a note. It prints numbers, never fails on them.

With --path SECONDS, only the store's whole path for a scrape's open window, on SQLite: its
rows encoded (`pending_write`), queued (`WriteQueue`, merged per endpoint) and written as
the writer does once a second (`save_many`, the cursor encoded there), for SECONDS seconds
of 2,000 endpoints every 15 s; it prints the CPU per scrape of every thread (aiosqlite's
too). Under callgrind, diff the instructions of --path 3 and --path 0 (issue 31).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from spectax.config import validate
from spectax.endpoint import EndpointMonitor
from spectax.observed import Observed
from spectax.store import Store, WindowWrite
from spectax.store.rows import pending_write
from spectax.store.spool import WriteQueue
from spectax.store.writer import OPEN_WINDOW_SECONDS, STORE_BATCH_ROWS

ROOT = Path(__file__).resolve().parent.parent
PAGES = ROOT / "tests" / "fixtures" / "vllm-0.32.0"
WINDOW = 300.0


def _monitor(speculating: bool = True) -> EndpointMonitor:
    """Endpoint `x`: an H100 at 3.99 USD an hour, 5-minute windows, a drafter if
    `speculating`."""
    endpoint: dict[str, object] = {
        "name": "x",
        "url": "http://127.0.0.1:1/metrics",
        "gpu": "H100 SXM",
        "price": {"usd_per_hour": 3.99},
    }
    if speculating:
        endpoint["speculation"] = {"method": "draft_model", "draft_cost_ratio": 0.1}
    settings = validate({"window": "5m", "endpoints": [endpoint]})
    return EndpointMonitor(settings.config.endpoints[0], settings.usd_per_hour["x"], WINDOW)


def _pages() -> list[str]:
    """Before traffic, then mid-traffic: the pages the endpoint serves in turn."""
    return [
        (PAGES / name).read_text()
        for name in ("spec_draft_0_before_traffic.txt", "spec_draft_2_mid.txt")
    ]


def one_endpoint_writes(boundaries: int) -> list[WindowWrite]:
    """`boundaries` closed 5-minute windows of one endpoint, from recorded pages."""
    monitor = _monitor()
    pages = _pages()
    writes: list[WindowWrite] = []
    t = 1_798_761_600.0  # 2027-01-01, aligned
    monitor.observe_page(t, pages[0], 0.01)
    for step in range(1, boundaries * 20 + 2):  # 15 s scrapes, 20 per window
        observed = monitor.observe_page(t + step * 15.0, pages[step % 2], 0.01)
        if observed is not None and observed.closed:
            write = pending_write(observed)
            writes.append((write.endpoint, write.rows, write.cursor))
    return writes[:boundaries]


def one_endpoint_open_write() -> WindowWrite:
    """One endpoint's open window half-way through, as the daemon queues it after a scrape."""
    monitor = _monitor(speculating=False)
    t = 1_798_761_600.0 + 30 * 86400.0
    for step, page in enumerate(_pages()):
        monitor.observe_page(t + 15.0 * step, page, 0.01)
    observed = monitor.flush()
    assert observed is not None
    write = pending_write(observed)
    return (write.endpoint, write.rows, write.cursor)


def open_window_progress(scrapes: int) -> list[Observed]:
    """What one endpoint's monitor hands the store after each of `scrapes` scrapes (its
    open window assessed, and the cursor), from recorded pages."""
    monitor = _monitor()
    pages = _pages()
    t = 1_798_761_600.0 + 30 * 86400.0
    monitor.observe_page(t, pages[0], 0.01)
    progress = []
    for step in range(1, scrapes + 1):
        monitor.observe_page(t + 15.0 * step, pages[step % 2], 0.01)
        observed = monitor.flush()
        if observed is not None and observed.open_window is not None:
            progress.append(observed)
    return progress


async def store_path(url: str, endpoints: int, seconds: int) -> None:
    """The store's path for `seconds` seconds of open windows (a second's more first, to
    warm up): encoded, queued, and written once a second, as the daemon does."""
    progress = open_window_progress(10)
    per_second = max(1, round(endpoints / 15))
    scrapes = [
        [
            replace(progress[k % len(progress)], endpoint=f"replica-{k % endpoints:05d}")
            for k in range(second * per_second, (second + 1) * per_second)
        ]
        for second in range(seconds + 1)
    ]
    store = await Store.open(url)
    with tempfile.TemporaryDirectory(prefix="spectax-path-") as spool:
        queue = WriteQueue(Path(spool) / "spool.jsonl", 10**6)
        try:
            cpu0 = 0.0
            for second, observed in enumerate(scrapes):
                if second == 1:
                    cpu0 = time.process_time()
                for each in observed:
                    queue.append(pending_write(each))
                while queue:
                    writes = queue.peek(STORE_BATCH_ROWS)
                    await store.save_many([(w.endpoint, w.rows, w.stored_cursor) for w in writes])
                    queue.pop(writes)
            if seconds:
                cpu = time.process_time() - cpu0
                print(
                    f"the store's path: {1e6 * cpu / (seconds * per_second):.0f} us of CPU a"
                    f" scrape ({per_second} scrapes a second, {seconds} s, all threads)"
                )
        finally:
            await store.close()


async def open_windows(url: str, write: WindowWrite, endpoints: int, seconds: int) -> None:
    """`seconds` of open-window writes at `endpoints` scraped every 15 s, both ways."""
    per_second = max(1, round(endpoints / 15))
    store = await Store.open(url)
    try:
        for batched in (False, True):
            cpu0, started, rows = time.process_time(), time.perf_counter(), 0
            for second in range(seconds):
                writes = [
                    (
                        f"replica-{(second * per_second + i) % endpoints:05d}",
                        [
                            {
                                **row,
                                "endpoint": f"replica-{(second * per_second + i) % endpoints:05d}",
                            }
                            for row in write[1]
                        ],
                        write[2],
                    )
                    for i in range(per_second)
                ]
                rows += sum(len(w[1]) for w in writes)
                if batched:
                    await store.save_many(writes)
                else:
                    for w in writes:
                        await store.save_many([w])
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - started
            mode = f"every {OPEN_WINDOW_SECONDS:g} s" if batched else "per scrape"
            print(
                f"{url.split(':', 1)[0]:<20} open windows {mode:<12} {rows:>6} rows "
                f"{rows / wall:>8.0f} rows/s; at {per_second} scrapes/s: "
                f"{100 * cpu / seconds:.1f} % of a core"
            )
    finally:
        await store.close()


def fleet(writes: list[WindowWrite], endpoints: int) -> list[list[WindowWrite]]:
    """Per boundary, every endpoint's write (the same rows under its own name)."""
    return [
        [
            (
                f"replica-{i:05d}",
                [{**row, "endpoint": f"replica-{i:05d}"} for row in rows],
                cursor,
            )
            for i in range(endpoints)
        ]
        for _, rows, cursor in writes
    ]


async def ingest(url: str, boundaries: list[list[WindowWrite]], batched: bool) -> dict[str, Any]:
    store = await Store.open(url)
    rows = 0
    wall = cpu = 0.0
    try:
        for writes in boundaries:
            started, cpu0 = time.perf_counter(), time.process_time()
            if batched:
                batch: list[WindowWrite] = []
                for write in writes:
                    batch.append(write)
                    if sum(len(w[1]) for w in batch) >= STORE_BATCH_ROWS:
                        await store.save_many(batch)
                        batch = []
                if batch:
                    await store.save_many(batch)
            else:
                for endpoint, window_rows, cursor in writes:
                    await store.save(endpoint, window_rows, cursor)
            wall += time.perf_counter() - started
            cpu += time.process_time() - cpu0
            rows += sum(len(w[1]) for w in writes)
        started = time.perf_counter()
        rolled = await store.rollup()
        rollup_wall = time.perf_counter() - started
    finally:
        await store.close()
    return {"rows": rows, "wall": wall, "cpu": cpu, "rolled": rolled, "rollup_wall": rollup_wall}


async def postgres_database(admin_url: str) -> tuple[str, str] | None:
    """A new, empty database on the server at `admin_url`: (its URL, its name)."""
    name = f"spectax_bench_{uuid.uuid4().hex[:8]}"
    engine = create_async_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(f"CREATE DATABASE {name}"))
    except Exception as exc:  # any failure: leave PostgreSQL out
        print(f"postgresql: left out ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
        return None
    finally:
        await engine.dispose()
    return admin_url.rsplit("/", 1)[0] + f"/{name}", name


async def drop_database(admin_url: str, name: str) -> None:
    engine = create_async_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    finally:
        await engine.dispose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--endpoints", type=int, default=2000)
    parser.add_argument("--boundaries", type=int, default=3)
    parser.add_argument(
        "--postgres", default="postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
    )
    parser.add_argument("--path", type=int, default=None, metavar="SECONDS")
    args = parser.parse_args()
    if args.path is not None:
        with tempfile.TemporaryDirectory(prefix="spectax-path-") as work:
            await store_path(f"sqlite+aiosqlite:///{work}/path.sqlite", args.endpoints, args.path)
        return
    boundaries = fleet(one_endpoint_writes(args.boundaries), args.endpoints)
    print(
        f"machine: {platform.platform()}; {os.cpu_count()} CPUs; Python {platform.python_version()}"
    )
    print(
        f"{args.endpoints} endpoints x {args.boundaries} window boundaries, "
        f"{sum(len(w[1]) for b in boundaries for w in b)} window rows; "
        f"batches of {STORE_BATCH_ROWS} rows"
    )
    print(
        f"{'backend':<11} {'mode':<12} {'rows':>7} {'wall s':>8} {'windows/s':>10} {'CPU s':>7}"
        f" {'rollup s':>9} {'periods':>8}"
    )
    results: dict[tuple[str, bool], float] = {}
    created: list[str] = []
    with tempfile.TemporaryDirectory(prefix="spectax-ingest-") as work:
        try:
            runs = []
            for batched in (False, True):
                runs.append(("sqlite", f"sqlite+aiosqlite:///{work}/{batched}.sqlite", batched))
            for batched in (False, True):
                database = await postgres_database(args.postgres)
                if database is None:
                    break
                created.append(database[1])
                runs.append(("postgresql", database[0], batched))
            for backend, url, batched in runs:
                r = await ingest(url, boundaries, batched)
                rate = r["rows"] / r["wall"]
                results[(backend, batched)] = rate
                print(
                    f"{backend:<11} {'batched' if batched else 'one by one':<12} {r['rows']:>7} "
                    f"{r['wall']:>8.2f} {rate:>10.0f} {r['cpu']:>7.2f}"
                    f" {r['rollup_wall']:>9.2f} {r['rolled']:>8}"
                )
                if batched:  # after the boundaries, a month later: no row in common
                    await open_windows(url, one_endpoint_open_write(), args.endpoints, 10)
        finally:
            for name in created:
                await drop_database(args.postgres, name)
    for backend in ("sqlite", "postgresql"):
        if (backend, True) in results:
            ratio = results[(backend, True)] / results[(backend, False)]
            print(f"{backend}: batched / one by one = {ratio:.1f}x")


if __name__ == "__main__":
    asyncio.run(main())
