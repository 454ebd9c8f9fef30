"""The store writer: a row the database refuses is quarantined and the rest written, on both
backends; the writer task survives it; a locked SQLite postpones the rollup in one line."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from builders import closed_window, rows_of, started_writer
from e2e import wait_until
from spectax.store import Store
from spectax.store.writer import StoreWriter

log = logging.getLogger("spectax.daemon")


def refused_values(database_url: str) -> list[dict[str, Any]]:
    """Values the backend cannot hold: a counter of 1e19 (both), a 300-character model name
    (PostgreSQL's varchar(256); SQLite stores any length)."""
    values: list[dict[str, Any]] = [{"output_tokens": 10**19}]
    if database_url.startswith("postgresql"):
        values.append({"model": "m" * 300})
    return values


async def test_a_row_the_database_refuses_is_quarantined_and_the_others_are_written(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = await started_writer(database_url, tmp_path)
    try:
        for value in refused_values(database_url):
            caplog.clear()
            before = writer.queue.quarantine.rows.get("bad", 0)
            # the bad endpoint served 1, then 1e19, beside three good endpoints, in one batch
            for t in (0, 300):
                for name in ("good-a", "good-b", "good-c"):
                    writer.enqueue_rows(rows_of(name, t))
                writer.enqueue_rows(rows_of("bad", t, **(value if t else {})))
            await wait_until(lambda: not writer.queue, 20, "the queue to be written")
            assert writer.up and writer.write_errors == 0
            assert writer.queue.quarantine.rows["bad"] == before + 1
            stored = {(r.endpoint, r.start.timestamp()) for r in await writer.store.window_rows()}
            assert {(n, t) for n in ("good-a", "good-b", "good-c") for t in (0, 300)} <= stored
            assert ("bad", 0) in stored and ("bad", 300) not in stored
            cursor = await writer.store.cursor("bad")  # the row is set aside, the cursor moves
            assert cursor is not None and cursor[0] == rows_of("bad", 300).cursor[0]  # type: ignore[index]
            refused = caplog.text.count("the store refuses its window rows")
            assert refused == (1 if before == 0 else 0)  # once per endpoint
            assert "INSERT" not in caplog.text
        kept = [
            json.loads(line) for line in (tmp_path / "quarantine.jsonl").read_text().splitlines()
        ]
        assert [k["write"]["endpoint"] for k in kept] == ["bad"] * len(kept)
        assert all(k["reason"] for k in kept)
        # the writer is alive and goes on writing
        writer.enqueue_rows(rows_of("good-a", 600))
        await wait_until(lambda: not writer.queue, 20, "the next write to be stored")
        assert len(await writer.store.window_rows("good-a")) == 3 * len(rows_of("x", 0).rows)
    finally:
        await writer.stop([], 5)
        await writer.close()


async def test_stopping_the_writer_after_a_refused_row_spools_what_is_pending(
    tmp_path: Path,
) -> None:
    """The old writer task died of the OverflowError, and the stop that awaited it raised it:
    SIGTERM exited 1 without spooling. Now the stop spools what the database did not take."""
    url = f"sqlite+aiosqlite:///{tmp_path}/history.sqlite"
    writer = await started_writer(url, tmp_path)
    writer.enqueue_rows(rows_of("bad", 0, output_tokens=10**19))
    await wait_until(lambda: not writer.queue, 20, "the refused row to be set aside")
    assert writer.store is not None
    await writer.store.close()
    (tmp_path / "history.sqlite").unlink()
    (tmp_path / "history.sqlite").mkdir()  # the database cannot be written any more
    await writer.stop([replace(closed_window(), endpoint="good")], 1)
    await writer.close()
    assert writer.queue.pending_rows == len(rows_of("good", 0).rows)
    assert "good" in (tmp_path / "spool.jsonl").read_text()


@pytest.mark.e2e
async def test_a_locked_sqlite_postpones_the_rollup_in_one_line_and_it_runs_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    path = tmp_path / "history.sqlite"
    writer = await started_writer(f"sqlite+aiosqlite:///{path}", tmp_path)
    try:
        writer.enqueue_rows(rows_of("a", 0))
        await wait_until(lambda: not writer.queue, 20, "the window to be stored")
        holder = sqlite3.connect(path, timeout=0)
        holder.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        try:
            for _ in range(2):
                await writer.maintain(rows_of("a", 0).rows[0]["start"], {"window": None})
        finally:
            holder.rollback()
            holder.close()
        postponed = [r for r in caplog.records if "rollup postponed" in r.getMessage()]
        assert len(postponed) == 1 and "database is locked" in postponed[0].getMessage()
        assert not any(r.exc_info for r in caplog.records) and "Traceback" not in caplog.text
        assert writer.store is not None
        assert await writer.store.rows("hour") == []
        await writer.maintain(rows_of("a", 0).rows[0]["start"], {"window": None})
        assert len(await writer.store.rows("hour")) == len(rows_of("a", 0).rows)
        assert "rollup done again" in caplog.text
    finally:
        await writer.stop([], 5)
        await writer.close()


async def test_the_oldest_pending_age_dates_a_left_spool_and_is_zero_once_written(
    database_url: str, tmp_path: Path
) -> None:
    """`spectax_store_oldest_pending_age_seconds`: a spool left an hour ago is an hour old
    before the store answers (the writes' own scrape times say so), and 0 once written."""
    from spectax.store.spool import WriteQueue

    old = rows_of("a", int(time.time()) - 3600)
    assert old.cursor is not None
    left = WriteQueue(tmp_path / "spool.jsonl", max_rows=1)
    left.append(old)
    left.spill_all()
    writer = StoreWriter(
        lambda: Store.open(database_url), tmp_path / "spool.jsonl", 10_000, asyncio.Event(), log
    )
    now = time.time()
    assert writer.oldest_pending_age(now) == pytest.approx(now - old.cursor[0])
    assert writer.oldest_pending_age(now) > 3000
    assert await writer.connect() is not None
    writer.start()
    try:
        await wait_until(lambda: not writer.queue, 20, "the spool to be written")
        assert writer.oldest_pending_age(time.time()) == 0
        writer.enqueue_rows(rows_of("b", int(time.time())))
        assert 0 <= writer.oldest_pending_age(time.time() + 5) <= 5 + 1
    finally:
        await writer.stop([], 5)
        await writer.close()
