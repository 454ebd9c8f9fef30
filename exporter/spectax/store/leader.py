"""Which spectax process writes to the store: one at a time, whatever the number running.

Two spectax processes on one PostgreSQL database (an HA pair) both scrape,
compute and serve /metrics; only the leader writes windows, cursors,
rollups, profiles and billing lines. The leader is whoever holds a session
advisory lock (`pg_try_advisory_lock`) on a connection of its own: no table,
no lease to renew, and PostgreSQL releases it the moment the session ends,
so a leader killed with -9 (its socket closed by the kernel) hands over at
the follower's next poll. A host that vanishes without closing its socket
is noticed by the server's TCP keepalives (set per session below).

The leader confirms the lock before each batch it writes (spectax.store.writer),
so a leader whose session died stops writing at its next batch, not at its next
poll. A follower drops what it computes: on taking over it resumes every endpoint
from what the last leader stored, as a restart does (Store.restore), so the
window the leader was writing is finished from its stored cursor, the windows
it wrote are not written again, and no traffic is counted twice or lost.

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
from pathlib import Path
from typing import IO

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from spectax.store.db import DATABASE_ERRORS, Database, StoreError, reason

#: The advisory lock's key ("SPECTAX" in ASCII, then 1). Advisory locks are per database:
#: pairs on different databases of one server do not see each other.
LOCK_KEY = 0x53_50_45_43_54_41_58_01
#: How often a follower tries the lock, and a leader checks its session between batches.
POLL_SECONDS = 2.0
# The server drops a silent session after about 5 + 3 * 2 s: a leader whose host vanished
# without closing its socket releases the lock then (defaults: two hours, per the kernel).
KEEPALIVES = ("tcp_keepalives_idle = 5", "tcp_keepalives_interval = 2", "tcp_keepalives_count = 3")


class StoreLocked(StoreError):
    """Another spectax process already runs on this SQLite file."""


class Leadership:
    """Always the leader: one process (SQLite, held by a lock file) or a store in memory.
    Whether writes are taken is the writer's to track (StoreWriter.leading): holding the
    lock again after losing it is not leading until the monitors are resumed."""

    async def contend(self) -> bool:
        """Try to lead (a follower) or check that it still does (the leader): True if it
        holds the lock now. Never raises: an unreachable database means not leading."""
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
                " (README, High availability)"
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

    def __init__(self, store: Database, log: logging.Logger):
        self._store = store
        self._log = log
        self._connection: AsyncConnection | None = None
        self._held = False
        self._turn = asyncio.Lock()  # the writer and the poll share one connection

    async def contend(self) -> bool:
        async with self._turn:
            return await self._contend()

    async def _contend(self) -> bool:
        try:
            if self._connection is None:
                self._connection = await self._store.dedicated_connection()
                for setting in KEEPALIVES:
                    await self._connection.execute(text(f"SET {setting}"))
            if self._held:
                await self._connection.execute(text("SELECT 1"))  # the session, so the lock
            else:
                won = await self._connection.execute(
                    text("SELECT pg_try_advisory_lock(:key)"), {"key": LOCK_KEY}
                )
                self._held = bool(won.scalar())
        except DATABASE_ERRORS as exc:
            if self._held:
                self._log.error("store: lost the leader's lock (%s): following", reason(exc))
            await self._disconnect()
        return self._held

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
