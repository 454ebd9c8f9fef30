"""The load curve kept in the history (issue 34): the hourly rollup bins each hour's windows
by load (`rollup_load_bins`, migration 0012), the daemon's curve reads those bins and only
the windows of the hours not rolled yet, the bins outlive the windows' retention, and the
monthly report's curve is the windows' rather than the hours' means. On SQLite and
PostgreSQL."""

from __future__ import annotations

import asyncio
import gzip
import json
import math
import threading
import zlib
from dataclasses import fields, is_dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from alembic import command
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import create_async_engine

from builders import monitor_of, ngram_settings, rows_of
from report_history import report_of
from spectax import curve_book, web
from spectax.config import validate
from spectax.curve_book import CurveBook, speculating_curves
from spectax.economics.load_curve import LoadCurve, LoadSample, load_curve
from spectax.exposition import SnapshotCollector, StoreStatus
from spectax.exposition import collector as collector_module
from spectax.exposition.collector import LoadCurves
from spectax.exposition.text import line_writer
from spectax.report.load_curve_table import load_curve_table
from spectax.report.period import Month
from spectax.store import Store, load_history
from spectax.store.models import LoadBinRow, RollupDue, WindowRow
from spectax.store.schema import _config, upgrade

NOW = datetime(2027, 1, 15, 12, 0, tzinfo=UTC)
MODEL = "tiny-llama"  # the recorded ngram page's (builders.closed_window_rows)
# Loads and speedups cycled window by window: bins 1, 2, 4, 32, 256 and back, paying at low
# load and a tax from 32 requests up, so the curve has a crossover.
CYCLE = ((0.5, 1.3), (3.0, 1.25), (6.0, 1.1), (40.0, 0.8), (300.0, 0.6), (40.0, 0.8))


def window(start: datetime, i: int, endpoint: str = "x") -> list[dict[str, Any]]:
    """The i-th 5-minute window of the cycle. Every 7th was measured against a control;
    every 5th had no speedup (an unassessed window), every 11th no band's low end, every
    13th counted no drafted tokens (SGLang-like); positions, B* and c move with i, so the
    newest window's are the ones in force."""
    running, speedup = CYCLE[i % len(CYCLE)]
    values: dict[str, Any] = {
        "seconds": 300.0,
        "busy_seconds": 300.0,
        "concurrency_requests": running,
        "running_seconds": running * 300.0,
        "output_tokens": round(20 * max(running, 1.0) * 300),
        "verdict_basis": "measured" if i % 7 == 0 else "profile",
        "plain_busy_seconds": 300.0 * speedup,
        "assessed_busy_seconds": 300.0,
        "speedup_low_ratio": speedup - 0.05,
        "speedup_high_ratio": speedup + 0.05,
        "speculation_savings_usd": 0.25 * (speedup - 1.0),
        "accepted_per_position": json.dumps([100 + i, 60 + i % 5, 30]),
        "ridge_batch_requests": 32.0 + i,
        "draft_cost_ratio": 0.01 * (i % 4),
    }
    if i % 5 == 0:
        values.update(plain_busy_seconds=None, assessed_busy_seconds=0.0, verdict_basis=None)
    if i % 11 == 0:
        values["speedup_low_ratio"] = None
    if i % 13 == 0:
        values.update(draft_tokens=None, drafts=None, accepted_tokens=None)
    rows = rows_of(endpoint, int(start.timestamp()), **values).rows
    if i % 17 == 0:  # a page that served no model: no point of any curve
        rows.append({**rows[0], "model": ""})
    return rows


async def save(store: Store, rows: list[dict[str, Any]]) -> None:
    by_endpoint: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_endpoint.setdefault(row["endpoint"], []).append(row)
    for endpoint, found in by_endpoint.items():
        await store.save(endpoint, found, None)


