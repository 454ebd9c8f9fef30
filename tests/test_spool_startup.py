"""Start-up with a spool: a line of valid JSON but another shape is quarantined like a corrupt
one (it crashed every start), and a monitor resumed from a long spool resumes exactly as from
the same writes stored, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders import drain, numbered_write, rows_of
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
