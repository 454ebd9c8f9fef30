"""Spool start-up: how long a daemon with a large spool left by an earlier run takes to be ready.

The README promises start-up waits at most STARTUP_DRAIN_SECONDS (10 s) for the
spool, then scrapes while the rest drains behind. This writes a spool of real
window rows (recorded vLLM pages fed through a monitor, repeated under other
endpoint names and hours), starts a real `Daemon` on it with a SQLite store in a
temporary directory, and times `Daemon.start()` until /-/ready would answer 200,
with the phases inside it timed apart: reading the spool (`WriteQueue`), the
deadline-bound drain, and resuming the monitors (the spool read again, overlaid).
Then the baseline: the same windows all stored, no spool, the same start-up.

    PYTHONPATH=exporter python bench/spool_startup.py [--rows 50000] [--endpoints 100]

It prints numbers, never fails on them.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import platform
import shutil
import socket
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from spectax.config import validate
from spectax.daemon import STARTUP_DRAIN_SECONDS, Daemon
from spectax.endpoint import EndpointMonitor
from spectax.store import Store
from spectax.store.pending import PendingWrite
from spectax.store.rows import pending_write
from spectax.store.spool import WriteQueue
from spectax.store.writer import STORE_BATCH_ROWS

ROOT = Path(__file__).resolve().parent.parent
PAGES = ROOT / "tests" / "fixtures" / "vllm-0.32.0"
NAMES = [
    "spec_ngram_0_before_traffic.txt",
    "spec_ngram_2_mid.txt",
    "spec_ngram_3_after.txt",
]


def config(state: Path, endpoints: int) -> dict[str, object]:
    return {
        "window": "5m",
        "state_directory": str(state),
        "storage_url": f"sqlite+aiosqlite:///{state}/history.sqlite",
        "listen": f"127.0.0.1:{free_port()}",
        "endpoints": [
            {
                "name": f"e{i}",
                "url": "http://127.0.0.1:1/metrics",  # refused: nothing to scrape here
                "price": {"usd_per_hour": 3.6},
                "speculation": {"method": "ngram"},
            }
            for i in range(endpoints)
        ],
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def one_window() -> PendingWrite:
    """One closed 5-minute window of the recorded pages, as the monitor writes it."""
    settings = validate(config(Path("/nonexistent"), 1))
    endpoint = settings.config.endpoints[0]
    monitor = EndpointMonitor(endpoint, settings.usd_per_hour[endpoint.name], 300.0)
    observed = None
    for t, name in zip((0, 200, 400), NAMES, strict=True):
        observed = monitor.observe_page(t, (PAGES / name).read_text(), 0.01)
    assert observed is not None and observed.cursor is not None
    return pending_write(observed)


def write_spool(path: Path, rows: int, endpoints: int) -> int:
    """A spool of `rows` window rows: each endpoint's windows in a row, one line each."""
    base = one_window()
    assert base.cursor is not None
    lines, written, window = [], 0, 0
    while written < rows:
        for i in range(endpoints):
            shift = timedelta(seconds=300 * window)
            moved = [
                {
                    **row,
                    "endpoint": f"e{i}",
                    "start": row["start"] + shift,
                    "end": row["end"] + shift,
                }
                for row in base.rows
            ]
            cursor = (base.cursor[0] + shift.total_seconds(), base.cursor[1])
            lines.append(PendingWrite(f"e{i}", moved, cursor).to_json() + "\n")
            written += len(moved)
            if written >= rows:
                break
        window += 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines))
    return written


def timed(owner: object, name: str, phases: dict[str, float], phase: str) -> None:
    """Time `owner.name` (a coroutine method) into `phases[phase]`."""
    method = getattr(owner, name)

    async def timing(*args: object, **kwargs: object) -> object:
        t = time.perf_counter()
        try:
            return await method(*args, **kwargs)
        finally:
            phases[phase] = phases.get(phase, 0.0) + time.perf_counter() - t

    setattr(owner, name, timing)


async def main(rows: int, endpoints: int, spool: bool, history_copy: Path | None) -> None:
    logging.basicConfig(level=logging.WARNING)
    print(f"python {platform.python_version()}, {platform.machine()}, {rows} rows wanted")
    if spool:
        await from_a_spool(rows, endpoints)
    await from_the_store(rows, endpoints, history_copy)


