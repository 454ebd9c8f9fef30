"""The write queue: bounded memory, a spool file beyond it, order kept, nothing dropped."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from spectax.store.writer import PendingWrite, WriteQueue


def write(n: int) -> PendingWrite:
    row = {"n": n, "start": datetime(2026, 11, 1, tzinfo=UTC), "spend_usd": Decimal("0.1")}
    return PendingWrite(f"e{n}", [row], None)


def drain(queue: WriteQueue, batch_rows: int = 1) -> list[int]:
    seen = []
    while batch := queue.peek(batch_rows):
        assert sum(len(w.rows) for w in batch) <= batch_rows
        seen.extend(w.rows[0]["n"] for w in batch)
        queue.pop(batch)
    return seen


def test_spills_past_the_bound_and_drains_in_order(tmp_path: Path) -> None:
    queue = WriteQueue(tmp_path / "spool.jsonl", max_rows=4)
    for n in range(10):
        queue.append(write(n))
    assert (tmp_path / "spool.jsonl").exists() and queue.pending_rows == 10
    assert drain(queue) == list(range(10))
    assert not (tmp_path / "spool.jsonl").exists() and queue.pending_rows == 0


def test_drains_in_batches_in_order_spool_first(tmp_path: Path) -> None:
    queue = WriteQueue(tmp_path / "spool.jsonl", max_rows=4)
    for n in range(11):
        queue.append(write(n))
    assert drain(queue, batch_rows=3) == list(range(11))
    assert not (tmp_path / "spool.jsonl").exists() and queue.pending_rows == 0


def test_a_write_spilled_while_being_written_drops_nothing_else(tmp_path: Path) -> None:
    """The writer peeks a write in memory; while the database call runs, new writes push it
    into the spool. Forgetting it afterwards must not drop the next write instead."""
    queue = WriteQueue(tmp_path / "spool.jsonl", max_rows=4)
    for n in range(3):
        queue.append(write(n))
    in_flight = queue.peek(2)
    assert [w.rows[0]["n"] for w in in_flight] == [0, 1]
    for n in range(3, 8):  # meanwhile: the bound is crossed, the oldest go to the spool
        queue.append(write(n))
    queue.pop(in_flight)  # they reached the database
    remaining = drain(queue)
    assert set(remaining) >= set(range(2, 8))  # every other write is still there
    assert remaining.count(0) <= 1 and remaining.count(1) <= 1  # replayed at most once


def test_a_spool_left_by_a_crash_is_drained_first(tmp_path: Path) -> None:
    first = WriteQueue(tmp_path / "spool.jsonl", max_rows=2)
    for n in range(5):
        first.append(write(n))
    first.spill_all()  # stop with the database away
    second = WriteQueue(tmp_path / "spool.jsonl", max_rows=2)
    second.append(write(5))
    assert second.pending_rows == 6
    assert drain(second) == list(range(6))
    assert drain(second) == []
