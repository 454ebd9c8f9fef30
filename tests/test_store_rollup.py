"""Rollup sums that would not fit their columns: one endpoint's windows never stop the others'
hours and days, on SQLite and PostgreSQL; a window whose values could push a day's sum past
the column is refused when written, with its reason, and kept in the quarantine file."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path

import pytest

from builders import rows_of, started_writer
from e2e import wait_until
from spectax.cli.export import export
from spectax.config import validate
from spectax.store import Store
from spectax.store.database import mark_due_statement, upsert_statement
from spectax.store.models import WindowRow
from spectax.store.rollup import period_start
from spectax.store.rows import complete_row
from spectax.store.writer import StoreWriter


async def insert_unchecked(store: Store, endpoint: str, start: int, **values: int) -> None:
    """Window rows as a spectax before the value range wrote them: straight into the table,
    their hour marked due as `save` marks it."""
    rows = [complete_row(row) for row in rows_of(endpoint, start, **values).rows]
    hour = {"granularity": "hour", "endpoint": endpoint, "version": 1}
    async with store._sessions.begin() as session:
        await session.execute(upsert_statement(store._insert, WindowRow), rows)
        await session.execute(
            mark_due_statement(store._insert),
            [{**hour, "start": period_start(rows[0]["start"], "hour")}],
        )


@pytest.fixture
async def store(database_url: str):
    store = await Store.open(database_url)
    yield store
    await store.close()


async def test_an_hour_that_overflows_is_refused_and_every_other_endpoint_rolls_up(
    store: Store, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two windows of 2**62 tokens sum past BIGINT: the rollup of every endpoint stopped for
    good ("rollup postponed"), and export --granularity hour exited 1 with a traceback."""
    for t in (0, 300):
        await insert_unchecked(store, "bad", t, output_tokens=2**62)
        for name in ("good-a", "good-b"):
            await insert_unchecked(store, name, t)
    caplog.set_level(logging.INFO)
    await store.rollup()
    hours = {(r.endpoint, r.model): r for r in await store.rows("hour")}
    days = {(r.endpoint, r.model): r for r in await store.rows("day")}
    windows = await store.window_rows()
    for name in ("good-a", "good-b"):
        expected = sum(w.output_tokens for w in windows if w.endpoint == name)
        assert sum(r.output_tokens for k, r in hours.items() if k[0] == name) == expected
        assert sum(r.output_tokens for k, r in days.items() if k[0] == name) == expected
    assert not any(endpoint == "bad" for endpoint, _ in hours)
    refused = [r.getMessage() for r in caplog.records if "not rolled up" in r.getMessage()]
    assert len(refused) == 1 and "bad" in refused[0] and "output_tokens" in refused[0]
    assert "no hourly row" in refused[0] and "Traceback" not in caplog.text
    assert await store.rollup() == 0  # the refused hour is not retried forever
    # the bad hour's windows stay, and the export reads the others' hours
    assert sum(1 for w in windows if w.endpoint == "bad") == 2 * len(rows_of("x", 0).rows)
    settings = validate({"storage_url": database_url})
    text = await export(settings, "hour", None, None, "json")
    assert {r["endpoint"] for r in json.loads(text)} == {"good-a", "good-b"}


