"""Start-up with a spool: a line of valid JSON but another shape is quarantined like a corrupt
one (it crashed every start), and a monitor resumed from a long spool resumes exactly as from
the same writes stored, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders import drain, numbered_write, rows_of
from spectax.config import validate
from spectax.daemon import Daemon
from spectax.store import Store
from spectax.store.spool import WriteQueue


@pytest.mark.parametrize(
    "line",
    [
        "[]",
        '{"x": 1}',
        '"text"',
        '{"endpoint": "a", "rows": [1], "cursor": null}',  # AttributeError at every start
        '{"endpoint": "a", "rows": {}, "cursor": [1]}',  # IndexError
        '{"endpoint": "a", "rows": [], "cursor": [1.0, 5]}',  # a sample that is no text
        '{"endpoint": "a", "rows": [{"start": 3}], "cursor": null}',
    ],
)
def test_a_spool_line_of_another_shape_is_quarantined_and_the_rest_kept(
    tmp_path: Path, line: str
) -> None:
    spool = tmp_path / "spool.jsonl"
    spool.write_text(
        "\n".join([numbered_write(0).to_json(), line, numbered_write(2).to_json()]) + "\n"
    )
    queue = WriteQueue(spool, max_rows=10)
    assert queue.pending_rows == 2
    assert drain(queue) == [0, 2]
    [kept] = [json.loads(k) for k in (tmp_path / "quarantine.jsonl").read_text().splitlines()]
    assert kept["line"] == line + "\n"
    assert kept["reason"].startswith("spool line 2: ") and "shape" not in kept["reason"][:14]
    assert WriteQueue(spool).pending_rows == 0  # the next start finds it gone, nothing else


@pytest.mark.parametrize(("stored", "queued"), [(3, 0), (10, 8)])
async def test_a_monitor_resumed_from_a_long_spool_resumes_as_from_the_store(
    database_url: str, tmp_path: Path, stored: int, queued: int
) -> None:
    """More windows queued than the monitor keeps (the history): only those it keeps are
    rebuilt (of the last `history` closed ones, those that did not speculate), and the
    cursor's sample is decoded once; the result is the stored one's. The writes from
    `queued` on are in the spool, those before `stored` in the store: (3, 0), the spool
    holds all the history; (10, 8), the two overlap and the oldest windows kept are only
    in the store."""
    spool = tmp_path / "spool.jsonl"
    unspeculated = {"drafts": None, "draft_tokens": None, "accepted_tokens": None}
    writes = [rows_of("a", 300 * n, **({} if n % 2 else unspeculated)) for n in range(12)]
    queue = WriteQueue(spool, max_rows=1)
    for w in writes[queued:]:
        queue.append(w)
    queue.spill_all()
    pending = list(WriteQueue(spool).pending())
    store = await Store.open(database_url)
    try:
        await store.save_many([(w.endpoint, w.rows, w.cursor) for w in writes[:stored]])
        overlaid = await store.restore("a", 300.0, 5, pending)
        await store.save_many([(w.endpoint, w.rows, w.cursor) for w in writes])
        whole = await store.restore("a", 300.0, 5)
    finally:
        await store.close()
    assert overlaid.cursor is not None and whole.cursor is not None
    assert overlaid.cursor[0] == whole.cursor[0] == writes[-1].cursor[0]  # type: ignore[index]
    assert overlaid.cursor[1] == whole.cursor[1]
    assert overlaid.spend_usd_total == whole.spend_usd_total > 0
    assert overlaid.open_window == whole.open_window
    assert overlaid.recent_windows == whole.recent_windows
    # of the last 5 closed windows (6 to 10; 11 is open), those without speculation
    assert [w.start for w in whole.recent_windows] == [1800.0, 2400.0, 3000.0]


async def test_the_daemon_makes_monitors_in_order_each_with_its_writes_still_queued(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Daemon.new_monitors`, how a start-up, a reload and a fleet's discovery make their
    monitors: the endpoints asked for, in that order, each resumed from the store overlaid
    with its writes still queued (x's latest cursor is only in the spool, y's only stored;
    z has neither). Asked for none, as a fleet's read that found no new endpoint asks, it
    does not read the spool: that read would grow with the spool while the database is
    away, at every window."""
    names = ["x", "y", "z"]
    settings = validate(
        {
            "state_directory": str(tmp_path / "state"),
            "storage_url": database_url,
            "endpoints": [
                {"name": n, "url": f"http://127.0.0.1:{9 + i}"} for i, n in enumerate(names)
            ],
        }
    )
    daemon = Daemon(settings)
    stored_x, queued_x, stored_y = rows_of("x", 0), rows_of("x", 300), rows_of("y", 600)
    daemon.store = store = await Store.open(database_url)
    try:
        await store.save_many([(w.endpoint, w.rows, w.cursor) for w in (stored_x, stored_y)])
        daemon.writer.queue.append(queued_x)
        asked = list(reversed(settings.config.endpoints))
        made = [monitor async for monitor in daemon.new_monitors(asked)]
        assert [m.config.name for m in made] == ["z", "y", "x"]
        assert [m.cursor_time for m in made] == [None, stored_y.cursor[0], queued_x.cursor[0]]  # type: ignore[index]

        def spool_read(*args: object) -> None:
            raise AssertionError("the spool was read for no endpoint")

        monkeypatch.setattr(daemon.writer.queue, "pending", spool_read)
        assert [monitor async for monitor in daemon.new_monitors([])] == []
    finally:
        await store.close()
