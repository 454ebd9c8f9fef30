"""The write queue: closed windows in memory up to a bound, then in a JSON-lines spool file in
the state directory, oldest first; what `spectax.store.writer` drains into the database.

Past `max_rows` rows in memory, the oldest writes move to the spool (written
and fsynced before they leave memory), so a long outage costs disk, not
memory, and nothing is dropped. The spool is always older than what is in
memory; it is drained first. A crash while appending leaves a torn last
line: at start-up it is dropped (its windows' traffic is still after the
stored cursor, so the next delta brings it back) and the file is cut to its
last whole record; an unreadable line elsewhere (not a crash's doing: a
disk or a hand edit) is moved to the quarantine file, never lost.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from spectax.store.pending import PendingWrite, record_rows
from spectax.store.quarantine import Quarantine


class WriteQueue:
    def __init__(
        self,
        spool_path: Path,
        max_rows: int = 10_000,
        quarantine: Quarantine | None = None,
        log: logging.Logger | None = None,
    ):
        self.spool_path = spool_path
        self.max_rows = max_rows
        self._log = log or logging.getLogger(__name__)
        self.quarantine = quarantine or Quarantine(
            spool_path.with_name("quarantine.jsonl"), self._log
        )
        self._memory: deque[PendingWrite] = deque()
        self._memory_rows = 0
        # per endpoint, its write in memory that the writer has not taken yet: the next one
        # merges into it (PendingWrite.absorb)
        self._mergeable: dict[str, PendingWrite] = {}
        self._spooled_rows = 0
        self._spool_offset = 0  # bytes of the spool already written to the store
        # the next spool writes and the offset where they end
        self._head: tuple[list[PendingWrite], int] | None = None
        started = time.monotonic()
        if spool_path.exists() and spool_path.stat().st_size > 0:
            self._spooled_rows = self._load_spool()
        self.load_seconds = time.monotonic() - started  # start-up's wait for the spool began

    def drain_budget(self, wait: float) -> float:
        """What is left of start-up's `wait` for the spool to write it: reading it (done at
        construction) and reading it back for the monitors (twice as long: that decodes
        the rows too, bench/spool_startup.py) are part of that wait."""
        return max(0.0, wait - 3 * self.load_seconds)

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

    def pending(self, endpoint: str | None = None) -> Iterator[PendingWrite]:
        """The writes not yet in the store (of `endpoint`, or all), in the order they will be
        written: the spool from where the store stopped, then memory. Read only: nothing is
        consumed. Take them (list) before awaiting anything: the writer may pop meanwhile."""
        if self._spool_has_more():
            with self.spool_path.open("rb") as spool:
                spool.seek(self._spool_offset)
                for line in spool:
                    write = PendingWrite.from_json(line.decode())
                    if endpoint is None or write.endpoint == endpoint:
                        yield write
        for write in list(self._memory):
            if endpoint is None or write.endpoint == endpoint:
                yield write

    def discard(self) -> int:
        """Forget everything queued, in memory and in the spool, and say how many rows: a
        follower's writes are the leader's to make (spectax.store.leader)."""
        rows = self.pending_rows
        self._memory.clear()
        self._mergeable.clear()
        self._memory_rows = self._spooled_rows = self._spool_offset = 0
        self._head = None
        self.spool_path.unlink(missing_ok=True)
        return rows

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

    def _load_spool(self) -> int:
        """The spool's rows, counted; a torn last line (a crash while appending) is dropped and
        a line that cannot be written back (not JSON, or JSON of another shape) quarantined,
        and the file rewritten without them, so that what is appended next starts on a line
        of its own. Read as a stream and checked by shape, not decoded: decoding every
        cursor and holding every write took 27 s and gigabytes for a 50,000-row spool
        (bench/spool_startup.py); the writer and the monitors decode what they use."""
        rows = torn = 0
        refused: dict[int, str] = {}  # line number -> why it cannot be read back
        number, last = 0, b""
        with self.spool_path.open("rb") as spool:
            for number, last in enumerate(spool, 1):
                if not last.strip():
                    continue
                try:
                    rows += record_rows(last)
                except ValueError as exc:
                    if last.endswith(b"\n"):
                        refused[number] = f"spool line {number}: {exc}"
                    else:  # only the last line can lack its end: a crash while appending
                        torn += 1
        if torn or refused:
            self._set_aside(refused, torn, number)
        elif last and not last.endswith(b"\n"):  # whole, but what is appended must not join it
            with self.spool_path.open("ab") as spool:
                spool.write(b"\n")
        return rows

    def _set_aside(self, refused: dict[int, str], torn: int, lines: int) -> None:
        """Quarantine the `refused` lines, drop a torn last one, rewrite the spool without."""
        replacement = self.spool_path.with_suffix(".rewrite")
        with self.spool_path.open("rb") as spool, replacement.open("wb") as kept:
            for number, line in enumerate(spool, 1):
                if number in refused:
                    self.quarantine.add_line(line, refused[number])
                elif line.endswith(b"\n"):
                    kept.write(line)
            kept.flush()
            os.fsync(kept.fileno())
        replacement.replace(self.spool_path)
        self._log.warning(
            "store: spool %s: dropped %d torn record(s) at its end (a crash while writing)"
            " and moved %d unreadable record(s) to %s; %d record(s) kept",
            self.spool_path,
            torn,
            len(refused),
            self.quarantine.path,
            lines - torn - len(refused),
        )