def window_sample(w: WindowRow) -> LoadSample:
    """A stored window as one sample, as `load_curve.sample_of` makes one of a window in
    memory: the oracle the store's binned samples must add up to."""
    assessed = w.plain_busy_seconds is not None and (w.assessed_busy_seconds or 0.0) > 0
    busy = w.assessed_busy_seconds or 0.0 if assessed else 0.0
    low, high = w.speedup_low_ratio, w.speedup_high_ratio
    return LoadSample(
        end=w.end.timestamp(),
        seconds=w.seconds,
        concurrency=w.concurrency_requests,
        output_tokens=w.output_tokens,
        drafts=w.drafts,
        draft_tokens=w.draft_tokens,
        accepted_tokens=w.accepted_tokens,
        accepted_per_position=tuple(json.loads(w.accepted_per_position)),
        plain_busy_seconds=w.plain_busy_seconds if assessed else None,
        assessed_busy_seconds=busy,
        low_busy_seconds=busy * low if assessed and low is not None else None,
        high_busy_seconds=busy * high if assessed and high is not None else None,
        basis=w.verdict_basis if assessed else None,  # type: ignore[arg-type]
        savings_usd=w.speculation_savings_usd,
        busy_usd=float(w.busy_spend_usd) if w.busy_spend_usd is not None else None,
        ridge_batch=w.ridge_batch_requests,
        draft_cost_ratio=w.draft_cost_ratio or 0.0,
    )


async def oracle(store: Store, since: datetime) -> dict[tuple[str, str], list[LoadSample]]:
    """Every window of the lookback, one sample each."""
    found: dict[tuple[str, str], list[LoadSample]] = {}
    for w in await store.rows("window", since=since):
        if w.model:
            found.setdefault((w.endpoint, w.model), []).append(window_sample(w))
    return found


def close(a: Any, b: Any) -> bool:
    """Equal, floats to 1e-12: sums of the same floats in another order."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    if is_dataclass(a) and type(a) is type(b):  # a LoadBin, a LoadSample
        return all(close(getattr(a, f.name), getattr(b, f.name)) for f in fields(a))
    return bool(a == b)


def assert_same_curve(got: LoadCurve, want: LoadCurve) -> None:
    assert [b.label for b in got.bins] == [b.label for b in want.bins]
    for x, y in zip(got.bins, want.bins, strict=True):
        assert close(x, y), (x, y)
    assert got.crossover_requests == want.crossover_requests
    assert close(got.tax_time_share, want.tax_time_share) and close(got.tax_usd, want.tax_usd)
    assert got.stalls == want.stalls
    assert (got.ridge_batch, got.draft_cost_ratio) == (want.ridge_batch, want.draft_cost_ratio)


def metrics_of(curves: LoadCurves) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The load curve families as /metrics exports them: (name, labels) -> value."""
    collector = SnapshotCollector(lambda: {}, lambda: StoreStatus(0, 0), load_curves=lambda: curves)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        if family.name.startswith("spectax_load_")
        for s in family.samples
    }


def assert_same_metrics(got: LoadCurves, want: LoadCurves) -> None:
    mine, theirs = metrics_of(got), metrics_of(want)
    assert sorted(mine) == sorted(theirs) and mine
    for key, value in theirs.items():
        assert close(mine[key], value), key


@pytest.fixture
async def store(database_url: str):
    store = await Store.open(database_url)
    yield store
    await store.close()


