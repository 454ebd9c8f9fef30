"""History in SQLite: idempotent window writes, and restarts that neither lose nor double-count."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from builders import (
    NGRAM_PAGES,
    monitor_of,
    ngram_settings,
    queued,
    rows_of,
    scrape_write,
    store_pages,
)
from recorded_pages import page
from spectax.economics.calibration import plain_point, speculated
from spectax.endpoint import EndpointMonitor
from spectax.observed import Resume
from spectax.store import Store, database, window_history
from spectax.store.pending import PendingWrite
from spectax.store.rows import complete_row, window_from_rows

PAGES = NGRAM_PAGES
WINDOW = 300.0


def settings(billing_mode: str = "provisioned"):
    return ngram_settings(url="http://127.0.0.1:1/metrics", gpus=2, billing_mode=billing_mode)


def new_monitor(s, restored=None) -> EndpointMonitor:
    return monitor_of(s, WINDOW, restored)


@pytest.fixture
async def store(database_url: str):
    """An empty store, on SQLite and on PostgreSQL."""
    store = await Store.open(database_url)
    yield store
    await store.close()


async def restored_monitor(store: Store, s) -> EndpointMonitor:
    restored = await store.restore("ngram", WINDOW, 288)
    assert restored.cursor is not None
    return new_monitor(s, restored)


async def test_windows_are_stored_with_exact_sums(store: Store) -> None:
    s = settings()
    monitor = new_monitor(s)
    # one page per 5-minute window: each interval closes the window before it
    await store_pages(monitor, store, [(3000 + i * 300, p) for i, p in enumerate(PAGES)])
    await store_pages(monitor, store, [(4500, PAGES[-1])])  # 3900..4500 lands in the open window
    rows = await store.window_rows("ngram")
    assert sum(r.output_tokens for r in rows) == 2186
    assert sum(r.draft_tokens for r in rows) == 740 and sum(r.accepted_tokens for r in rows) == 564
    # three closed windows, 900 s at 3.6 USD/h x 2 GPUs; the open one holds 600 s more
    assert sum(r.spend_usd for r in rows) == Decimal("1.8")
    assert (await store.money_totals("ngram"))[0] == Decimal("1.8")
    assert monitor.snapshot.spend_usd_total == Decimal("3.0")
    # no control, no baseline, no profile: the verdict is on the default basis, and the
    # configured B* and h leave its band straddling 1 (ECONOMICS.md §3b)
    spoken = [r for r in rows if r.output_tokens]
    assert {(r.verdict, r.verdict_basis, r.ridge_batch_source) for r in spoken} == {
        ("uncertain", "default", "configured")
    }
    assert all(r.speedup_low_ratio < 1 < r.speedup_high_ratio for r in spoken)
    assert all(r.speedup_low_ratio <= r.speedup_ratio <= r.speedup_high_ratio for r in spoken)
    assert all(r.start.tzinfo is not None for r in rows)


async def test_writing_a_window_twice_replaces_it(store: Store) -> None:
    monitor = new_monitor(settings())
    monitor.observe_page(0, page(PAGES[0]), 0.01)
    monitor.observe_page(200, page(PAGES[3]), 0.01)
    write = queued(monitor.observe_page(400, page(PAGES[3]), 0.01))  # closes [0, 300)
    assert write is not None
    await store.save(write.endpoint, write.rows, write.cursor)
    await store.save(write.endpoint, write.rows, write.cursor)
    rows = await store.window_rows("ngram")
    assert len(rows) == 1 and rows[0].output_tokens == 2186


async def test_graceful_restart_resumes_the_open_window(store: Store) -> None:
    s = settings()
    first = new_monitor(s)
    await store_pages(first, store, [(10, PAGES[0]), (20, PAGES[1])])
    flushed = queued(first.flush())  # graceful stop inside window [0, 300)
    assert flushed is not None
    await store.save(flushed.endpoint, flushed.rows, flushed.cursor)

    second = await restored_monitor(store, s)
    assert second.snapshot.spend_usd_total == first.snapshot.spend_usd_total
    await store_pages(second, store, [(40, PAGES[2]), (310, PAGES[3])])  # 310 closes [0, 300)
    rows = await store.window_rows("ngram")
    assert [r.start.timestamp() for r in rows] == [0.0]
    assert rows[0].output_tokens == 2186 - 2186 + sum_generation(PAGES[2]) - 0
    assert second.snapshot.spend_usd_total == Decimal(3.6 * 2 * 300 / 3600).quantize(
        Decimal("1e-9")
    )


def sum_generation(name: str) -> int:
    from spectax.engines import get_parser

    return round(get_parser("vllm")(page(name)).models["tiny-llama"].generation_tokens)


async def test_crash_loses_nothing_the_cursor_covers(store: Store) -> None:
    """kill -9 between windows: the open window was never written; the cursor brings it back."""
    s = settings()
    first = new_monitor(s)
    await store_pages(first, store, [(10, PAGES[0]), (310, PAGES[1]), (400, PAGES[2])])
    # crash here: the window [300, 600) holding PAGES[1] -> PAGES[2] is lost from memory
    second = await restored_monitor(store, s)
    await store_pages(second, store, [(700, PAGES[3]), (1000, PAGES[3])])
    rows = await store.window_rows("ngram")
    assert sum(r.output_tokens for r in rows) == 2186
    # everything from the cursor (t=10) to t=700: 690 s at 3.6 USD/h x 2 GPUs
    assert sum(r.spend_usd for r in rows) == Decimal("1.38")


async def test_serverless_bills_only_busy_time(store: Store) -> None:
    monitor = new_monitor(settings("serverless"))
    await store_pages(
        monitor, store, [(0, PAGES[0]), (100, PAGES[0]), (200, PAGES[3]), (400, PAGES[3])]
    )
    rows = await store.window_rows("ngram")
    # only the 100 s interval that generated tokens is billed: 100 s x 2 GPUs x 3.6/h = 0.2
    assert sum(r.spend_usd for r in rows) == Decimal("0.2")
    assert rows[0].busy_seconds == 100


async def test_unreachable_database_is_a_clear_error(tmp_path: Path) -> None:
    from spectax.store import StoreError

    with pytest.raises(StoreError) as caught:
        await Store.open("postgresql+asyncpg://spectax:s3cret-canary@127.0.0.1:1/none")
    assert "s3cret-canary" not in str(caught.value)
    assert "cannot open the store (postgresql+asyncpg)" in str(caught.value)


async def test_crash_after_a_window_closes_resumes_where_the_history_ends(store: Store) -> None:
    """The scrape that closes a window starts the next one: its interval is not yet stored,
    so the cursor stored with the closed window must be the sample before it."""
    s = settings()
    first = new_monitor(s)
    await store_pages(first, store, [(10, PAGES[0]), (290, PAGES[1]), (310, PAGES[2])])
    # crash: [300, 600) held PAGES[1] -> PAGES[2] in memory only
    second = await restored_monitor(store, s)
    await store_pages(second, store, [(700, PAGES[3]), (1000, PAGES[3])])
    rows = await store.window_rows("ngram")
    assert sum(r.output_tokens for r in rows) == 2186
    assert sum(r.spend_usd for r in rows) == Decimal("1.38")  # 690 s at 3.6 USD/h x 2 GPUs


async def test_one_batch_stores_what_the_same_writes_store_one_by_one(
    store: Store, tmp_path: Path
) -> None:
    """The daemon writes queued windows in batches (one transaction per batch). A batch
    holding a partial window, its full version, an older replay of the partial one and
    another endpoint's writes leaves exactly what writing them one by one leaves: the
    larger window, the later cursor, the hour marked for rollup."""
    s = settings()
    monitor = new_monitor(s)
    writes = [queued(monitor.observe_page(0, page(PAGES[0]), 0.01))]  # the baseline cursor
    monitor.observe_page(100, page(PAGES[1]), 0.01)
    partial = queued(monitor.flush())  # a graceful stop inside [0, 300)
    monitor.observe_page(200, page(PAGES[2]), 0.01)
    writes.append(queued(monitor.observe_page(400, page(PAGES[3]), 0.01)))  # closes [0, 300)
    assert partial is not None and None not in writes
    other = [
        ("other", [{**row, "endpoint": "other"} for row in w.rows], w.cursor) for w in writes if w
    ]
    batch = [
        (w.endpoint, w.rows, w.cursor) for w in (writes[0], partial, writes[1], partial) if w
    ] + other
    await store.save_many(batch)

    one_by_one = await Store.open(f"sqlite+aiosqlite:///{tmp_path}/one-by-one.sqlite")
    try:
        for endpoint, rows, cursor in batch:
            await one_by_one.save(endpoint, rows, cursor)
        for endpoint in ("ngram", "other"):
            got = [(r.start, r.seconds, r.output_tokens) for r in await store.window_rows(endpoint)]
            want = [
                (r.start, r.seconds, r.output_tokens)
                for r in await one_by_one.window_rows(endpoint)
            ]
            assert got == want and len(got) == 1 and got[0][1] == 200  # not the partial 100
            cursor = await store.cursor(endpoint)
            assert cursor is not None and cursor[0] == 200.0
            assert cursor == await one_by_one.cursor(endpoint)
        assert await store.rollup() == await one_by_one.rollup() == 4  # 2 hours, 2 days
    finally:
        await one_by_one.close()


@pytest.mark.parametrize("old_first", [True, False])
async def test_rows_spooled_before_an_upgrade_write_beside_newer_ones(
    store: Store, old_first
) -> None:
    """The spool keeps rows by column name; one written before migrations 0004-0008 lacks
    their columns. In one batch with newer rows, in either order, both are stored, each with
    its own values (the old one's new columns at their defaults)."""
    monitor = new_monitor(settings())
    writes = []
    for t, name in [(3000, PAGES[0]), (3300, PAGES[1]), (3600, PAGES[2]), (3900, PAGES[3])]:
        write = queued(monitor.observe_page(t, page(name), 0.01))
        if write is not None and write.rows:
            writes.append(write)
    old_write, new_write = writes[0], writes[-1]
    assert old_write.rows[0]["start"] != new_write.rows[0]["start"]
    added = {"speedup_low_ratio", "speedup_high_ratio", "step_overhead_ratio", "verdict_basis"}
    added |= {"estimated_flops", "estimated_read_bytes"}
    added |= {"preemptions", "waiting_seconds", "kv_usage_seconds", "kv_cache_blocks"}
    added |= {"kv_block_size", "kv_cache_bytes"}
    added |= {
        f"{h}_{part}"
        for h in ("time_to_first_token", "e2e_request_latency")
        for part in ("sum", "count")
    }
    added |= {f"{h}_buckets" for h in ("iteration_tokens", "inter_token_latency")}
    added |= {
        f"{h}_buckets"
        for h in ("time_per_output_token", "time_to_first_token", "e2e_request_latency")
    }
    old_rows = [{k: v for k, v in row.items() if k not in added} for row in old_write.rows]
    batch = [("ngram", old_rows, None), ("ngram", new_write.rows, new_write.cursor)]
    await store.save_many(batch if old_first else batch[::-1])
    rows = {r.start: r for r in await store.window_rows("ngram")}
    old = rows[old_rows[0]["start"]]
    new = rows[new_write.rows[0]["start"]]
    assert old.verdict_basis is None and old.speedup_low_ratio is None
    assert old.output_tokens == old_rows[0]["output_tokens"]
    assert new.verdict_basis == new_write.rows[0]["verdict_basis"] is not None
    assert new.speedup_low_ratio == pytest.approx(new_write.rows[0]["speedup_low_ratio"])


async def test_the_compiled_upserts_send_what_sqlalchemy_sends(store: Store) -> None:
    """save_many executes its upserts through the driver, compiled once (issue 31): the
    same SQL and the same bound values, row by row, as SQLAlchemy's own execute of the
    statements, on each backend (a Decimal, a datetime, an int in a float column)."""
    from sqlalchemy import event

    from spectax.store.window_history import WindowStatements

    monitor = new_monitor(settings())
    monitor.observe_page(3000, page(PAGES[0]), 0.01)
    monitor.observe_page(3100, page(PAGES[1]), 0.01)
    write = queued(monitor.flush())
    assert write is not None and write.cursor is not None
    rows = [complete_row({**row, "restarts": 1, "seconds": 100}) for row in write.rows]
    rows.append({**rows[0], "model": "other", "spend_usd": Decimal("0.123456789")})
    due = [{"granularity": "hour", "endpoint": "ngram", "start": rows[0]["start"], "version": 1}]
    cursors = [{"endpoint": "ngram", "observed_at": 3100, "sample": "{}"}]
    statements = WindowStatements(store._insert, store._engine.dialect)
    sent: list[tuple[str, list[tuple[Any, ...]]]] = []

    def record(conn, cursor, statement, parameters, context, executemany) -> None:
        many = parameters if executemany else [parameters]
        sent.append((statement, [tuple(p) for p in many]))

    event.listen(store._engine.sync_engine, "before_cursor_execute", record)
    try:
        for statement, values in (
            (statements.windows, rows),
            (statements.due, due),
            (statements.cursors, cursors),
        ):
            for execute in (statement.execute, _through_sqlalchemy(statement)):
                async with store._engine.connect() as connection:
                    await execute(connection, values)
                    await connection.rollback()
            assert sent[-1] == sent[-2] and len(sent[-1][1]) == len(values)
    finally:
        event.remove(store._engine.sync_engine, "before_cursor_execute", record)


def _through_sqlalchemy(statement: Any) -> Any:
    async def execute(connection: Any, rows: list[dict[str, Any]]) -> None:
        await connection.execute(statement.statement, rows)

    return execute


def test_a_complete_row_is_passed_as_is_and_an_old_one_completed() -> None:
    """complete_row: a row with every column (window_rows') is the same object, not a copy
    merged at every write; a row spooled before an upgrade, even one as long because it
    holds a column since dropped, gets the missing columns at their defaults."""
    from spectax.store.rows import _DEFAULTS

    full = {name: None for name in _DEFAULTS}
    assert complete_row(full) is full
    old = {name: 1 for name in list(_DEFAULTS)[:-1]} | {"a_dropped_column": 1}
    completed = complete_row(old)
    assert completed.keys() >= _DEFAULTS.keys()
    last = list(_DEFAULTS)[-1]
    assert completed[last] == _DEFAULTS[last]


@pytest.mark.parametrize("history", [1, 288])
async def test_a_start_up_restores_each_endpoint_as_if_alone(
    store: Store, monkeypatch: pytest.MonkeyPatch, history: int
) -> None:
    """A start-up reads the endpoints a batch at a time (restore_each); each one's resume is
    its own, whatever else its batch held: its money, its cursor, its open window whole
    (buckets and all, as the monitor had it), and of its last `history` closed windows the
    ones without speculation (the calibration's points), with only what the calibration
    reads. An endpoint with writes still queued is overlaid; one never stored starts empty."""
    monkeypatch.setattr(window_history, "RESTORE_BATCH", 2)
    plain = ("nospec_0_before_traffic.txt", "nospec_2_mid.txt", "nospec_3_after.txt")
    scrapes = {  # speculating (PAGES) or not (plain)
        "a": [(10, PAGES[0]), (110, PAGES[1]), (310, PAGES[2]), (400, PAGES[3])],
        "b": [(10, PAGES[0]), (20, PAGES[1])],
        "c": [(10, plain[0]), (110, plain[1]), *((t, plain[2]) for t in (310, 610, 910, 999))],
        "d": [(10, plain[0]), (110, plain[1]), (310, plain[2]), (320, plain[2])],
        "e": [(10, plain[0]), (110, plain[1]), (310, plain[2]), (320, plain[2])],
    }
    opened, pending = {}, {}
    for name, times_pages in scrapes.items():
        monitor = new_monitor(settings())
        writes = [w for t, p in times_pages for w in scrape_write(monitor, t, page(p))]
        writes = [renamed(w, name) for w in writes]
        if name == "d":  # its last write (its open window's) still queued at the stop
            pending["d"] = writes[-1:]
            writes = writes[:-1]
        for write in writes:
            await store.save(write.endpoint, write.rows, write.cursor)
        flushed = monitor.flush()
        assert flushed is not None and flushed.open_window is not None
        opened[name] = flushed.open_window.window
    # c's windows and e's, later and earlier, are read in one batch
    names = ["a", "b", "c", "e", "never", "d"]
    restored = {
        name: resume async for name, resume in store.restore_each(names, WINDOW, history, pending)
    }
    assert list(restored) == names
    for name in names:
        alone = await store.restore(name, WINDOW, history, pending.get(name, ()))
        assert restored[name] == alone, name
    assert restored["never"] == Resume()
    closed, points = {}, {}
    for name, window in opened.items():
        resume = restored[name]
        assert resume.cursor is not None and resume.open_window is not None
        assert resume.open_window.start == window.start == (resume.cursor[0] // WINDOW) * WINDOW
        (counts,) = resume.open_window.models.values()
        (before,) = window.models.values()
        latency = counts.time_per_output_token
        assert latency is not None and before.time_per_output_token is not None
        assert latency.buckets == before.time_per_output_token.buckets != ()
        assert all(
            row["start"].timestamp() == window.start
            for w in pending.get(name, [])
            for row in w.rows
        )
        stored: dict[float, list[Any]] = {}
        for row in await store.window_rows(name):
            stored.setdefault(row.start.timestamp(), []).append(row)
        closed[name] = sorted(t for t in stored if t != window.start)
        last = closed[name][-history:]
        kept = [t for t in last if not speculated(window_from_rows(stored[t]))]
        assert [w.start for w in resume.recent_windows] == kept
        for recent in resume.recent_windows:
            (model,) = recent.models.values()
            assert model.requests_finished == 0  # not read
            if (latency := model.time_per_output_token) is not None:
                assert latency.buckets == ()
                if latency.count > 0:
                    points[name] = plain_point(recent, min_requests=1)
    assert closed["a"] and not restored["a"].recent_windows  # speculating: no point to read
    assert len(closed["c"]) >= 2  # more than a history of 1 keeps
    assert points.keys() >= {"d", "e"} and None not in points.values()
    assert restored["a"].spend_usd_total > restored["b"].spend_usd_total > 0


def renamed(write: PendingWrite, endpoint: str) -> PendingWrite:
    """`write` as if another endpoint had made it."""
    rows = [{**row, "endpoint": endpoint} for row in write.rows]
    return PendingWrite(endpoint, rows, write.cursor)


async def test_a_window_where_one_model_speculated_gives_the_calibration_nothing(
    store: Store,
) -> None:
    """A window gives a plain point only when no model of it speculated: a restart reads
    none of one where one model drafted and another did not, and reads a plain one."""
    (row,) = rows_of("x", 0).rows
    assert row["drafts"] is not None and row["draft_tokens"] is not None
    unspeculated = {"drafts": None, "draft_tokens": None, "accepted_tokens": None}
    await store.save("x", [row, {**row, "model": "other", **unspeculated}], None)
    await store.save("x", rows_of("x", 300, **unspeculated).rows, None)
    restored = await store.restore("x", WINDOW, 288)
    assert [w.start for w in restored.recent_windows] == [300.0]
    assert restored.recent_windows[0].models.keys() == {row["model"]}


async def test_a_sqlite_too_old_for_the_stores_queries_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite before 3.25 has no window functions, which a restart's query uses: the store
    does not open on it, and says which SQLite this Python links and what to do."""
    monkeypatch.setattr(database.sqlite3, "sqlite_version_info", (3, 22, 0))
    monkeypatch.setattr(database.sqlite3, "sqlite_version", "3.22.0")
    with pytest.raises(database.StoreUnusable) as raised:
        await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'h.sqlite'}")
    assert "SQLite 3.22.0" in str(raised.value) and "3.25.0 or later" in str(raised.value)
    assert not (tmp_path / "h.sqlite").exists()
    with pytest.raises(database.StoreUnusable, match=r"3\.25\.0 or later"):
        await database.probe(f"sqlite+aiosqlite:///{tmp_path / 'h.sqlite'}")