async def test_a_batch_the_database_refuses_is_split_down_to_the_endpoint_it_refuses(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the range check out of the way (a column type it does not know), the database's
    own refusal still stops only the endpoint whose sum it refuses."""
    from spectax.store import rollup

    monkeypatch.setattr(rollup, "sums_out_of_range", lambda row: None)
    for t in (0, 300):
        await insert_unchecked(store, "bad", t, output_tokens=2**62)
        await insert_unchecked(store, "good", t)
    await store.rollup()
    assert {r.endpoint for r in await store.rows("hour")} == {"good"}
    assert {r.endpoint for r in await store.rows("day")} == {"good"}
    assert await store.rollup() == 0


async def test_periods_rolled_in_many_small_batches_are_each_rolled_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rollup makes its rows on the event loop, so it rolls a few periods a transaction
    (a /metrics read waited 140-180 ms behind 100 days): every endpoint's hours and day
    are rolled, each once, however the periods fall across the batches."""
    from spectax.store import rollup

    monkeypatch.setattr(rollup, "ROLLUP_BATCH_PERIODS", {"hour": 2, "day": 3})
    names = [f"e{i}" for i in range(7)]
    for name in names:
        for t in (0, 300, 3600, 7200 + 300):
            await insert_unchecked(store, name, t)
    assert await store.rollup() == 7 * 3 + 7
    windows = await store.window_rows()
    hours = await store.rows("hour")
    days = await store.rows("day")
    assert len({(r.endpoint, r.start) for r in hours}) == 7 * 3
    assert len({r.endpoint for r in days}) == 7
    for name in names:
        expected = sum(w.output_tokens for w in windows if w.endpoint == name)
        assert sum(r.output_tokens for r in hours if r.endpoint == name) == expected
        assert sum(r.output_tokens for r in days if r.endpoint == name) == expected
    assert await store.rollup() == 0


async def test_windows_that_could_overflow_a_day_are_quarantined_and_the_rest_rolls_up(
    database_url: str, tmp_path: Path
) -> None:
    """A target that restarts before every scrape with counters near 2**53: each short window
    adds ~2**53, and 1,024 of them pass 2**63 within the hour. Such a window is refused when
    written (its value per second could not fit a day's row), quarantined with its reason."""
    writer: StoreWriter = await started_writer(database_url, tmp_path)
    try:
        bad = rows_of("bad", 0, output_tokens=2**53)
        short = [  # 3 s windows: 1,200 an hour
            {**row, "end": row["start"] + timedelta(seconds=3), "seconds": 3.0} for row in bad.rows
        ]
        bad.rows = short
        writer.enqueue_rows(bad)
        writer.enqueue_rows(rows_of("good", 0))
        writer.enqueue_rows(rows_of("bad", 300))  # its ordinary windows are kept
        await wait_until(lambda: not writer.queue, 20, "the queue to be written")
        assert writer.store is not None and writer.write_errors == 0
        assert writer.queue.quarantine.rows["bad"] == len(short)
        lines = (tmp_path / "quarantine.jsonl").read_text().splitlines()
        kept = [json.loads(line) for line in lines]
        assert all("output_tokens" in k["reason"] and "2**63" in k["reason"] for k in kept)
        stored = {(r.endpoint, r.start.timestamp()) for r in await writer.store.window_rows()}
        assert stored == {("good", 0), ("bad", 300)}
        await writer.store.rollup()
        assert {r.endpoint for r in await writer.store.rows("hour")} == {"good", "bad"}
    finally:
        await writer.stop([], 5)
        await writer.close()


def _refused_by_the_rule(row: dict) -> str | None:
    """window_out_of_range's rule as written before its shortcut: every column's bound."""
    from decimal import Decimal

    from spectax.store.rollup import _DAY_SECONDS, _LIMITS

    length = max((row["end"] - row["start"]).total_seconds(), float(row.get("seconds") or 0))
    for name, limit in _LIMITS.items():
        value = row.get(name)
        if value is None:
            continue
        bound = limit * max(length, 1.0) / _DAY_SECONDS
        if abs(Decimal(value).scaleb(9) if isinstance(value, Decimal) else value) > bound:
            return name
    return None


def test_a_window_is_refused_exactly_as_the_rule_says() -> None:
    """window_out_of_range skips the bound of every value far under any window's (issue 31:
    it runs on every row of every scrape): around each column's bound, for windows of 0.5 s
    to a day, with numbers and Decimal dollars, it refuses what the rule refuses, and names
    the same column."""
    from datetime import UTC, datetime
    from decimal import Decimal

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from spectax.store.rollup import _DAY_SECONDS, _LIMITS, window_out_of_range

    names = sorted(_LIMITS)
    start = datetime(2026, 12, 1, tzinfo=UTC)

    def near_bound(name: str, seconds: float) -> st.SearchStrategy:
        bound = _LIMITS[name] * max(seconds, 1.0) / _DAY_SECONDS
        factor = st.sampled_from([0.0, 1e-9, 0.5, 0.999999, 1.0, 1.000001, 2.0])
        sign = st.sampled_from([1, -1])
        numbers = st.builds(lambda f, s: s * int(bound * f), factor, sign)
        dollars = st.builds(lambda f, s: s * Decimal(int(bound * f)).scaleb(-9), factor, sign)
        return st.none() | numbers | dollars | st.sampled_from([float("inf"), float("nan")])

    @settings(max_examples=300, deadline=None)
    @given(st.data(), st.sampled_from([0.5, 1.0, 15.0, 300.0, 86_400.0]))
    def check(data, seconds: float) -> None:
        row = {"start": start, "end": start + timedelta(seconds=seconds), "seconds": seconds}
        for name in data.draw(st.lists(st.sampled_from(names), max_size=4, unique=True)):
            row[name] = data.draw(near_bound(name, seconds))
        problem = window_out_of_range(row)
        expected = _refused_by_the_rule(row)
        assert (problem is None) == (expected is None)
        assert problem is None or problem.startswith(f"{expected} ")

    check()