@pytest.mark.parametrize("spans_per_read", [load_history.SPANS_PER_READ, 1])
async def test_the_curve_from_bins_and_unrolled_windows_is_the_windows_curve(
    store: Store, spans_per_read: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same windows, same curve, same /metrics: from every window one by one, and from the
    rolled hours' bins plus the windows of the hours still due (a late window re-marked a
    rolled hour, new windows the last one) and of the lookback's partial first hour. The
    bins are summed by the database; with more due spans than it takes in one query (after
    migration 0012), read row by row."""
    monkeypatch.setattr(load_history, "SPANS_PER_READ", spans_per_read)
    first = NOW - timedelta(hours=5, minutes=25)  # 06:35; the lookback starts at 06:40
    since = first + timedelta(minutes=5)
    slots = list(range(65))
    late, last_hour = 20, range(59, 65)  # 08:15 comes late; 11:30 on come after the rollup
    early = [i for i in slots if i != late and i not in last_hour]
    await save(store, [r for i in early for r in window(first + timedelta(minutes=5 * i), i)])
    await store.rollup()
    assert await store.load_bins(first, NOW) and not await due_hours(store)
    await save(
        store, [r for i in (late, *last_hour) for r in window(first + timedelta(minutes=5 * i), i)]
    )
    assert await due_hours(store) == [datetime(2027, 1, 15, h, tzinfo=UTC) for h in (8, 11)]

    for rolled in (False, True):
        if rolled:
            await store.rollup()
            assert not await due_hours(store)
        got = await store.load_samples(since, ["x"])
        want = await oracle(store, since)
        assert sorted(got) == [("x", MODEL)] == sorted(want)
        # One sample per hour, bin, basis and drafted-or-not: not one per window.
        assert len(got[("x", MODEL)]) < len(want[("x", MODEL)])
        assert_same_curve(load_curve(got[("x", MODEL)]), load_curve(want[("x", MODEL)]))
        assert_same_metrics(speculating_curves(got), speculating_curves(want))
    curve = load_curve(got[("x", MODEL)])
    assert curve.crossover_requests == 32 and curve.ridge_batch == 32.0 + 64
    assert all(b.position_acceptance for b in curve.bins)  # the K schedule's input is there
    # The daemon's job reads the same.
    book = CurveBook()
    watched = {"x": monitor_of(ngram_settings("x")).snapshot}
    await book.refresh(store, NOW, (NOW - since).total_seconds(), watched)
    assert_same_metrics(book.current, speculating_curves(want))


async def test_the_refresh_lets_the_event_loop_run_between_curves(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's refresh makes each endpoint's curve, K schedule and lines on the event
    loop, a pair at a time with a turn of the loop after each: scrapes and /metrics reads
    run in between. (In a worker thread it held the GIL for ~3.5 s at 2,000 endpoints, and
    the loop's every socket call waited the interpreter's switch interval to get it back:
    bench/README.) A read in the middle of a refresh sees every pair, made again or still
    the last refresh's, and the text page and prometheus_client's collect() agree there,
    though a reload changed the endpoints' K schedules in between. What the refresh makes
    is the lines of one pass over all the curves; an endpoint no longer watched is gone."""
    first = NOW - timedelta(hours=2)
    names = [f"e{n}" for n in range(4)]
    await save(
        store,
        [
            r
            for n in names
            for i in range(12)
            for r in window(first + timedelta(minutes=5 * i), i, n)
        ],
    )

    def watched_with(schedule: list[list[int]] | None) -> dict[str, Any]:
        speculation = {"method": "ngram"} | ({"schedule": schedule} if schedule else {})
        return {n: monitor_of(ngram_settings(n, speculation=speculation)).snapshot for n in names}

    book = CurveBook()
    await book.refresh(store, NOW, 3 * 3600.0, watched_with([[1, 3, 3], [4, 1024, 0]]))
    assert sorted(book.current.curves) == [(n, MODEL) for n in names]
    assert set(book.current.boundaries.values()) == {(4,)}
    collector = SnapshotCollector(
        lambda: {}, lambda: StoreStatus(0, 0), load_curves=lambda: book.current
    )

    events: list[tuple[str, int]] = []
    made_curve = curve_book.load_curve
    real_lines = collector_module.load_curve_samples

    def load_curve_logged(samples: Any) -> LoadCurve:
        events.append(("curve", threading.get_ident()))
        return made_curve(samples)

    def lines_logged(*args: Any) -> None:
        if not reading:  # collect() of a read formats the curves too
            events.append(("lines", threading.get_ident()))
        real_lines(*args)

    monkeypatch.setattr(curve_book, "load_curve", load_curve_logged)
    monkeypatch.setattr(collector_module, "load_curve_samples", lines_logged)
    refreshing, reading, reads = True, False, []

    async def loop_turns() -> None:
        nonlocal reading
        while refreshing:
            events.append(("turn", threading.get_ident()))
            reading = True
            reads.append((book.current, text_samples(collector), collected_samples(collector)))
            reading = False
            await asyncio.sleep(0)

    turns = asyncio.create_task(loop_turns())
    # A reload in between: the endpoints' K schedule now changes K at 8, not 4.
    await book.refresh(store, NOW, 3 * 3600.0, watched_with([[1, 7, 3], [8, 1024, 0]]))
    refreshing = False
    await turns

    steps = [i for i, (kind, _) in enumerate(events) if kind != "turn"]
    assert [events[i][0] for i in steps] == ["curve", "lines"] * 4
    assert {ident for _, ident in events} == {threading.get_ident()}  # all on the loop's thread
    # The loop ran after each pair (its curve, then its lines).
    assert all(events[i + 1][0] == "turn" for i in steps if events[i][0] == "lines")
    assert len({id(current) for current, _, _ in reads}) > 2  # pairs made again one by one
    for current, text, collected in reads:
        assert sorted(current.curves) == [(n, MODEL) for n in names]
        assert text == collected and text  # the text page is collect()'s, old pairs or new
    assert set(book.current.boundaries.values()) == {(8,)}
    monkeypatch.undo()
    lines: dict[str, list[str]] = {}
    one_pass = book.current
    collector_module.load_curve_samples(
        line_writer(lines), one_pass.curves, one_pass.boundaries, one_pass.schedules
    )
    assert {f: b"".join(pieces) for f, pieces in one_pass.lines.items()} == {
        f: "".join(found).encode() for f, found in lines.items()
    }
    samples = await store.load_samples(first - timedelta(hours=1), names)
    assert one_pass.lines == speculating_curves(samples, {n: (8,) for n in names}).lines
    # An endpoint no longer watched: its pair is gone after the next refresh.
    watched = watched_with(None)
    del watched["e2"]
    await book.refresh(store, NOW, 3 * 3600.0, watched)
    assert sorted(book.current.curves) == [(n, MODEL) for n in names if n != "e2"]
    assert not book.current.boundaries
    assert all(len(pieces) == 3 for pieces in book.current.lines.values())


