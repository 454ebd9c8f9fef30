"""Which spectax process writes to the store: one at a time, whatever the number running.

Two spectax processes on one PostgreSQL database (an HA pair) both scrape,
compute and serve /metrics; only the leader writes windows, cursors,
rollups, profiles and billing lines. The leader is whoever holds a session
advisory lock (`pg_try_advisory_lock`) on a connection of its own: no table,
no lease to renew, and PostgreSQL releases it the moment the session ends,
so a leader killed with -9 (its socket closed by the kernel) hands over at
the follower's next poll. A host that vanishes without closing its socket
is noticed by the server's TCP keepalives (set per session below).

The leader confirms the lock before each batch it writes (spectax.store.writer), and
each window write checks it again inside its transaction (`AdvisoryLock.fence`),
where a new leader waits for it before reading the store: a leader whose session
ended (killed by an administrator, a proxy, a timeout) while it lives on writes
nothing more, and nothing it wrote is missed by its successor. A follower drops what
it computes: on taking over it resumes every endpoint from what the last leader
stored, as a restart does (Store.restore), so the window the leader was writing is
finished from its stored cursor, the windows it wrote are not written again, and no
traffic is counted twice or lost.

A leader that loses its lock with the database (an outage, a server restart)
cannot tell yet whether the other process will take over: it is suspended,
keeps queueing and spooling as in any outage, and when the database is back
either wins the lock again, and if no cursor moved meanwhile writes its queue
(nothing lost, as with one process), or finds another leader or moved cursors,
and drops its queue: the other process wrote that traffic from its own cursor.

SQLite stays one process: a second `spectax run` on the same file is refused
by a lock file beside it naming the process that holds it. Reading it
(`spectax report`, `spectax db`) stays allowed: only `run` takes the lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from enum import Enum
from pathlib import Path
from typing import IO, TYPE_CHECKING

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from spectax.store.database import DATABASE_ERRORS, Database, StoreError, reason
from spectax.store.pending import PendingWrite
from spectax.store.spool import WriteQueue

if TYPE_CHECKING:
    from spectax.store.window_history import WindowHistory

#: The advisory lock's key ("SPECTAX" in ASCII, then 1). Advisory locks are per database:
#: pairs on different databases of one server do not see each other.
LOCK_KEY = 0x53_50_45_43_54_41_58_01
#: A second key: each write of the leader holds it shared for its transaction, and a new
#: leader takes it once, exclusively, before reading the store, so that a write of the old
#: leader still in flight when its session ended is in what the new one resumes from.
FENCE_KEY = LOCK_KEY + 1
FENCE_WAIT_SECONDS = 10.0
#: How often a follower tries the lock, and a leader checks its session between batches.
POLL_SECONDS = 2.0
# The server drops a silent session after about 5 + 3 * 2 s: a leader whose host vanished
# without closing its socket releases the lock then (defaults: two hours, per the kernel).
KEEPALIVES = ("tcp_keepalives_idle = 5", "tcp_keepalives_interval = 2", "tcp_keepalives_count = 3")


class StoreLocked(StoreError):
    """Another spectax process already runs on this SQLite file."""


class NotLeader(StoreError):
    """A write refused inside its transaction: this process's lock session has ended."""


class Leadership:
    """The lock itself; this base always holds it (a store in memory: one process).
    Whether writes are taken is the Election's to say (below): holding the lock again
    after losing it is not leading until the queue is checked or the monitors resumed."""

    #: Whether another process can hold it (then what it wrote must be looked for).
    shared = False

    async def contend(self) -> bool | None:
        """Try to lead (a follower) or check that it still does (the leader): True if it
        holds the lock now, False if another process does, None if the database cannot
        be asked (then nobody knows). Never raises."""
        return True

    async def close(self) -> None:
        """Give leadership up (the next process takes it)."""


