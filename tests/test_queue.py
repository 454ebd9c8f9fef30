"""The write queue: bounded memory, a spool file beyond it, order kept, nothing dropped."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from builders import drain, numbered_write
from spectax.store.writer import WriteQueue


def test_spills_past_the_bound_and_drains_in_order(tmp_path: Path) -> None:
    queue = WriteQueue(tmp_path / "spool.jsonl", max_rows=4)
    for n in range(10):
        queue.append(numbered_write(n))
    assert (tmp_path / "spool.jsonl").exists() and queue.pending_rows == 10
    assert drain(queue) == list(range(10))
    assert not (tmp_path / "spool.jsonl").exists() and queue.pending_rows == 0


def test_drains_in_batches_in_order_spool_first(tmp_path: Path) -> None:
    queue = WriteQueue(tmp_path / "spool.jsonl", max_rows=4)
    for n in range(11):
        queue.append(numbered_write(n))
    assert drain(queue, batch_rows=3) == list(range(11))
    assert not (tmp_path / "spool.jsonl").exists() and queue.pending_rows == 0


def test_a_write_spilled_while_being_written_drops_nothing_else(tmp_path: Path) -> None:
    """The writer peeks a write in memory; while the database call runs, new writes push it
    into the spool. Forgetting it afterwards must not drop the next write instead."""
    queue = WriteQueue(tmp_path / "spool.jsonl", max_rows=4)
    for n in range(3):
        queue.append(numbered_write(n))
    in_flight = queue.peek(2)
    assert [w.rows[0]["n"] for w in in_flight] == [0, 1]
    for n in range(3, 8):  # meanwhile: the bound is crossed, the oldest go to the spool
        queue.append(numbered_write(n))
    queue.pop(in_flight)  # they reached the database
    remaining = drain(queue)
    assert set(remaining) >= set(range(2, 8))  # every other write is still there
    assert remaining.count(0) <= 1 and remaining.count(1) <= 1  # replayed at most once


def test_a_spool_left_by_a_crash_is_drained_first(tmp_path: Path) -> None:
    first = WriteQueue(tmp_path / "spool.jsonl", max_rows=2)
    for n in range(5):
        first.append(numbered_write(n))
    first.spill_all()  # stop with the database away
    second = WriteQueue(tmp_path / "spool.jsonl", max_rows=2)
    second.append(numbered_write(5))
    assert second.pending_rows == 6
    assert drain(second) == list(range(6))
    assert drain(second) == []


def test_a_torn_last_spool_line_is_dropped_with_one_warning_and_the_rest_loaded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A crash while appending to the spool cuts its last line: start-up goes on."""
    spool = tmp_path / "spool.jsonl"
    first = WriteQueue(spool, max_rows=1)
    for n in range(4):
        first.append(numbered_write(n))
    first.spill_all()
    spool.write_bytes(spool.read_bytes() + numbered_write(99).to_json().encode()[:25])  # torn
    second = WriteQueue(spool, max_rows=1)
    assert second.pending_rows == 4
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "dropped 1 torn record(s)" in warnings[0]
    second.append(numbered_write(4))
    second.spill_all()  # appended after the last whole record, on a line of its own
    assert drain(WriteQueue(spool, max_rows=1)) == [0, 1, 2, 3, 4]


def test_an_unreadable_spool_line_in_the_middle_is_quarantined_and_the_rest_kept(
    tmp_path: Path,
) -> None:
    """Not a crash's doing (a crash tears only the end): the line is kept aside, not lost."""
    spool = tmp_path / "spool.jsonl"
    lines = [
        numbered_write(0).to_json(),
        '{"endpoint": "e1", "rows": [',
        numbered_write(2).to_json(),
    ]
    spool.write_text("\n".join(lines) + "\n")
    queue = WriteQueue(spool, max_rows=10)
    assert drain(queue) == [0, 2]
    [kept] = (tmp_path / "quarantine.jsonl").read_text().splitlines()
    assert json.loads(kept)["line"].startswith('{"endpoint": "e1"')


def test_pending_reads_the_spool_then_memory_in_order_and_consumes_nothing(
    tmp_path: Path,
) -> None:
    queue = WriteQueue(tmp_path / "spool.jsonl", max_rows=4)
    for n in range(7):  # the oldest spill to the spool, the newest stay in memory
        queue.append(numbered_write(n))
    written = queue.peek(1)
    queue.pop(written)  # the first is in the store: no longer pending
    assert [w.rows[0]["n"] for w in queue.pending()] == list(range(1, 7))
    assert [w.rows[0]["n"] for w in queue.pending("e3")] == [3]
    assert queue.pending_rows == 6 and drain(queue) == list(range(1, 7))
