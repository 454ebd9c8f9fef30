"""Migrations, rollups, retention and export, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from alembic import command
from sqlalchemy import inspect as sa_inspect
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from builders import NGRAM_PAGES, monitor_of, ngram_settings, queued, store_pages
from spectax.cli.main import main
from spectax.endpoint import EndpointMonitor
from spectax.store import Store
from spectax.store.models import TABLES, Money
from spectax.store.schema import HEAD_REVISION, SchemaMismatch, _config, head_revision, upgrade

PAGES = NGRAM_PAGES
T0 = datetime(2026, 11, 2, 22, 50, tzinfo=UTC).timestamp()  # windows cross an hour and a day


def settings(url: str):
    return ngram_settings(storage_url=url)


async def fill(store: Store, url: str, minutes: int = 150) -> EndpointMonitor:
    """Scrape the recorded pages every 30 s for `minutes`, cycling through a restart each time."""
    monitor = monitor_of(settings(url))
    scrapes = ((T0 + 30 * i, PAGES[i % len(PAGES)]) for i in range(minutes * 2))
    await store_pages(monitor, store, scrapes)
    return monitor


def totals(rows, *names):
    return {n: sum((getattr(r, n) or 0) for r in rows) for n in names}


SUMMED = (
    "output_tokens",
    "prompt_tokens",
    "drafts",
    "draft_tokens",
    "accepted_tokens",
    "seconds",
    "restarts",
    "spend_usd",
    "requests_finished",
)


async def test_rollups_equal_window_sums_and_ratios(database_url) -> None:
    store = await Store.open(database_url)
    try:
        await fill(store, database_url)
        rolled = await store.rollup()
        assert rolled > 0
        windows = await store.rows("window")
        hours = await store.rows("hour")
        days = await store.rows("day")
        assert (
            len({h.start for h in hours}) == 4 and len({d.start for d in days}) == 2
        )  # 22:50..01:20
        assert totals(hours, *SUMMED) == totals(windows, *SUMMED) == totals(days, *SUMMED)
        assert isinstance(days[0].spend_usd, Decimal)
        # per hour: the ratio from summed counters equals the ratio of that hour's window sums
        for hour in hours:
            inside = [w for w in windows if hour.start <= w.start < hour.end]
            assert hour.windows == len(inside)
            alpha = hour.accepted_tokens / hour.draft_tokens
            assert alpha == pytest.approx(
                sum(w.accepted_tokens for w in inside) / sum(w.draft_tokens for w in inside)
            )
            positions = json.loads(hour.accepted_per_position)
            assert positions == [
                sum(json.loads(w.accepted_per_position)[k] for w in inside) for k in range(4)
            ]
        # the daemon's verdicts and bases, counted: an hour's are its windows', a day's its hours'
        for rows in (hours, days):
            for verdict in ("pays", "tax", "uncertain"):
                assert sum(getattr(r, f"windows_{verdict}") for r in rows) == sum(
                    w.verdict == verdict for w in windows
                )
            for basis in ("measured", "calibrated", "profile", "default"):
                assert sum(getattr(r, f"windows_basis_{basis}") for r in rows) == sum(
                    w.verdict_basis == basis for w in windows
                )
        assert sum(h.windows_tax + h.windows_pays + h.windows_uncertain for h in hours) > 0
        last = max(windows, key=lambda w: w.start)
        latest = max(days, key=lambda d: d.start)
        assert (latest.ridge_batch_source, latest.speedup_low_ratio) == (
            last.ridge_batch_source,
            last.speedup_low_ratio,
        )
        # idempotent: rolling again changes nothing and finds nothing due
        assert await store.rollup() == 0
        assert totals(await store.rows("hour"), *SUMMED) == totals(hours, *SUMMED)
    finally:
        await store.close()


async def test_a_late_window_re_rolls_its_hour(database_url) -> None:
    store = await Store.open(database_url)
    try:
        monitor = await fill(store, database_url, minutes=20)
        await store.rollup()
        before = totals(await store.rows("day"), *SUMMED)
        # the open window arrives late (say, flushed from the spool after an outage)
        write = queued(monitor.flush())
        assert write is not None and write.rows
        await store.save(write.endpoint, write.rows, write.cursor)
        await store.rollup()
        after = totals(await store.rows("day"), *SUMMED)
        assert after["output_tokens"] == before["output_tokens"] + sum(
            r["output_tokens"] for r in write.rows
        )
        assert after == totals(await store.rows("window"), *SUMMED)
    finally:
        await store.close()


async def test_retention_keeps_what_is_not_rolled_up(database_url) -> None:
    store = await Store.open(database_url)
    try:
        await fill(store, database_url, minutes=60)
        now = datetime.fromtimestamp(T0, UTC) + timedelta(days=30)
        keep = {"window": 86400.0, "hour": None, "day": None}
        assert await store.apply_retention(now, keep) == 0  # nothing rolled up yet
        await store.rollup()
        windows = len(await store.rows("window"))
        assert await store.apply_retention(now, keep) == windows
        assert await store.rows("window") == []
        assert totals(await store.rows("hour"), "output_tokens")["output_tokens"] > 0
    finally:
        await store.close()


async def test_migration_from_the_first_schema_keeps_the_data(database_url) -> None:
    engine = create_async_engine(database_url)
    async with engine.begin() as conn:
        await conn.run_sync(upgrade, "0001")
        await conn.execute(
            text(
                'INSERT INTO windows (endpoint, model, start, "end", seconds, busy_seconds, '
                "restarts, output_tokens, prompt_tokens, requests_finished, drafts, draft_tokens, "
                "accepted_tokens, accepted_per_position, running_seconds, spend_usd, "
                "busy_spend_usd, concurrency_requests, ridge_batch_requests, verdict) VALUES "
                "('old', 'm', '2026-10-01 10:05:00+00:00', '2026-10-01 10:10:00+00:00', "
                "300, 300, 0, 1000, 10, 4, 100, 400, 300, '[90, 80, 70, 60]', 300, "
                "250000000, 250000000, 1, 32, 'pays')"
            )
        )
    await engine.dispose()
    with pytest.raises(SchemaMismatch, match=r"older than this spectax.*spectax db upgrade"):
        await Store.open(database_url)
    config = settings(database_url)
    assert (
        await asyncio.to_thread(main, ["db", "upgrade", "--config", str(_write_config(config))])
        == 0
    )
    store = await Store.open(database_url)
    try:
        [row] = await store.rows("window")
        assert row.output_tokens == 1000 and row.spend_usd == Decimal("0.25")
        assert row.ridge_batch_source == "configured" and row.cold_start_usd is None
        await store.rollup()  # the migration marked old windows for rollup
        [hour] = await store.rows("hour")
        assert hour.output_tokens == 1000 and hour.start == datetime(2026, 10, 1, 10, tzinfo=UTC)
        # a window from before 0004: its verdict counts, its basis was not recorded
        assert (hour.windows_pays, hour.windows_tax, hour.windows_basis_default) == (1, 0, 0)
    finally:
        await store.close()


async def test_upgrading_to_0005_counts_the_verdicts_of_the_hours_still_kept(database_url) -> None:
    """Rollups from before 0005 hold no verdict counts: the upgrade re-rolls every hour whose
    windows are all still kept, and leaves one that retention cut into as it was."""
    store = await Store.open(database_url)
    try:
        await fill(store, database_url)
        await store.rollup()
        windows = await store.rows("window")
        hours = {h.start: h for h in await store.rows("hour")}
    finally:
        await store.close()
    first = min(hours)
    engine = create_async_engine(database_url)
    async with engine.begin() as conn:
        await conn.run_sync(lambda c: command.downgrade(_config(c), "0004"))
        # retention took the first window of the first hour
        await conn.execute(
            text("DELETE FROM windows WHERE start = :start"),
            {"start": min(w.start for w in windows)},
        )
        await conn.run_sync(upgrade)
    await engine.dispose()
    store = await Store.open(database_url)
    try:
        await store.rollup()
        after = {h.start: h for h in await store.rows("hour")}
        cut = after.pop(first)
        assert cut.windows_pays is None and cut.output_tokens == hours[first].output_tokens
        for start, hour in after.items():
            inside = [w for w in windows if start <= w.start < hour.end]
            assert hour.windows_tax + hour.windows_pays + hour.windows_uncertain == sum(
                w.verdict in ("pays", "tax", "uncertain") for w in inside
            )
            assert hour.windows_basis_default == sum(w.verdict_basis == "default" for w in inside)
            assert hour.output_tokens == hours[start].output_tokens
        days = await store.rows("day")
        assert [d.windows_pays is None for d in sorted(days, key=lambda d: d.start)] == [
            True,  # the day of the cut hour: not recorded, never undercounted
            False,
        ]
    finally:
        await store.close()


async def test_a_newer_schema_is_refused(database_url) -> None:
    store = await Store.open(database_url)
    await store.close()
    engine = create_async_engine(database_url)
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    await engine.dispose()
    with pytest.raises(SchemaMismatch, match="written by a newer spectax"):
        await Store.open(database_url)
    assert head_revision() != "9999"
    assert head_revision() == HEAD_REVISION  # the start-up check compares with this constant


async def test_export_as_csv_and_json(database_url, capsys, tmp_path) -> None:
    store = await Store.open(database_url)
    try:
        await fill(store, database_url, minutes=70)
        windows = await store.rows("window")
    finally:
        await store.close()
    config = str(_write_config(settings(database_url), tmp_path))
    assert (
        await asyncio.to_thread(
            main, ["export", "--config", config, "--granularity", "hour", "--format", "csv"]
        )
        == 0
    )
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert sum(int(r["output_tokens"]) for r in rows) == sum(w.output_tokens for w in windows)
    assert sum(Decimal(r["spend_usd"]) for r in rows) == sum(w.spend_usd for w in windows)
    since = datetime.fromtimestamp(T0, UTC).replace(minute=0) + timedelta(hours=1)
    assert (
        await asyncio.to_thread(
            main, ["export", "--config", config, "--format", "json", "--since", since.isoformat()]
        )
        == 0
    )
    exported = json.loads(capsys.readouterr().out)
    assert exported and all(r["start"] >= since.isoformat() for r in exported)
    assert {"endpoint", "model", "start", "output_tokens", "verdict"} <= set(exported[0])


async def test_export_json_gives_positions_and_buckets_as_json_not_strings_of_it(
    database_url, capsys, tmp_path
) -> None:
    """`export --format json` gave the per-position counts and the histogram buckets as
    JSON strings inside the JSON: a consumer had to decode twice."""
    config = await _filled_config(database_url, tmp_path, minutes=20)
    assert await asyncio.to_thread(main, ["export", "--config", config, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(isinstance(r["accepted_per_position"], list) for r in rows)
    assert any(r["accepted_per_position"] for r in rows)
    buckets = [k for k in rows[0] if k.endswith("_buckets")]
    assert buckets
    assert not [(k, r[k]) for r in rows for k in buckets if isinstance(r[k], str)]
    assert any(isinstance(r[k], (list, dict)) for r in rows for k in buckets)
    assert await asyncio.to_thread(main, ["export", "--config", config, "--format", "csv"]) == 0
    text = capsys.readouterr().out  # CSV cells stay JSON text, one per cell
    first = next(csv.DictReader(io.StringIO(text)))
    assert json.loads(first["accepted_per_position"]) == rows[0]["accepted_per_position"]


async def _filled_config(database_url: str, tmp_path, minutes: int) -> str:
    """A store holding `minutes` of windows (`fill`), and a config file naming it."""
    store = await Store.open(database_url)
    try:
        await fill(store, database_url, minutes=minutes)
    finally:
        await store.close()
    return str(_write_config(settings(database_url), tmp_path))


def _write_config(config, directory=None):
    import tempfile
    from pathlib import Path

    import yaml

    folder = Path(directory or tempfile.mkdtemp())
    path = folder / "spectax.yml"
    path.write_text(yaml.safe_dump(config.config.model_dump(mode="json", exclude_none=True)))
    return path


async def test_export_writes_money_as_plain_decimals_zero_included(
    database_url, capsys, tmp_path
) -> None:
    """`0E-9` or `1.2E-7` in a spreadsheet is text or a wrong number: nine places, no exponent."""
    config = await _filled_config(database_url, tmp_path, minutes=70)
    exact = [c.key for c in sa_inspect(TABLES["window"]).columns if isinstance(c.type, Money)]
    exact.append("billed_spend_usd")
    money: list[str] = []
    for fmt in ("csv", "json"):
        assert await asyncio.to_thread(main, ["export", "--config", config, "--format", fmt]) == 0
        out = capsys.readouterr().out
        rows = json.loads(out) if fmt == "json" else list(csv.DictReader(io.StringIO(out)))
        money += [r[k] for r in rows for k in exact if r[k] not in (None, "")]
    assert money and "0.000000000" in money, money[:20]
    assert [m for m in money if not re.fullmatch(r"-?\d+\.\d{9}", m)] == []


@pytest.mark.e2e
def test_a_fresh_database_gets_its_schema_without_alembic_in_the_process(tmp_path) -> None:
    """The daemon's empty database gets its schema from a child process, so it does not
    carry Alembic (and Mako, Pygments) for its life; the revision is the head."""
    import subprocess
    import sys

    script = (
        "import asyncio, sys\n"
        "from spectax.store import Store\n"
        "async def main():\n"
        f"    url = 'sqlite+aiosqlite:///{tmp_path}/fresh.sqlite'\n"
        "    store = await Store.open(url, create_apart=True)\n"
        "    await store.close()\n"
        "asyncio.run(main())\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'alembic', 'mako', 'pygments'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    import sqlite3

    with sqlite3.connect(tmp_path / "fresh.sqlite") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (HEAD_REVISION,)
        ]


@pytest.mark.e2e  # starts a child process (one that fails)
async def test_a_child_that_cannot_create_the_schema_leaves_it_to_the_process(
    tmp_path, monkeypatch
) -> None:
    import sys

    monkeypatch.setattr(sys, "executable", "/bin/false")
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path}/fresh.sqlite", create_apart=True)
    try:
        async with store._engine.connect() as conn:
            revision = await conn.scalar(text("SELECT version_num FROM alembic_version"))
        assert revision == HEAD_REVISION
    finally:
        await store.close()
