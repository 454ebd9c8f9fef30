"""The load curve on /metrics (issue 34): the daemon's job bins the store's windows of the
lookback (`spectax.curve_book`) and the collector exports them, bin by bin, on SQLite and
PostgreSQL, both renderings (`collect()` and the text page) alike."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from builders import monitor_of, ngram_settings, rows_of
from spectax.curve_book import CurveBook
from spectax.economics.load_curve import bin_edge, load_curve
from spectax.exposition import SnapshotCollector, StoreStatus
from spectax.store import Store, load_history

NOW = datetime(2027, 1, 15, 12, 0, tzinfo=UTC)
SPECULATION = {"method": "ngram"}
DAY = 86400.0


def window(endpoint: str, start: float, running: float, speedup: float, **more: Any):
    """A 5-minute window of `running` mean requests, each given 20 output tokens a second,
    whose assessment concluded `speedup` with a band of +-0.05 on the profile basis."""
    return rows_of(
        endpoint,
        int(start),
        seconds=300.0,
        busy_seconds=300.0,
        concurrency_requests=running,
        output_tokens=round(20 * running * 300),
        plain_busy_seconds=300.0 * speedup,
        assessed_busy_seconds=300.0,
        speedup_low_ratio=speedup - 0.05,
        speedup_high_ratio=speedup + 0.05,
        verdict_basis="profile",
        **more,
    )


@pytest.fixture
async def store(database_url: str):
    store = await Store.open(database_url)
    yield store
    await store.close()


async def test_stored_windows_at_two_loads_give_the_two_bins_gauges(store: Store) -> None:
    start = NOW.timestamp() - 6 * 3600
    writes = [
        window("x", start + 300 * i, 4.0, 1.25, speculation_savings_usd=0.5) for i in range(4)
    ]
    writes += [
        window("x", start + 300 * (4 + i), 64.0, 0.75, speculation_savings_usd=-0.25)
        for i in range(2)
    ]
    writes.append(window("x", start - DAY, 64.0, 0.1))  # before the lookback: not counted
    writes.append(window("gone", start, 4.0, 1.25))  # an endpoint no longer watched
    for write in writes:
        await store.save(write.endpoint, write.rows, None)
    (model,) = {row["model"] for row in writes[0].rows}

    # x runs a K schedule that turns speculation off from batch 48: bin 32-63 straddles it.
    schedule = [[1, 47, 3], [48, 1024, 0]]
    watched = {
        "x": monitor_of(
            ngram_settings("x", speculation=SPECULATION | {"schedule": schedule})
        ).snapshot
    }
    book = CurveBook()
    await book.refresh(store, NOW, DAY, watched)
    collector = SnapshotCollector(
        lambda: {}, lambda: StoreStatus(0, 0), load_curves=lambda: book.current
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)

    def gauge(name: str, running: int) -> float | None:
        labels = {"endpoint": "x", "model": model, "running_requests": str(running)}
        return registry.get_sample_value(name, labels)

    assert gauge("spectax_load_time_share_ratio", 4) == pytest.approx(4 / 6)
    assert gauge("spectax_load_time_share_ratio", 64) == pytest.approx(2 / 6)
    assert gauge("spectax_load_speedup_ratio", 4) == pytest.approx(1.25)
    assert gauge("spectax_load_speedup_ratio", 64) == pytest.approx(0.75)
    assert gauge("spectax_load_speculation_savings_usd", 4) == pytest.approx(2.0)
    assert gauge("spectax_load_speculation_savings_usd", 64) == pytest.approx(-0.5)
    assert gauge("spectax_load_output_tokens_per_request_second", 64) == pytest.approx(20.0)
    assert gauge("spectax_load_stalled", 4) == 0 and gauge("spectax_load_stalled", 64) == 0
    assert gauge("spectax_load_time_share_ratio", 8) is None  # no window ran at 8-15
    # Neither bin straddles batch 48, where the schedule turns K from 3 to 0.
    assert gauge("spectax_load_schedule_boundary", 4) == 0
    assert gauge("spectax_load_schedule_boundary", 64) == 0
    # The K schedule the curve implies: keep drafting where it pays, off where it is a tax,
    # and turning it off at 64 would have saved money (busy spend x (1 - 0.75) there).
    assert (gauge("spectax_load_recommended_speculative_tokens", 4) or 0) >= 1
    assert gauge("spectax_load_recommended_speculative_tokens", 64) == 0
    labels = {"endpoint": "x", "model": model}
    stake = registry.get_sample_value("spectax_load_schedule_at_stake_usd", labels)
    assert stake is not None and stake > 0
    crossover = {"endpoint": "x", "model": model}
    assert registry.get_sample_value("spectax_load_crossover_running_requests", crossover) == 64
    assert (
        registry.get_sample_value(
            "spectax_load_time_share_ratio",
            {"endpoint": "gone", "model": model, "running_requests": "4"},
        )
        is None
    )
    # The text page Prometheus reads says the same, formatted once per refresh.
    page = collector.render_text().decode()
    line = f'spectax_load_speedup_ratio{{endpoint="x",model="{model}",running_requests="64"}} 0.75'
    assert line in page.splitlines()
    first = collector.render_page().generation
    assert collector.render_page().generation == first  # unchanged curves: the same page
    await book.refresh(store, NOW, DAY, watched)
    assert collector.render_page().generation == first + 1  # new curves: a new page
    # A window at 40 requests puts a bin across batch 48; without a schedule, no such gauge.
    write = window("x", start + 300 * 6, 40.0, 1.0)
    await store.save(write.endpoint, write.rows, None)
    await book.refresh(store, NOW, DAY, watched)
    assert gauge("spectax_load_schedule_boundary", 32) == 1
    unscheduled = {"x": monitor_of(ngram_settings("x")).snapshot}
    await book.refresh(store, NOW, DAY, unscheduled)
    assert gauge("spectax_load_schedule_boundary", 32) is None


async def test_the_database_bins_a_window_where_bin_edge_puts_it(store: Store) -> None:
    """The store sums windows per bin in SQL (store/load_history.py); its edges are
    `bin_edge`'s, at the edges themselves and between them."""
    loads = (0.0, 0.4, 1.99, 2.0, 3.99, 4.0, 47.0, 64.0, 255.9, 256.0, 5000.0)
    start = NOW.timestamp() - 3600
    for i, running in enumerate(loads):
        write = window(f"e{i}", start, running, 1.1)
        await store.save(write.endpoint, write.rows, None)
    names = [f"e{i}" for i in range(len(loads))]
    found = await store.load_samples(datetime.fromtimestamp(start - 1, UTC), names)
    binned = {key[0]: [s.concurrency for s in samples] for key, samples in found.items()}
    assert binned == {f"e{i}": [running] for i, running in enumerate(loads)}
    curves = {key[0]: load_curve(samples) for key, samples in found.items()}
    assert [curves[f"e{i}"].bins[0].low for i in range(len(loads))] == [
        bin_edge(running) for running in loads
    ]


async def test_the_store_reads_the_named_endpoints_a_batch_at_a_time(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Summing a day of 2,000 endpoints in one query held SQLite's read lock for seconds,
    while the writer's commits waited: the store reads ENDPOINTS_PER_READ endpoints at a
    time, and only those the daemon watches (an endpoint removed by a reload is not read)."""
    monkeypatch.setattr(load_history, "ENDPOINTS_PER_READ", 3)
    start = NOW.timestamp() - 3600
    for i in range(8):
        write = window(f"e{i}", start, 4.0 + i, 1.1)
        await store.save(write.endpoint, write.rows, None)
    watched = [f"e{i}" for i in range(7)]  # e7 was removed
    found = await store.load_samples(datetime.fromtimestamp(start - 1, UTC), watched)
    assert sorted(key[0] for key in found) == watched
    assert [s.concurrency for s in found[("e6", next(iter(found))[1])]] == [10.0]