class FileLock(Leadership):
    """SQLite: an exclusive `flock` on `<database>.lock`, which holds the holder's pid.

    SQLite itself would let two processes write the same file in turns, each
    with its own cursors and windows: the history would count traffic twice.
    """

    def __init__(self, database: Path):
        self.path = database.with_name(database.name + ".lock")
        self._file: IO[str] | None = open(self.path, "a+")  # noqa: SIM115 (held until close)
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip() or "unknown"
            self._file.close()
            self._file = None
            raise StoreLocked(
                f"another spectax process (pid {holder}) is running on {database};"
                " SQLite takes one spectax process: stop it, or run a pair on PostgreSQL"
                " (docs/ha.md)"
            ) from None
        self._file.seek(0)
        self._file.truncate()
        self._file.write(f"{os.getpid()}\n")
        self._file.flush()

    async def close(self) -> None:
        if self._file is not None:
            self._file.close()  # releases the lock; the file stays (another may hold it now)
            self._file = None


class AdvisoryLock(Leadership):
    """PostgreSQL: a session advisory lock held on a connection of its own."""

    shared = True

    def __init__(self, store: Database, log: logging.Logger):
        self._store = store
        self._log = log
        self._connection: AsyncConnection | None = None
        self._held = False
        self._pid: int | None = None  # the lock session's server process
        self._turn = asyncio.Lock()  # the writer and the poll share one connection
        store.write_guard = self.fence

    async def contend(self) -> bool | None:
        async with self._turn:
            return await self._contend()

    async def _contend(self) -> bool | None:
        try:
            if self._connection is None:
                self._connection = await self._store.dedicated_connection()
                for setting in KEEPALIVES:
                    await self._connection.execute(text(f"SET {setting}"))
            if self._held:
                await self._connection.execute(text("SELECT 1"))  # the session, so the lock
            else:
                won = await self._connection.execute(
                    text("SELECT pg_try_advisory_lock(:key), pg_backend_pid()"), {"key": LOCK_KEY}
                )
                held, self._pid = won.one()
                if held:  # the old leader's writes in flight end before anything is read
                    await self._wait_for_writes_in_flight(self._connection)
                self._held = bool(held)
        except DATABASE_ERRORS as exc:
            if self._held:
                self._log.error("store: lost the leader's lock: %s", reason(exc))
            await self._disconnect()
            return None
        return self._held

    async def _wait_for_writes_in_flight(self, connection: AsyncConnection) -> None:
        """Take the fence key once, exclusively: every write transaction of the old leader
        holds it shared, so this waits for them (FENCE_WAIT_SECONDS at most: one stuck on a
        vanished host is dropped by the server later, and would be refused by `fence`)."""
        deadline = time.monotonic() + FENCE_WAIT_SECONDS
        key = {"key": FENCE_KEY}
        while not (
            await connection.execute(text("SELECT pg_try_advisory_lock(:key)"), key)
        ).scalar():
            if time.monotonic() > deadline:
                self._log.warning("store: a write of the old leader is still open; leading anyway")
                return
            await asyncio.sleep(0.1)
        await connection.execute(text("SELECT pg_advisory_unlock(:key)"), key)

    async def fence(self, connection: AsyncConnection) -> None:
        """In a write's transaction: hold the fence key shared (a new leader waits for this
        transaction before it reads), then check that this process's lock session holds
        the lock: a leader whose session ended writes nothing more, not even a batch that
        had passed `contend` already."""
        await connection.execute(
            text("SELECT pg_advisory_xact_lock_shared(:key)"), {"key": FENCE_KEY}
        )  # first, in a statement of its own: the check below must come after it
        held = await connection.execute(
            text(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND pid = :pid AND classid = :high AND objid = :low AND objsubid = 1"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))"
            ),
            {"pid": self._pid, "high": LOCK_KEY >> 32, "low": LOCK_KEY & 0xFFFFFFFF},
        )
        if not held.scalar():
            raise NotLeader("this process no longer holds the leader's lock: not written")

    async def close(self) -> None:
        async with self._turn:
            await self._disconnect()  # the session ends: the lock goes with it

    async def _disconnect(self) -> None:
        self._held = False
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(*DATABASE_ERRORS):
                await connection.invalidate()  # not back to a pool: the session must end
            with contextlib.suppress(*DATABASE_ERRORS):
                await connection.close()


def leadership(store: Database, log: logging.Logger) -> Leadership:
    """The leadership that suits the store: raises StoreLocked when another process runs on
    the same SQLite file."""
    if store.backend == "postgresql":
        return AdvisoryLock(store, log)
    path = store.sqlite_path
    return FileLock(path) if path is not None else Leadership()


class Role(Enum):
    LEADER = "leader"  # holds the lock: writes
    SUSPENDED = "suspended"  # was the leader, lost the lock with the database: queues, waits
    FOLLOWER = "follower"  # another process leads: drops its writes