async def test_the_curves_lines_are_compressed_once_and_the_gzip_is_the_page(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A day of curves is half of a 25 MB page, and changes only at a refresh while the page
    changes at every scrape: a read compresses the curves' lines only the first time, and
    lays the kept streams between the rest's. What a client gets is the page, byte for
    byte, in one gzip member (read to its end by a single-member reader, as Go's and curl's
    are), after a new snapshot and after a refresh that made new curves."""
    names = [f"e{n}" for n in range(4)]
    first = NOW - timedelta(hours=2)
    await save(
        store,
        [
            r
            for n in names
            for i in range(12)
            for r in window(first + timedelta(minutes=5 * i), i, n)
        ],
    )
    speculation = {"method": "ngram"}
    snapshots = {n: monitor_of(ngram_settings(n, speculation=speculation)).snapshot for n in names}
    book = CurveBook()
    await book.refresh(store, NOW, 3 * 3600.0, snapshots)
    collector = SnapshotCollector(
        lambda: snapshots, lambda: StoreStatus(0, 0), load_curves=lambda: book.current
    )
    compressed: list[int] = []
    make = web.isal_zlib.compressobj

    class Counting:
        def __init__(self, *args: int) -> None:
            self._compressor = make(*args)

        def compress(self, data: bytes) -> bytes:
            compressed.append(len(data))
            return self._compressor.compress(data)

        def flush(self, *mode: int) -> bytes:
            return self._compressor.flush(*mode)

    monkeypatch.setattr(web.isal_zlib, "compressobj", Counting)

    def served() -> tuple[bytes, int]:
        """The page gzipped as a read does it, checked against the same page joined, and
        the bytes that read compressed."""
        compressed.clear()
        gzipped = web.gzip_parts(collector.render_page().blocks)
        work = sum(compressed)
        body = gzip.decompress(gzipped)
        assert body == b"".join(collector.render_page().parts)
        single = zlib.decompressobj(16 + zlib.MAX_WBITS)
        assert single.decompress(gzipped) == body
        assert single.eof and not single.unused_data
        return body, work

    curves_bytes = sum(map(len, (p for pieces in book.current.lines.values() for p in pieces)))
    body, work = served()
    assert curves_bytes > 0 and b"spectax_load_time_share_ratio{" in body
    assert work == len(body)  # the first read compresses the whole page
    snapshots["e1"] = monitor_of(ngram_settings("e1", speculation=speculation)).snapshot
    body, work = served()
    assert work == len(body) - curves_bytes  # the next ones all but the curves
    before = book.current.lines
    await save(store, window(NOW - timedelta(minutes=5), 13, "e0"))
    await book.refresh(store, NOW, 3 * 3600.0, snapshots)
    assert book.current.lines != before
    body, work = served()
    assert work == len(body)  # new curves: compressed again
    text = body.decode()
    for family in book.current.lines:
        assert "".join(p.decode() for p in book.current.lines[family]) in text


async def test_one_pairs_failure_leaves_the_other_curves_made(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A pair whose curve cannot be made (a bug met by its odd data) is left out, said once
    in the log however many refreshes meet it, and its recovery once; the other pairs'
    curves are made as ever."""
    first = NOW - timedelta(hours=2)
    names = ["a", "b", "c"]
    await save(
        store,
        [
            r
            for n in names
            for i in range(12)
            for r in window(first + timedelta(minutes=5 * i), i, n)
        ],
    )
    watched = {n: monitor_of(ngram_settings(n)).snapshot for n in names}
    real = curve_book._made

    def failing_for_b(key: tuple[str, str], *args: Any) -> Any:
        if failing and key[0] == "b":
            raise ZeroDivisionError("float division by zero")
        return real(key, *args)

    monkeypatch.setattr(curve_book, "_made", failing_for_b)
    book, failing = CurveBook(), True
    with caplog.at_level("INFO", logger="spectax.curve_book"):
        for _ in range(2):
            await book.refresh(store, NOW, 3 * 3600.0, watched)
            assert sorted(book.current.curves) == [("a", MODEL), ("c", MODEL)]
        failing = False
        await book.refresh(store, NOW, 3 * 3600.0, watched)
    assert sorted(book.current.curves) == [(n, MODEL) for n in names]
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "load curves: b, tiny-llama: cannot make its curve:"
        " ZeroDivisionError('float division by zero')",
        "load curves: b, tiny-llama: its curve is made again",
    ]


