"""Closed windows on their way to the store: one task writes the queue (spectax.store.spool)
in batches and retries until the database takes them.

Replaying a write twice is harmless: window rows only ever grow (an upsert
never replaces a window with one covering fewer seconds) and the cursor
only moves forward. So a crash while draining the spool just replays it.

A row the database refuses for its values (spectax.store.quarantine) is set
aside and the rest of its batch written: one endpoint's bad value never
stops the others' history. Any other failure, of any type, is counted,
shown in `spectax_store_up`, logged once and retried: the task never dies.

`StoreWriter` is what the daemon starts and stops: it connects (waiting while
the database is away), writes the queue in batches, rolls up and applies
retention, and at shutdown stores what it can and spools the rest. It
writes only while its process leads (spectax.store.leader): a follower's
writes are dropped, and taking over resumes the monitors from the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from spectax.health import LogOnce
from spectax.observed import Observed
from spectax.store.database import StoreDataError, StoreError, StoreUnusable, reason
from spectax.store.leader import POLL_SECONDS, Election, Leadership, leadership
from spectax.store.pending import PendingWrite
from spectax.store.rows import pending_write
from spectax.store.spool import WriteQueue

if TYPE_CHECKING:  # for annotations only: the writer is handed a Store, never opens one
    from spectax.store import Store

__all__ = ["StoreWriter", "WriteQueue"]

STORE_BATCH_ROWS = 200  # window rows per transaction (~40 ms on the event loop)
RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)  # waits after the 1st, 2nd, ... failure in a row
DRAIN_RETRY_SECONDS = 0.5  # while draining with a deadline (start-up, shutdown): retry soon
# A write that takes longer is cancelled and counts as a failure (the store shown down): a
# stalled database (a table locked by another session, a hung disk) raises no error at all.
# 200 rows take ~40 ms (bench/store_ingest.py), so this is 250 times a normal write.
WRITE_BOUND_SECONDS = 10.0
# At shutdown, disconnecting waits this long at most: the unit's TimeoutStopSec must hold.
CLOSE_SECONDS = 2.0
# Open windows are stored at least this often: 2,000 endpoints every 15 s are 133 scrapes a
# second; one transaction each took 1.1 cores on SQLite, one a second 3 % (bench/store_ingest.py)
OPEN_WINDOW_SECONDS = 1.0


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
        self.queue = WriteQueue(spool_path, max_rows, log=log)
        self.store: Store | None = None
        self.write_errors = 0
        self.up = False
        self._open_store = open_store
        self._stopping = stopping
        self._log = log
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._rollup_health = LogOnce(log, "store")
        self.election = Election(Leadership(), self.queue, log)  # who writes: store.leader
        self._contending: asyncio.Task[None] | None = None
        # Wall-clock time of the oldest write waiting (None: nothing waits); a spool left by
        # an earlier run is as old as its first writes say.
        self._oldest_since: float | None = None
        if self.queue:
            self._note_oldest(self.queue.peek(STORE_BATCH_ROWS))

    @property
    def leading(self) -> bool:
        """True while this process writes to the store (spectax.store.leader)."""
        return self.election.leading

    async def connect(self) -> Store | None:
        """Connect, retrying while the database is unreachable; a schema mismatch and a URL
        the server refuses (StoreUnusable) are fatal. None: asked to stop while waiting."""
        health = LogOnce(self._log, "store")
        attempt = 0
        while not self._stopping.is_set():
            try:
                store = await self._open_store()
            except StoreUnusable:  # no such database or role, a bad URL: retrying cannot help
                raise
            except StoreError as exc:
                health.failed("%s; retrying until it answers", exc, level=logging.ERROR)
                attempt += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), _retry_delay(attempt))
                continue
            health.recovered("connected after %d failed attempt(s)", attempt)
            try:
                self.election.lock = leadership(store, self._log)
            except StoreError:  # another process on this SQLite file: fatal, not retried
                await store.close()
                raise
            self.store, self.up = store, True
            try:
                await self.election.begin(store)
            except Exception as exc:  # the database went again: settled at the first write
                self._log.error("store: cannot settle who leads yet: %s", _describe(exc))
            return store
        return None

    async def _contend_loop(self) -> None:
        """Every POLL_SECONDS: a follower tries to lead, the leader checks that it still does
        (spectax.store.leader.Election.settle)."""
        while True:
            await asyncio.sleep(POLL_SECONDS)
            try:
                was_leading = self.election.leading
                if await self.election.settle() and not was_leading:
                    self._wakeup.set()  # what waited (a suspended leader's queue) goes now
            except Exception as exc:  # the store unreadable while taking over: next poll
                self._log.error("store: cannot take over yet: %s", _describe(exc))

    def start(self, take_over: Callable[[], Awaitable[None]] | None = None) -> None:
        """Write in the background from now on, whenever something is queued, while this
        process leads; `take_over` resumes the monitors from the store on becoming leader."""
        self.election.take_over = take_over
        self._task = asyncio.create_task(self._write_loop(), name="store-writer")
        self._contending = asyncio.create_task(self._contend_loop(), name="leader")
        self._wakeup.set()  # a spool left by start-up drains behind the scrapes

    def enqueue(self, observed: Observed | None, wake: bool = True) -> None:
        """Queue what a monitor handed out, as its rows (spectax.store.rows); with `wake` False
        (an open window's progress, at every scrape) it waits for the writer's next pass, at
        most OPEN_WINDOW_SECONDS away. A follower's are dropped before they are encoded."""
        if observed is not None and self.election.accepts:
            self.enqueue_rows(pending_write(observed), wake)

    def enqueue_rows(self, write: PendingWrite, wake: bool = True) -> None:
        """Queue rows already encoded, as `enqueue` does."""
        if self.election.accepts:
            if self._oldest_since is None or not self.queue:
                self._oldest_since = time.time()
            self.queue.append(write)
            if wake:
                self._wakeup.set()

    def oldest_pending_age(self, now: float) -> float:
        """Seconds the oldest write not yet stored has waited (0: none waits): what says the
        store is behind even while each write still succeeds, or hangs without an error."""
        if self._oldest_since is None or not self.queue:
            return 0.0
        return max(0.0, now - self._oldest_since)

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
            left = WRITE_BOUND_SECONDS if deadline is None else deadline - time.monotonic()
            try:  # each attempt ends by the deadline: a write waiting on a lock must not hold it
                await self._write_bounded(min(WRITE_BOUND_SECONDS, max(left, 0.0)))
                self.up = True
            except Exception as exc:  # any failure: retried until the deadline, then spooled
                self.write_errors += 1
                self.up = False
                health.failed("%s; retrying", _describe(exc), level=logging.ERROR)
                await asyncio.sleep(min(DRAIN_RETRY_SECONDS, max(left, 0.0)))

    async def stop(self, last: Iterable[Observed | None], timeout: float) -> None:
        """Stop the background writer, queue `last` (the open windows; taken only now),
        store what is queued within `timeout`, and spool to disk what the database did
        not take."""
        if self._task is not None:
            # A write it had begun stays queued; writes are idempotent. Cancelled again until
            # it ends: a library that swallows one cancellation must not hold the stop.
            while not self._task.done():
                self._task.cancel()
                await asyncio.wait({self._task}, timeout=0.5)
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            # A write cancelled mid-statement leaves its session, cursor and statement in a
            # reference cycle (the exception's traceback holds the frames holding them), and
            # on SQLite they keep the file locked until the cycle collector frees them: no
            # collection may come before the last write, which then waited out the grace and
            # the open window was spooled (issue 31: what reverted 21bcb60).
            gc.collect()
        if self._contending is not None:
            self._contending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._contending
        for observed in last:
            if observed is not None and self.election.accepts:
                self.queue.append(pending_write(observed))
        if self.store is not None:
            await self.drain(timeout)
        self.queue.spill_all()  # what the database did not take waits on disk

    async def close(self) -> None:
        """Disconnect (giving leadership up), CLOSE_SECONDS at most each (a stalled database
        must not hold the stop); say what waits in the spool for the next run."""
        await self._bounded(self.election.close(), "giving up leadership")
        if self.store is not None:
            await self._bounded(self.store.close(), "disconnecting")
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
        if not self.leading:
            return  # the leader rolls up
        try:
            await self.store.rollup()
            await self.store.apply_retention(now, keep)
        except Exception as exc:  # e.g. SQLite locked by another process: the next run resumes
            self._rollup_health.failed("rollup postponed: %s", _describe(exc))
        else:
            self._rollup_health.recovered("rollup done again")

    async def _write_loop(self) -> None:
        health = LogOnce(self._log, "store")
        failures = 0
        while True:
            await self._woken_or_timed_out()
            self._wakeup.clear()
            while self.queue:
                try:
                    await self._write_bounded(WRITE_BOUND_SECONDS)
                    self.up = True
                except Exception as exc:  # any type: the writer must never die silently
                    self.write_errors += 1
                    self.up = False
                    health.failed(
                        "%s; %d write(s) held in memory, retrying",
                        _describe(exc),
                        self.queue.pending_rows,
                        level=logging.ERROR,
                    )
                    failures += 1
                    await asyncio.sleep(_retry_delay(failures))
                    continue
                health.recovered("writing again after %d failed attempt(s)", failures)
                failures = 0

    async def _woken_or_timed_out(self) -> None:
        """Wait for a wake-up, OPEN_WINDOW_SECONDS at most. Not `asyncio.wait_for`: on
        Python 3.11 it can swallow the task's cancellation when the event is set at the same
        moment, and `stop()` then waited forever for this loop (seen in CI: a SIGTERM that
        never finished while scrapes kept waking the writer)."""
        waiter = asyncio.ensure_future(self._wakeup.wait())
        try:
            await asyncio.wait({waiter}, timeout=OPEN_WINDOW_SECONDS)
        finally:
            waiter.cancel()

    async def _bounded(self, closing: Awaitable[None], what: str) -> None:
        try:
            async with asyncio.timeout(CLOSE_SECONDS):
                await closing
        except TimeoutError:
            self._log.error("store: %s took over %g s; stopping without it", what, CLOSE_SECONDS)

    async def _write_bounded(self, seconds: float) -> None:
        """`_write_batch`, cancelled after `seconds` (a write is idempotent: retrying one that
        was cut short is harmless). A database stalled on a lock raises nothing: unbounded,
        `spectax_store_up` stayed 1 while windows piled up, and SIGTERM waited for the lock."""
        try:
            async with asyncio.timeout(seconds):
                await self._write_batch()
        except TimeoutError:
            raise StoreError(
                f"a write took over {seconds:g} s, cut short: the database is stalled"
                " (a table locked by another session? its disk or network hanging?)"
            ) from None

    async def _write_batch(self) -> None:
        """Store the oldest queued writes in one transaction (bench/store_ingest.py: at a
        window boundary thousands of endpoints close their windows at once)."""
        if not await self.election.settle():  # a leader whose session died stops here
            if self.election.accepts:  # suspended: the database is away, as in any outage
                raise StoreError("the database cannot say who leads; writes wait")
            self.queue.discard()  # a follower's: the leader writes them
            return
        writes = self.queue.peek(STORE_BATCH_ROWS)
        if writes:
            self._note_oldest(writes)
            await self._save(writes)
            self.queue.pop(writes)
            if not self.queue:
                self._oldest_since = None

    def _note_oldest(self, head: list[PendingWrite]) -> None:
        """The oldest writes queued (`head`, the next batch) date the queue: the time of
        their scrape (their cursor), else of their last window's end."""
        times = [_written_at(write) for write in head]
        self._oldest_since = min(times) if times else None

    async def _save(self, writes: list[PendingWrite]) -> None:
        """Write `writes` in one transaction; if the database refuses a value, halve and
        retry each half, down to the refused rows, which are quarantined: finding one bad
        row among 200 costs ~8 more transactions (log2 200), not 200. An outage (StoreError)
        propagates, and the whole batch is retried later."""
        assert self.store is not None
        try:
            await self.store.save_many([(w.endpoint, w.rows, w.stored_cursor) for w in writes])
            self.election.written(writes)
        except StoreDataError as exc:
            only = writes[0] if len(writes) == 1 else None
            if only is not None and not only.rows:  # the cursor itself is refused
                self.queue.quarantine.add(only, str(exc))
                return
            if only is not None and len(only.rows) == 1:
                self.queue.quarantine.add(PendingWrite(only.endpoint, only.rows, None), str(exc))
                if only.cursor is not None:  # the cursor may be fine on its own
                    await self._save([PendingWrite(only.endpoint, [], only.cursor)])
                return
            for half in _halves(writes):
                await self._save(half)


def _halves(writes: list[PendingWrite]) -> tuple[list[PendingWrite], list[PendingWrite]]:
    """Two halves of a batch, in order; one write is split between its rows (its cursor
    goes with the second half, written after the first)."""
    if len(writes) > 1:
        return writes[: len(writes) // 2], writes[len(writes) // 2 :]
    [write] = writes
    cut = len(write.rows) // 2
    return (
        [PendingWrite(write.endpoint, write.rows[:cut], None)],
        [PendingWrite(write.endpoint, write.rows[cut:], write.cursor)],
    )


def _written_at(write: PendingWrite) -> float:
    """When `write` was made: its scrape (the cursor's time), else its last window's end."""
    if (at := write.cursor_time) is not None:  # its sample left undecoded
        return at
    ends = [row["end"].timestamp() for row in write.rows if "end" in row]
    return max(ends) if ends else time.time()


def _describe(exc: Exception) -> str:
    """A failure in one line: a StoreError's own message, otherwise the exception's type and
    first line (never the SQL, which may hold the values of a row)."""
    return str(exc) if isinstance(exc, StoreError) else reason(exc)


def _retry_delay(failures: int) -> float:
    """The wait after the `failures`-th failure in a row: growing, then 30 s."""
    return RETRY_SECONDS[min(failures, len(RETRY_SECONDS)) - 1]
