"""Window rows the database refuses, set aside so that they stop nobody else's history.

A row whose values the database cannot hold (a counter of 2**63 or more, a
model name longer than the column) fails every retry; left in the queue it
would hold back every endpoint behind it. Such rows go to `quarantine.jsonl`
in the state directory: one JSON object per line, `{"reason": ..., "write":
<the spool's record>}` (or `"line"`, a spool line that could not be read).
A file, not a table: the database has just refused these very values, and
the spool's format is what an operator already reads (jq) and can replay
once the cause is fixed. It is appended to and fsynced; nothing rotates it
(it only grows by rows a bug or a hostile target produced).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from spectax.store.pending import PendingWrite


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
        with self.path.open("ab") as file:
            file.write(json.dumps(record).encode() + b"\n")
            file.flush()
            os.fsync(file.fileno())