async def from_a_spool(rows: int, endpoints: int) -> None:
    """Start-up with the windows in a spool: read, drained within the deadline, overlaid."""
    with tempfile.TemporaryDirectory() as directory:
        state = Path(directory)
        spool = state / "spool.jsonl"
        written = write_spool(spool, rows, endpoints)
        size = spool.stat().st_size
        print(f"spool: {written} rows, {endpoints} endpoints, {size / 1e6:.1f} MB")
        t = time.perf_counter()
        queue = WriteQueue(spool)
        print(f"  reading the spool (WriteQueue): {time.perf_counter() - t:.2f} s")
        t = time.perf_counter()
        pending = list(queue.pending())
        print(f"  reading it back for the monitors (pending): {time.perf_counter() - t:.2f} s")
        del queue, pending
        t = time.perf_counter()
        daemon = Daemon(validate(config(state, endpoints)))
        phases = {"reading the spool": time.perf_counter() - t}
        timed(daemon.writer, "connect", phases, "connecting")
        timed(daemon.writer, "drain", phases, "draining (the deadline)")
        timed(daemon, "_restore", phases, "resuming the monitors")
        t = time.perf_counter()
        await daemon.start()
        ready = time.perf_counter() - t + phases["reading the spool"]
        for phase, seconds in phases.items():
            print(f"  {phase}: {seconds:.2f} s")
        left = daemon.writer.queue.pending_rows
        print(
            f"ready after {ready:.2f} s from the daemon's construction (documented: at most"
            f" {STARTUP_DRAIN_SECONDS:g} s); {written - left} rows written before, {left} left"
            " to drain behind"
        )
        await daemon.stop()


async def from_the_store(rows: int, endpoints: int, history_copy: Path | None) -> None:
    """The baseline: the same windows stored, no spool. Also how long the event loop was held
    at once meanwhile (a ticker's longest wait past its 5 ms), and the main thread's CPU.
    `history_copy`: a file where the stored windows are kept once written (~7 min for a day
    of 2,000 endpoints), and copied from by the next runs of the same size."""
    with tempfile.TemporaryDirectory() as directory:
        state = Path(directory)
        if history_copy is not None and history_copy.exists():
            shutil.copyfile(history_copy, state / "history.sqlite")
        else:
            await write_history(state, rows, endpoints)
            if history_copy is not None:
                shutil.copyfile(state / "history.sqlite", history_copy)
        phases: dict[str, float] = {}
        daemon = Daemon(validate(config(state, endpoints)))
        timed(daemon, "_restore", phases, "resuming the monitors")
        held = [0.0]
        ticker = asyncio.create_task(longest_hold(held))
        t, cpu = time.perf_counter(), time.thread_time()
        await daemon.start()
        ready, cpu = time.perf_counter() - t, time.thread_time() - cpu
        ticker.cancel()
        print(
            f"baseline, the same windows stored and no spool: ready after {ready:.2f} s"
            f" ({cpu:.2f} s of the main thread's CPU), {phases['resuming the monitors']:.2f} s"
            " of it resuming the monitors (each reads back its last 288 windows); the event"
            f" loop held at most {held[0] * 1000:.0f} ms at once"
        )
        await daemon.stop()


async def write_history(state: Path, rows: int, endpoints: int) -> None:
    """The spool's windows written to the store of `state`, as the writer would."""
    write_spool(state / "source.jsonl", rows, endpoints)
    store = await Store.open(validate(config(state, endpoints)).config.database_url)
    batch: list[PendingWrite] = []
    for write in WriteQueue(state / "source.jsonl").pending():
        batch.append(write)
        if len(batch) == STORE_BATCH_ROWS:
            await store.save_many([(w.endpoint, w.rows, w.stored_cursor) for w in batch])
            batch.clear()
    await store.save_many([(w.endpoint, w.rows, w.stored_cursor) for w in batch])
    await store.close()
    (state / "source.jsonl").unlink()


async def longest_hold(held: list[float]) -> None:
    """Keep in `held[0]` the longest a 5 ms sleep overran: the longest the loop was held."""
    while True:
        t = time.perf_counter()
        await asyncio.sleep(0.005)
        held[0] = max(held[0], time.perf_counter() - t - 0.005)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--endpoints", type=int, default=100)
    parser.add_argument(
        "--stored-only",
        action="store_true",
        help="only the baseline: a restart's reading of stored history (e.g. --rows 576000"
        " --endpoints 2000, a day of windows each)",
    )
    parser.add_argument(
        "--history-copy",
        type=Path,
        help="keep the baseline's stored windows in this file once written, and start from a"
        " copy of it when it exists (it must have been written with the same --rows and"
        " --endpoints)",
    )
    args = parser.parse_args()
    asyncio.run(main(args.rows, args.endpoints, not args.stored_only, args.history_copy))
