"""Window rows the database refuses, set aside so that they stop nobody else's history.

A row whose values the database cannot hold (a counter of 2**63 or more, a
model name longer than the column) fails every retry; left in the queue it
would hold back every endpoint behind it. Such rows go to `quarantine.jsonl`
in the state directory: one JSON object per line, `{"reason": ..., "write":
<the spool's record>}` (or `"line"`, a spool line that could not be read).
A file, not a table: the database has just refused these very values, and
the spool's format is what an operator already reads (jq) and can replay
once the cause is fixed: `spectax db quarantine replay` (`replay`) writes each
record again and keeps, with the replay's reason beside the first, those the
database still refuses or that still cannot be read. It is appended to and
fsynced, under a lock (flock) that a replay holds while it rewrites the file,
so that a running daemon's new records are never lost; nothing rotates it (it
only grows by rows a bug or a hostile target produced).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from spectax.store.database import StoreDataError, StoreError
from spectax.store.pending import PendingWrite, record_rows

if TYPE_CHECKING:  # for annotations only: the replay is handed a Store
    from spectax.store import Store


class Quarantine:
    """The quarantine file, and how many rows each endpoint has put there in this run."""

    def __init__(self, path: Path, log: logging.Logger):
        self.path = path
        self.rows: dict[str, int] = {}  # endpoint -> rows quarantined since start-up
        self._log = log

    def add(self, write: PendingWrite, reason: str) -> None:
        """Keep `write` (its rows, its cursor) with the reason; log the first one per endpoint."""
        self._append({"reason": reason, "write": json.loads(write.to_json())})
        first = write.endpoint not in self.rows
        self.rows[write.endpoint] = self.rows.get(write.endpoint, 0) + (len(write.rows) or 1)
        if first:  # once per endpoint: a target that keeps serving the value would flood
            self._log.error(
                "endpoint %s: the store refuses its window rows (%s); they are kept in %s,"
                " the other endpoints' rows are written",
                write.endpoint,
                reason,
                self.path,
            )

    def add_line(self, line: bytes, reason: str) -> None:
        """Keep a spool line that cannot be read back."""
        self._append({"reason": reason, "line": line.decode("utf-8", "replace")})

    def _append(self, record: dict[str, object]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with locked(self.path) as file:
            file.write(json.dumps(record).encode() + b"\n")
            file.flush()
            os.fsync(file.fileno())


@contextlib.contextmanager
def locked(path: Path) -> Iterator[IO[bytes]]:
    """The quarantine file open for appending, locked against a replay's rewrite: if one
    replaced the file while this waited, the new file is opened instead."""
    while True:
        file = path.open("ab")
        fcntl.flock(file, fcntl.LOCK_EX)
        try:
            current = os.stat(path).st_ino == os.fstat(file.fileno()).st_ino
        except FileNotFoundError:
            current = False
        if current:
            break
        file.close()
    try:
        yield file
    finally:
        file.close()  # and the lock with it


def records(path: Path) -> list[dict[str, Any]]:
    """The quarantine file's records, oldest first."""
    return _parse(path.read_bytes()) if path.exists() else []


def _parse(data: bytes) -> list[dict[str, Any]]:
    """Records of the file's bytes; a line that is not one (a hand edit gone wrong) is
    shown as a record of its own, never dropped."""
    kept = []
    for number, line in enumerate(data.splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or not ({"write", "line"} & record.keys()):
            record = {
                "reason": f"quarantine line {number} is not a quarantine record",
                "line": line.decode("utf-8", "replace"),
            }
        kept.append(record)
    return kept


def write_of(record: dict[str, Any]) -> PendingWrite:
    """The write a record keeps, or ValueError saying why it cannot be read back."""
    text = json.dumps(record["write"]) if "write" in record else str(record.get("line", ""))
    try:
        record_rows(text.encode())
        return PendingWrite.from_json(text)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise ValueError(f"not a spool record: {exc}") from None


async def replay(path: Path, store: Store) -> tuple[int, list[dict[str, Any]]]:
    """Write every quarantined record again, in order; returns the rows written and the
    records kept (each with `replay`, why it failed again). Counting nothing twice is the
    store's: a window row only grows (the upsert keeps the larger window), a cursor only
    moves forward, and rollups are recomputed from the windows; a record written is taken
    out of the file in the same pass, so a second replay does not see it. An outage
    (StoreError) stops the replay: what is not written yet stays, and it is raised."""
    rows, kept = 0, []
    with _one_replay(path):
        with locked(path) as file:  # held only to read: a daemon appending must not wait
            size = file.tell()
        with path.open("rb") as file:
            pending = _parse(file.read(size))
        try:
            while pending:
                try:
                    write = write_of(pending[0])
                    await store.save_many([(write.endpoint, write.rows, write.stored_cursor)])
                    rows += len(write.rows)
                except (ValueError, StoreDataError) as exc:
                    kept.append({**pending[0], "replay": str(exc)})
                pending.pop(0)
        finally:
            _rewrite(path, kept + pending, size)
    return rows, kept


@contextlib.contextmanager
def _one_replay(path: Path) -> Iterator[None]:
    """One replay at a time: two would each rewrite the file with what the other took out."""
    with path.with_suffix(".replay").open("ab") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(
                f"another `spectax db quarantine replay` is running on {path}; wait for it"
            ) from None
        yield


def _rewrite(path: Path, kept: list[dict[str, Any]], replayed: int) -> None:
    """Replace the file's first `replayed` bytes with `kept`, durably, keeping what was
    quarantined meanwhile after them."""
    with locked(path):
        with path.open("rb") as file:
            file.seek(replayed)
            later = file.read()
        replacement = path.with_suffix(".rewrite")
        with replacement.open("wb") as file:
            file.writelines(json.dumps(record).encode() + b"\n" for record in kept)
            file.write(later)
            file.flush()
            os.fsync(file.fileno())
        replacement.replace(path)