def text_samples(collector: SnapshotCollector) -> dict[tuple[str, tuple[Any, ...]], float]:
    """The load curves' samples on the text page /metrics serves."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(collector.render_text().decode())
        if family.name.startswith("spectax_load_")
        for s in family.samples
    }


def collected_samples(collector: SnapshotCollector) -> dict[tuple[str, tuple[Any, ...]], float]:
    """The same samples as prometheus_client's collect() gives them (OpenMetrics' path)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in collector.collect()
        if family.name.startswith("spectax_load_")
        for s in family.samples
    }


async def due_hours(store: Store) -> list[datetime]:
    """The hours marked for the hourly rollup."""
    async with store._sessions() as session:
        query = select(RollupDue.start).where(RollupDue.granularity == "hour")
        return sorted(await session.scalars(query))


async def test_the_bins_outlive_the_windows_and_go_with_the_hourly_rows(store: Store) -> None:
    """Windows are kept 14 days, hourly rows 400: a month's curve is still the windows'
    after they are gone, and the bins go when the hours do."""
    start = NOW - timedelta(days=3)
    await save(store, [r for i in range(36) for r in window(start + timedelta(minutes=5 * i), i)])
    await save(
        store,
        [
            r
            for i in range(12)
            for r in window(NOW - timedelta(hours=1) + timedelta(minutes=5 * i), i)
        ],
    )
    await store.rollup()
    before = load_curve((await oracle(store, start))[("x", MODEL)])
    kept = {"window": 86400.0, "hour": 400 * 86400.0, "day": None}
    assert await store.apply_retention(NOW, kept) > 0
    assert all(w.start >= NOW - timedelta(days=1) for w in await store.rows("window"))
    old = await store.load_bins(start, start + timedelta(hours=3), ["x"])
    assert {hour for _, _, hour, _ in old} == {start + timedelta(hours=h) for h in range(3)}
    after = await store.load_samples(start, ["x"])
    assert_same_curve(load_curve(after[("x", MODEL)]), before)
    await store.apply_retention(NOW, {"window": 86400.0, "hour": 86400.0, "day": None})
    assert not await store.load_bins(start, start + timedelta(hours=3), ["x"])
    assert await store.load_bins(NOW - timedelta(hours=1), NOW, ["x"])


