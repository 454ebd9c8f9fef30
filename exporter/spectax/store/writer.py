"""Closed windows on their way to the store: in memory up to a bound, then in a spool file,
written by one task that retries until the database takes them.

While the database is unreachable, writes wait here in order. Past
`max_rows` rows in memory, the oldest writes move to a JSON-lines spool
file in the state directory (written and fsynced before they leave memory),
so a long outage costs disk, not memory, and nothing is dropped. The spool
is always older than what is in memory; it is drained first.

Replaying a write twice is harmless: window rows only ever grow (an upsert
never replaces a window with one covering fewer seconds) and the cursor
only moves forward. So a crash while draining the spool just replays it.

`StoreWriter` is what the daemon starts and stops: it connects (waiting while
the database is away), writes the queue in batches, rolls up and applies
retention, and at shutdown stores what it can and spools the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spectax.engines.base import EngineSample
from spectax.health import LogOnce
from spectax.store.cursor import decode_sample, encode_sample
from spectax.store.db import StoreError

if TYPE_CHECKING:  # the store's rooms import the row codec, which imports PendingWrite
    from spectax.store import Store

STORE_BATCH_ROWS = 200  # window rows per transaction (~40 ms on the event loop)
RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)  # waits after the 1st, 2nd, ... failure in a row
DRAIN_RETRY_SECONDS = 0.5  # while draining with a deadline (start-up, shutdown): retry soon
# Open windows are stored at least this often: 2,000 endpoints every 15 s are 133 scrapes a
# second; one transaction each took 1.1 cores on SQLite, one a second 3 % (bench/store_ingest.py)
OPEN_WINDOW_SECONDS = 1.0


class PendingWrite:
    """Rows of closed windows of one endpoint, and the cursor that goes with them."""

    __slots__ = ("cursor", "endpoint", "rows")

    def __init__(
        self,
        endpoint: str,
        rows: list[dict[str, Any]],
        cursor: tuple[float, EngineSample] | None,
    ):
        self.endpoint = endpoint
        self.rows = rows
        self.cursor = cursor

    def to_json(self) -> str:
        cursor = None
        if self.cursor is not None:
            cursor = [self.cursor[0], encode_sample(self.cursor[1])]
        rows = [{k: _encode(v) for k, v in row.items()} for row in self.rows]
        return json.dumps({"endpoint": self.endpoint, "rows": rows, "cursor": cursor})

    @classmethod
    def from_json(cls, line: str) -> PendingWrite:
        data = json.loads(line)
        cursor = None
        if data["cursor"] is not None:
            cursor = (float(data["cursor"][0]), decode_sample(data["cursor"][1]))
        rows = [{k: _decode(k, v) for k, v in row.items()} for row in data["rows"]]
        return cls(data["endpoint"], rows, cursor)

    def absorb(self, later: PendingWrite) -> None:
        """Take in a later write of the same endpoint, as if written after this one: a
        window's later rows replace its earlier ones (a window only grows), the later cursor
        wins. So an endpoint's open window, queued at every scrape, waits once, not once per
        scrape."""
        rows = {(row["model"], row["start"]): row for row in self.rows}
        rows.update(((row["model"], row["start"]), row) for row in later.rows)
        self.rows = list(rows.values())
        if later.cursor is not None and (self.cursor is None or later.cursor[0] >= self.cursor[0]):
            self.cursor = later.cursor


class WriteQueue:
    def __init__(self, spool_path: Path, max_rows: int = 10_000):
        self.spool_path = spool_path
        self.max_rows = max_rows
        self._memory: deque[PendingWrite] = deque()
        self._memory_rows = 0
        # per endpoint, its write in memory that the writer has not taken yet: the next one
        # merges into it (PendingWrite.absorb)
        self._mergeable: dict[str, PendingWrite] = {}
        self._spooled_rows = 0
        self._spool_offset = 0  # bytes of the spool already written to the store
        # the next spool writes and the offset where they end
        self._head: tuple[list[PendingWrite], int] | None = None
        if spool_path.exists() and spool_path.stat().st_size > 0:
            self._spooled_rows = sum(len(w.rows) or 1 for w in self._read_spool())

    @property
    def pending_rows(self) -> int:
        return self._memory_rows + self._spooled_rows

    def __bool__(self) -> bool:
        return bool(self._memory) or self._spool_has_more()

    def append(self, write: PendingWrite) -> None:
        waiting = self._mergeable.get(write.endpoint)
        if waiting is not None:
            self._memory_rows -= len(waiting.rows) or 1
            waiting.absorb(write)
            self._memory_rows += len(waiting.rows) or 1
        else:
            self._memory.append(write)
            self._mergeable[write.endpoint] = write
            self._memory_rows += len(write.rows) or 1
        if self._memory_rows > self.max_rows:
            self._spill()

    def peek(self, max_rows: int = 1) -> list[PendingWrite]:
        """The oldest writes, up to `max_rows` rows (always at least one write when there is
        one): from the spool while it has any, then from memory; never both at once."""
        if self._spool_has_more():
            if self._head is None:
                batch, offset = [], self._spool_offset
                with self.spool_path.open("rb") as spool:
                    spool.seek(offset)
                    rows = 0
                    while rows < max_rows and (line := spool.readline()):
                        write = PendingWrite.from_json(line.decode())
                        batch.append(write)
                        rows += len(write.rows) or 1
                        offset += len(line)
                self._head = (batch, offset)
            return list(self._head[0])
        batch, rows = [], 0
        for write in self._memory:
            if batch and rows + (len(write.rows) or 1) > max_rows:
                break
            batch.append(write)
            rows += len(write.rows) or 1
        for write in batch:  # being written now: what comes next queues behind them
            self._forget_mergeable(write)
        return batch

    def pop(self, written: list[PendingWrite]) -> None:
        """Forget `written`, the writes `peek` returned: they are in the store now.

        While they were being written, new writes may have pushed some of them
        from memory into the spool (the oldest first); then nothing is
        forgotten here (they will be written once more from the spool, which
        is harmless), and above all no other write may be dropped in their place.
        """
        if not written:
            return
        if self._head is not None and self._head[0] == written:
            self._spool_offset = self._head[1]
            self._head = None
            self._spooled_rows -= sum(len(w.rows) or 1 for w in written)
            if not self._spool_has_more():
                self.spool_path.unlink(missing_ok=True)
                self._spool_offset = self._spooled_rows = 0
        elif self._memory and self._memory[0] is written[0]:
            for write in written:
                assert self._memory[0] is write, "the oldest writes in memory are the peeked ones"
                self._memory.popleft()
                self._memory_rows -= len(write.rows) or 1

    def spill_all(self) -> None:
        """Move everything still in memory to the spool (at shutdown, with the store away)."""
        if self._memory:
            self._spill(keep_rows=0)

    def _spool_has_more(self) -> bool:
        try:
            return self.spool_path.stat().st_size > self._spool_offset
        except FileNotFoundError:
            return False

    def _spill(self, keep_rows: int | None = None) -> None:
        """Move the oldest writes from memory to the end of the spool, durably."""
        keep = self.max_rows // 2 if keep_rows is None else keep_rows
        self.spool_path.parent.mkdir(parents=True, exist_ok=True)
        moved = []
        while self._memory and self._memory_rows > keep:
            write = self._memory.popleft()
            self._memory_rows -= len(write.rows) or 1
            self._forget_mergeable(write)
            moved.append(write)
        with self.spool_path.open("ab") as spool:
            for write in moved:
                spool.write(write.to_json().encode() + b"\n")
            spool.flush()
            os.fsync(spool.fileno())
        self._spooled_rows += sum(len(w.rows) or 1 for w in moved)

    def _forget_mergeable(self, write: PendingWrite) -> None:
        if self._mergeable.get(write.endpoint) is write:
            del self._mergeable[write.endpoint]

    def _read_spool(self) -> list[PendingWrite]:
        with self.spool_path.open(encoding="utf-8") as spool:
            return [PendingWrite.from_json(line) for line in spool if line.strip()]


class StoreWriter:
    """The one way closed windows reach the database, in order, in batches, retried.

    A failure is logged once and the recovery once (spectax.health.LogOnce), through
    `log`, the daemon's logger, so that these lines read as they always have.
    """

    def __init__(
        self,
        open_store: Callable[[], Awaitable[Store]],
        spool_path: Path,
        max_rows: int,
        stopping: asyncio.Event,
        log: logging.Logger,
    ):
        """`open_store` connects (`Store.open` of the configured URL); `stopping` set: stop
        waiting for the database (connect, drain without deadline)."""
        self.queue = WriteQueue(spool_path, max_rows)
        self.store: Store | None = None
        self.write_errors = 0
        self.up = False
        self._open_store = open_store
        self._stopping = stopping
        self._log = log
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def connect(self) -> Store | None:
        """Connect, retrying while the database is unreachable; a schema mismatch is fatal.
        None: asked to stop while waiting."""
        health = LogOnce(self._log, "store")
        attempt = 0
        while not self._stopping.is_set():
            try:
                store = await self._open_store()
            except StoreError as exc:
                health.failed("%s; retrying until it answers", exc, level=logging.ERROR)
                attempt += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), _retry_delay(attempt))
                continue
            health.recovered("connected after %d failed attempt(s)", attempt)
            self.store, self.up = store, True
            return store
        return None

    def start(self) -> None:
        """Write in the background from now on, whenever something is queued."""
        self._task = asyncio.create_task(self._write_loop(), name="store-writer")

    def enqueue(self, write: PendingWrite | None, wake: bool = True) -> None:
        """Queue `write`; with `wake` False (an open window's progress, at every scrape) it
        waits for the writer's next pass, at most OPEN_WINDOW_SECONDS away."""
        if write is not None:
            self.queue.append(write)
            if wake:
                self._wakeup.set()

    async def settle(self, timeout: float) -> None:
        """Wait (bounded) until the background writer has stored what is queued."""
        self._wakeup.set()
        deadline = time.monotonic() + timeout
        while self.queue and time.monotonic() < deadline:  # noqa: ASYNC110 (no event for it)
            await asyncio.sleep(0.02)

    async def drain(self, timeout: float | None) -> None:
        """Write what is queued (the spool first), retrying; give up after `timeout` seconds
        (what is left is then spooled to disk by `stop`), or never when it is None."""
        health = LogOnce(self._log, "store")
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.queue and (deadline is None or time.monotonic() < deadline):
            if self._stopping.is_set() and deadline is None:
                return
            try:
                await self._write_batch()
            except StoreError as exc:
                self.write_errors += 1
                health.failed("%s; retrying", exc, level=logging.ERROR)
                await asyncio.sleep(DRAIN_RETRY_SECONDS)

    async def stop(self, last: Iterable[PendingWrite | None], timeout: float) -> None:
        """Stop the background writer, queue `last` (the open windows; taken only now),
        store what is queued within `timeout`, and spool to disk what the database did
        not take."""
        if self._task is not None:
            self._task.cancel()  # a write it had begun stays queued; writes are idempotent
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for write in last:
            if write is not None:
                self.queue.append(write)
        if self.store is not None:
            await self.drain(timeout)
        self.queue.spill_all()  # what the database did not take waits on disk

    async def close(self) -> None:
        """Disconnect; say what waits in the spool for the next run."""
        if self.store is not None:
            await self.store.close()
        if self.queue:
            self._log.error(
                "spectax stopped with %d window row(s) not yet stored; they wait in %s",
                self.queue.pending_rows,
                self.queue.spool_path,
            )

    async def maintain(self, now: datetime, keep: dict[str, float | None]) -> None:
        """Roll windows into hours and days, then apply retention (`keep`: seconds per
        granularity). A failure waits for the next run: rollups resume where they stopped."""
        assert self.store is not None
        try:
            await self.store.rollup()
            await self.store.apply_retention(now, keep)
        except StoreError as exc:
            self._log.warning("store: rollup postponed: %s", exc)

    async def _write_loop(self) -> None:
        health = LogOnce(self._log, "store")
        failures = 0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), OPEN_WINDOW_SECONDS)
            self._wakeup.clear()
            while self.queue:
                try:
                    await self._write_batch()
                    self.up = True
                except StoreError as exc:
                    self.write_errors += 1
                    self.up = False
                    health.failed(
                        "%s; %d write(s) held in memory, retrying",
                        exc,
                        self.queue.pending_rows,
                        level=logging.ERROR,
                    )
                    failures += 1
                    await asyncio.sleep(_retry_delay(failures))
                    continue
                health.recovered("writing again after %d failed attempt(s)", failures)
                failures = 0

    async def _write_batch(self) -> None:
        """Store the oldest queued writes in one transaction (bench/store_ingest.py: at a
        window boundary thousands of endpoints close their windows at once)."""
        assert self.store is not None
        writes = self.queue.peek(STORE_BATCH_ROWS)
        if writes:
            await self.store.save_many([(w.endpoint, w.rows, w.cursor) for w in writes])
            self.queue.pop(writes)


def _retry_delay(failures: int) -> float:
    """The wait after the `failures`-th failure in a row: growing, then 30 s."""
    return RETRY_SECONDS[min(failures, len(RETRY_SECONDS)) - 1]


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, Decimal):
        return {"decimal": str(value)}
    return value


def _decode(key: str, value: Any) -> Any:
    if isinstance(value, dict):
        if "datetime" in value:
            return datetime.fromisoformat(value["datetime"])
        if "decimal" in value:
            return Decimal(value["decimal"])
    return value
