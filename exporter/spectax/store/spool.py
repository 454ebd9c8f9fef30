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
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from spectax.store.pending import PendingWrite
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
        if spool_path.exists() and spool_path.stat().st_size > 0:
            self._spooled_rows = sum(len(w.rows) or 1 for w in self._load_spool())

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

    def _load_spool(self) -> list[PendingWrite]:
        """The spool's records; a torn last line (a crash while appending) is dropped and an
        unreadable line elsewhere quarantined, and the file rewritten without them, so that
        what is appended next starts on a line of its own."""
        good: list[tuple[bytes, PendingWrite]] = []
        torn = unreadable = 0
        lines = self.spool_path.read_bytes().splitlines(keepends=True)
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                good.append((line, PendingWrite.from_json(line.decode())))
            except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
                if number == len(lines) and not line.endswith(b"\n"):
                    torn += 1
                    continue
                unreadable += 1
                self.quarantine.add_line(line, f"spool line {number}: {type(exc).__name__}")
        if torn or unreadable:
            self._log.warning(
                "store: spool %s: dropped %d torn record(s) at its end (a crash while writing)"
                " and moved %d unreadable record(s) to %s; %d record(s) kept",
                self.spool_path,
                torn,
                unreadable,
                self.quarantine.path,
                len(good),
            )
            replacement = self.spool_path.with_suffix(".rewrite")
            with replacement.open("wb") as spool:
                spool.writelines(line if line.endswith(b"\n") else line + b"\n" for line, _ in good)
                spool.flush()
                os.fsync(spool.fileno())
            replacement.replace(self.spool_path)
        return [write for _, write in good]