async def test_migration_0012_bins_the_hours_whose_windows_are_all_kept(
    database_url: str,
) -> None:
    """Upgrading from 0011 marks the hours whose windows are all still stored, and the next
    rollup bins them as it bins a new hour; an hour retention has cut into gets none (its
    curve would be part of it): the report falls back to its hourly row there."""
    first = NOW - timedelta(hours=4)
    store = await Store.open(database_url)
    try:
        await save(
            store, [r for i in range(48) for r in window(first + timedelta(minutes=5 * i), i)]
        )
        await store.rollup()
        made = binned(await store.load_bins(first, NOW))
    finally:
        await store.close()
    assert {hour for _, _, hour in made} == {first + timedelta(hours=h) for h in range(4)}
    engine = create_async_engine(database_url)
    async with engine.begin() as conn:
        await conn.run_sync(lambda c: command.downgrade(_config(c), "0011"))
        await conn.execute(delete(WindowRow).where(WindowRow.start == first))  # retention
        await conn.run_sync(upgrade)
    await engine.dispose()
    store = await Store.open(database_url)
    try:
        assert not await store.load_bins(first, NOW)  # filled by the rollup, not before
        await store.rollup()
        filled = binned(await store.load_bins(first, NOW))
    finally:
        await store.close()
    assert sorted(filled) == sorted(k for k in made if k[2] != first)
    for key, samples in filled.items():
        assert close(tuple(samples), tuple(made[key])), key


def binned(
    found: list[tuple[str, str, datetime, LoadSample]],
) -> dict[tuple[str, str, datetime], list[LoadSample]]:
    by: dict[tuple[str, str, datetime], list[LoadSample]] = {}
    for endpoint, model, hour, sample in found:
        by.setdefault((endpoint, model, hour), []).append(sample)
    return {
        k: sorted(v, key=lambda s: (s.concurrency, s.basis or "", s.draft_tokens is None))
        for k, v in by.items()
    }


async def test_the_report_bins_the_month_window_by_window(database_url: str) -> None:
    """An endpoint whose 5-minute windows alternate 4 and 64 running requests within each
    hour: its hours' mean is 34, one point in 32-63; the report's curve is the windows',
    4-7 paying and 64-127 a tax, half the time each. An hour without bins (history rolled
    up before 0012) is still one point at its mean."""
    start = datetime(2027, 1, 10, tzinfo=UTC)
    rows = []
    for i in range(6 * 12):
        running, speedup = (4.0, 1.3) if i % 2 == 0 else (64.0, 0.7)
        rows += rows_of(
            "mixed",
            int((start + timedelta(minutes=5 * i)).timestamp()),
            seconds=300.0,
            busy_seconds=300.0,
            concurrency_requests=running,
            running_seconds=running * 300.0,
            output_tokens=round(20 * running * 300),
            verdict_basis="profile",
            plain_busy_seconds=300.0 * speedup,
            assessed_busy_seconds=300.0,
            speedup_low_ratio=speedup - 0.05,
            speedup_high_ratio=speedup + 0.05,
            verdict="pays" if speedup > 1 else "tax",
            busy_spend_usd=Decimal("0.1"),
            speculation_savings_usd=0.1 * (1 - 1 / speedup),
        ).rows
    store = await Store.open(database_url)
    try:
        await save(store, rows)
        await store.rollup()
    finally:
        await store.close()
    settings = validate(
        {
            "storage_url": database_url,
            "endpoints": [
                {"name": "mixed", "url": "http://127.0.0.1:1", "speculation": {"method": "ngram"}}
            ],
        }
    )

    async def curve_rows() -> list[tuple[str, str]]:
        report = await report_of(database_url, Month(2027, 1), settings)
        return [(r[2], r[3]) for r in load_curve_table(report).rows if r[0] == "mixed"]

    assert await curve_rows() == [("4-7", "50%"), ("64-127", "50%")]
    engine = create_async_engine(database_url)
    async with engine.begin() as conn:  # two hours as history from before 0012 holds them
        await conn.execute(delete(LoadBinRow).where(LoadBinRow.start < start + timedelta(hours=2)))
    await engine.dispose()
    assert await curve_rows() == [("4-7", "33%"), ("32-63", "33%"), ("64-127", "33%")]