class Election:
    """This process's role, settled from the lock before each batch and at every poll.

    `take_over` (the daemon's: resume every monitor from the store) runs before
    the first write of a new leader, and no write of the follower's is queued
    meanwhile, so that nothing computed while following reaches the store.
    """

    def __init__(self, lock: Leadership, queue: WriteQueue, log: logging.Logger):
        self.lock = lock
        # Not leading until the lock is won (`begin`): a process still waiting for its
        # database must not show spectax_leader 1, or an HA pair's alert on no leader never
        # fires; its writes are queued meanwhile, as a suspended leader's are.
        self.role = Role.SUSPENDED
        self.take_over: Callable[[], Awaitable[None]] | None = None
        self._queue = queue
        self._log = log
        self._store: WindowHistory | None = None
        # The cursors as this leader left them (endpoint -> observed_at): if they are the
        # same when it wins the lock again, no other process wrote in between. None: not
        # known (start-up), then its spool is checked against the stored cursors instead.
        self._cursors: dict[str, float] | None = None
        self._settling = asyncio.Lock()  # the writer and the poll: one settles at a time

    @property
    def leading(self) -> bool:
        return self.role is Role.LEADER

    @property
    def accepts(self) -> bool:
        """Whether writes are queued: not while following."""
        return self.role is not Role.FOLLOWER

    async def begin(self, store: WindowHistory) -> None:
        """At start-up, before the spool is written: settle the role, keeping the spool
        only when no other process wrote after it."""
        self._store = store
        self.role = Role.SUSPENDED
        await self.settle()

    async def settle(self) -> bool:
        """Ask the lock; True: this process may write now."""
        async with self._settling:
            held = await self.lock.contend()
            if held is None:
                if self.role is Role.LEADER:
                    self.role = Role.SUSPENDED
                    self._log.warning(
                        "store: the leader's lock went with its database session: windows wait"
                        " queued until the database says who leads"
                    )
                return False
            if not held:
                if self.role is not Role.FOLLOWER:
                    self.role = Role.FOLLOWER
                    self._drop("another spectax process leads")
                    self._log.warning("store: following: serving /metrics, writing nothing")
                return False
            if self.role is Role.LEADER:
                return True
            await self._lead()
            return True

    def written(self, writes: Iterable[PendingWrite]) -> None:
        """Note the cursors a batch moved (as the store does: only forward)."""
        if self._cursors is not None:
            for write in writes:
                if (at := write.cursor_time) is not None:  # its sample left undecoded
                    before = self._cursors.get(write.endpoint, at)
                    self._cursors[write.endpoint] = max(before, at)

    async def close(self) -> None:
        await self.lock.close()

    async def _lead(self) -> None:
        """The lock is won: carry on with the queue if nobody wrote since, else take over."""
        assert self._store is not None
        stored = await self._store.cursor_times() if self.lock.shared else {}
        if self.role is Role.SUSPENDED and (
            not self.lock.shared or self._queue_still_holds(stored)
        ):
            if rows := self._queue.pending_rows:
                self._log.info("store: leading, writing %d queued row(s): no other wrote", rows)
        else:
            self.role = Role.FOLLOWER  # nothing is queued while the monitors are resumed
            self._drop("another process wrote since these were queued")
            if self.take_over is not None:
                await self.take_over()
            self._log.warning("store: leading: this process writes windows and rollups now")
        self._cursors, self.role = stored, Role.LEADER

    def _queue_still_holds(self, stored: dict[str, float]) -> bool:
        if self._cursors is not None:
            return stored == self._cursors
        # Start-up: another leader's cursors are later than anything this process spooled
        # before it stopped; its own replay leaves them at or before its last one.
        latest: dict[str, float] = {}
        for write in self._queue.pending():
            if write.cursor is not None:
                latest[write.endpoint] = max(latest.get(write.endpoint, 0.0), write.cursor[0])
        return all(stored.get(endpoint, 0.0) <= t for endpoint, t in latest.items())

    def _drop(self, why: str) -> None:
        if dropped := self._queue.discard():
            self._log.warning(
                "store: %d queued window row(s) dropped (%s): the leader writes that traffic"
                " from its own cursor",
                dropped,
                why,
            )
