"""`spectax db quarantine list|replay`: a row the database refused is written once its cause
is fixed, counted once however often replayed, and what is still refused stays with its
reason; on SQLite and PostgreSQL, the rows quarantined by the real writer."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from builders import rows_of, started_writer
from e2e import wait_until
from spectax.cli.main import main
from spectax.store import Store
from spectax.store.quarantine import Quarantine, records

REFUSE = {  # the cause: the database refuses windows of endpoint "bad" (a check that was wrong)
    "sqlite": [
        "CREATE TRIGGER refuse BEFORE INSERT ON windows WHEN NEW.endpoint = 'bad'"
        " BEGIN SELECT RAISE(ABORT, 'refused by a check'); END"
    ],
    "postgresql": [
        "CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN IF NEW.endpoint = 'bad' THEN"
        " RAISE EXCEPTION 'refused by a check' USING ERRCODE = 'check_violation'; END IF;"
        " RETURN NEW; END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER refuse BEFORE INSERT ON windows FOR EACH ROW EXECUTE FUNCTION refuse()",
    ],
}
FIX = {"sqlite": ["DROP TRIGGER refuse"], "postgresql": ["DROP TRIGGER refuse ON windows"]}


async def execute(url: str, statements: list[str]) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as connection:
            for statement in statements:
                await connection.execute(text(statement))
    finally:
        await engine.dispose()


async def cli(*args: str) -> int:
    return await asyncio.to_thread(main, list(args))  # main runs its own event loop


async def test_a_quarantined_row_is_replayed_once_its_cause_is_fixed_and_counted_once(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backend = "sqlite" if database_url.startswith("sqlite") else "postgresql"
    config = tmp_path / "spectax.yaml"
    config.write_text(json.dumps({"storage_url": database_url, "state_directory": str(tmp_path)}))
    quarantine = tmp_path / "quarantine.jsonl"
    writer = await started_writer(database_url, tmp_path)
    try:
        await execute(database_url, REFUSE[backend])
        writer.enqueue_rows(rows_of("bad", 0))
        writer.enqueue_rows(rows_of("good", 0))
        writer.enqueue_rows(rows_of("huge", 0, output_tokens=10**19))  # refused for good
        await wait_until(lambda: not writer.queue, 20, "the queue to be written")
    finally:
        await writer.stop([], 5)
        await writer.close()
    rows = len(rows_of("x", 0).rows)
    assert len(records(quarantine)) == 2 * rows
    with quarantine.open("ab") as file:  # and a spool line that never could be read
        file.write(json.dumps({"reason": "spool line 7: not JSON", "line": "{tor"}).encode())
        file.write(b"\n")

    assert await cli("db", "quarantine", "list", "--config", str(config)) == 0
    listed = capsys.readouterr().out
    assert f"{2 * rows + 1} quarantined record(s)" in listed and "bad: 1 row(s)" in listed
    assert "refused by a check" in listed and "an unreadable spool line" in listed

    assert await cli("db", "quarantine", "replay", "--config", str(config)) == 1  # still refused
    assert "replayed 0 window row(s)" in capsys.readouterr().out
    assert len(records(quarantine)) == 2 * rows + 1
    assert all("replay" in r for r in records(quarantine))

    await execute(database_url, FIX[backend])  # the cause is fixed
    assert await cli("db", "quarantine", "replay", "--config", str(config)) == 1
    out = capsys.readouterr().out
    assert f"replayed {rows} window row(s)" in out and f"{rows + 1} record(s) kept" in out
    kept = records(quarantine)
    assert {r["write"]["endpoint"] for r in kept if "write" in r} == {"huge"}
    assert all(r["reason"] and r["replay"] for r in kept)  # each says why, then and now
    assert [r["line"] for r in kept if "line" in r] == ["{tor"]

    # again: nothing is written twice (the row replayed is gone from the file, and a row
    # written once more would not add: a window only grows)
    assert await cli("db", "quarantine", "replay", "--config", str(config)) == 1
    assert "replayed 0 window row(s)" in capsys.readouterr().out
    store = await Store.open(database_url)
    try:
        bad = await store.window_rows("bad")
        assert len(bad) == rows
        assert await store.money_totals("bad") == await store.money_totals("good")
        assert await store.rollup() > 0  # its hour is marked, rolled from its windows once
        hours = [r for r in await store.rows("hour") if r.endpoint == "bad"]
        assert sum(r.output_tokens for r in hours) == sum(r.output_tokens for r in bad)
    finally:
        await store.close()


def test_a_record_quarantined_while_a_replay_runs_is_kept(tmp_path: Path) -> None:
    """The daemon appends while a replay rewrites: the lock and the byte offset keep both."""
    import logging

    from spectax.store import quarantine as module

    path = tmp_path / "quarantine.jsonl"
    q = Quarantine(path, logging.getLogger("test"))
    q.add(rows_of("first", 0), "refused")
    first = path.stat().st_size
    q.add(rows_of("meanwhile", 0), "refused")  # after the replay read the file
    module._rewrite(path, [], first)
    assert [r["write"]["endpoint"] for r in records(path)] == ["meanwhile"]
    q.add(rows_of("after", 0), "refused")  # the daemon's next append goes to the new file
    assert [r["write"]["endpoint"] for r in records(path)] == ["meanwhile", "after"]