async def test_the_report_counts_the_hours_a_k_schedule_stopped_drafting_as_the_daemon_does(
    database_url: str,
) -> None:
    """A vLLM endpoint on a K schedule: hours at 4 running requests draft and pay, hours at 64
    run K = 0 and draft nothing (counters at 0, no speedup: the assessment's plain window).
    Those hours are time at 64: the report's curve shows the bin with no speedup, drafted
    0 per step, and both bins' time as the daemon's curve on /metrics does."""
    start = datetime(2027, 1, 10, tzinfo=UTC)
    rows = []
    for i in range(6 * 12):
        at_four = (i // 12) % 2 == 0  # whole hours at one load
        running = 4.0 if at_four else 64.0
        output = round(20 * running * 300)
        drafted: dict[str, Any] = (
            dict(
                drafts=output / 4,
                draft_tokens=output / 2,  # steps: output - accepted = 3/4 of output; 2/3 a step
                accepted_tokens=output / 4,
                accepted_per_position=json.dumps([output / 8, output / 8]),
                verdict_basis="profile",
                plain_busy_seconds=300.0 * 1.3,
                assessed_busy_seconds=300.0,
                speedup_low_ratio=1.25,
                speedup_high_ratio=1.35,
                verdict="pays",
            )
            if at_four
            else dict(
                drafts=0.0,
                draft_tokens=0.0,
                accepted_tokens=0.0,
                accepted_per_position="[]",
                verdict_basis=None,
                plain_busy_seconds=None,
                assessed_busy_seconds=0.0,
                speedup_low_ratio=None,
                speedup_high_ratio=None,
                verdict="no_speculation",
            )
        )
        rows += rows_of(
            "scheduled",
            int((start + timedelta(minutes=5 * i)).timestamp()),
            seconds=300.0,
            busy_seconds=300.0,
            concurrency_requests=running,
            running_seconds=running * 300.0,
            output_tokens=output,
            busy_spend_usd=Decimal("0.1"),
            speculation_savings_usd=0.03 if at_four else 0.0,
            **drafted,
        ).rows
    store = await Store.open(database_url)
    try:
        await save(store, rows)
        await store.rollup()
        daemon = speculating_curves(await store.load_samples(start, ["scheduled"])).curves
    finally:
        await store.close()
    settings = validate(
        {
            "storage_url": database_url,
            "endpoints": [
                {
                    "name": "scheduled",
                    "url": "http://127.0.0.1:1",
                    "speculation": {"method": "ngram", "schedule": [[1, 31, 2], [32, 1024, 0]]},
                }
            ],
        }
    )
    report = await report_of(database_url, Month(2027, 1), settings)
    table = [r for r in load_curve_table(report).rows if r[0] == "scheduled"]
    # Running requests, time, speedup, drafted per step.
    assert [(r[2], r[3], r[4], r[7]) for r in table] == [
        ("4-7", "50%", "1.300 (profile)", "0.67"),
        ("64-127", "50%", "—", "0.00"),
    ]
    [(_, curve)] = daemon.items()
    assert [(b.label, b.time_share, b.draft_tokens_per_step) for b in curve.bins] == [
        ("4-7", 0.5, pytest.approx(2 / 3)),
        ("64-127", 0.5, 0.0),
    ]
