"""A restart that nobody saw (issue 30, item 10).

vLLM restarted while spectax was not running: the old process's traffic after the last
scrape spectax stored is lost, and no scrape could have shown it. spectax counts that span
(from the stored cursor's time to the new process's start) per endpoint, in
spectax_unobserved_seconds_total, the windows' unobserved_seconds (export, rollups, the
report) and one log line, and says the new process's age at first sight for what it is,
not as a cold start's length.

The pages are the recorded vLLM restart pair (fixtures/vllm-0.32.0/INDEX.txt): the old
process's spec_ngram_3_after.txt and the new one's spec_ngram_restart_*, whose
process_start_time_seconds are 161.7 s apart.
"""

from __future__ import annotations

import asyncio
import csv
import io
import logging
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Connection, inspect
from sqlalchemy import text as sql
from sqlalchemy.ext.asyncio import create_async_engine

from builders import monitor_of, priced_monitor, queued, scrape_write
from e2e import free_port
from ops_helpers import Targets
from recorded_pages import page
from report_history import report_of
from spectax.cli.export import export
from spectax.config import Settings, validate
from spectax.daemon import Daemon
from spectax.report.period import Month
from spectax.report.render import render
from spectax.store import Store
from spectax.store.schema import upgrade

NEW_START = 1795996098.57  # process_start_time_seconds of spec_ngram_restart_*.txt
OLD_START = 1795995936.87  # ... of spec_ngram_2_mid.txt and spec_ngram_3_after.txt
UNSEEN = 41.2  # the stored cursor: this long before the new process started


def restart_line(messages: Iterator[str]) -> str:
    [line] = [m for m in messages if "engine restarted" in m]
    return line


async def store_old_process(url: str, settings: Settings) -> None:
    """The last run: two scrapes of the old process, written as the daemon writes them
    (the open window and its cursor after each scrape); then spectax stopped."""
    old = monitor_of(settings, 60.0)
    store = await Store.open(url)
    try:
        last = NEW_START - UNSEEN
        assert last > OLD_START
        for t, name in ((last - 30.0, "spec_ngram_2_mid.txt"), (last, "spec_ngram_3_after.txt")):
            for w in scrape_write(old, t, page(name)):
                await store.save(w.endpoint, w.rows, w.cursor)
        cursor = await store.cursor("x")
    finally:
        await store.close()
    assert cursor is not None and cursor[0] == last


async def metric(port: int, name: str) -> float | None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        text = await response.text()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("endpoint") == "x":
                return float(sample.value)
    return None


def daemon_settings(url: str, state: Path, target: str, port: int) -> Settings:
    return validate(
        {
            "listen": f"127.0.0.1:{port}",
            "scrape_interval": "1s",
            "scrape_timeout": "1s",
            "window": "1m",
            "storage_url": url,
            "state_directory": str(state),
            "endpoints": [{"name": "x", "url": target, "price": {"usd_per_hour": 3.99}}],
        }
    )


@pytest.mark.e2e  # a daemon and its target on loopback, scraping every second
@pytest.mark.timeout(90)
async def test_a_restart_while_spectax_was_down_is_counted_as_unobserved(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    targets = Targets()
    targets.add_pages("x", ("spec_ngram_restart_2_mid.txt", "spec_ngram_restart_3_after.txt"))
    await targets.start()
    port = free_port()
    settings = daemon_settings(database_url, tmp_path / "state", targets.url("x"), port)
    await store_old_process(database_url, settings)
    daemon = Daemon(settings)
    caplog.set_level(logging.INFO, logger="spectax.monitor")
    try:
        await daemon.start()
        first_sight = time.time()
        while targets.requests.get("x", 0) < 3:  # noqa: ASYNC110 (no event for it)
            await asyncio.sleep(0.05)
        shown = await metric(port, "spectax_unobserved_seconds_total")
    finally:
        await daemon.stop()
        await targets.stop()

    assert shown == pytest.approx(UNSEEN, abs=1e-6)
    line = restart_line(r.getMessage() for r in caplog.records)
    assert "engine restarted while spectax was not running: 41.2 s unobserved" in line, line
    age = float(re.search(r"the new process was ([\d.]+) s old at first sight", line)[1])  # type: ignore[index]
    assert age == pytest.approx(first_sight - NEW_START, abs=5.0)  # days old, not a load time
    assert "cold start" not in line

    windows = list(csv.DictReader(io.StringIO(await export(settings, "window", None, None, "csv"))))
    unobserved = [float(w["unobserved_seconds"]) for w in windows if w["endpoint"] == "x"]
    assert len(unobserved) >= 2 and unobserved[0] == 0.0  # the old process's window: all seen
    assert sum(unobserved) == pytest.approx(UNSEEN, abs=1e-6)
    days = list(csv.DictReader(io.StringIO(await export(settings, "day", None, None, "csv"))))
    assert sum(float(d["unobserved_seconds"]) for d in days) == pytest.approx(UNSEEN, abs=1e-6)

    now = datetime.fromtimestamp(first_sight, UTC)
    report = await report_of(database_url, Month(now.year, now.month), settings)
    [x] = report.endpoints
    assert x.month.unobserved_seconds == pytest.approx(UNSEEN, abs=1e-6)
    assert x.month.cold_starts == 1
    text = render(report, "md")
    assert "| x | 1 (41 s unobserved) |" in text
    assert "Unobserved: across restarts" in text
    [day] = [r for r in csv.DictReader(io.StringIO(render(report, "csv"))) if r["endpoint"] == "x"]
    assert float(day["unobserved_seconds"]) == pytest.approx(UNSEEN, abs=1e-6)


def test_a_restart_between_two_scrapes_names_the_span_and_the_age_not_a_cold_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    monitor = priced_monitor()
    caplog.set_level(logging.INFO, logger="spectax.monitor")
    monitor.observe_page(NEW_START - 10.0, page("spec_ngram_3_after.txt"), 0.01)
    monitor.observe_page(NEW_START + 5.0, page("spec_ngram_restart_2_mid.txt"), 0.01)
    line = restart_line(r.getMessage() for r in caplog.records)
    assert "between two scrapes: 10.0 s unobserved" in line, line
    assert "the new process was 5.0 s old at first sight" in line
    assert monitor.snapshot.unobserved_seconds_total == pytest.approx(10.0)
    open_window = queued(monitor.flush())
    assert open_window is not None
    assert [row["unobserved_seconds"] for row in open_window.rows] == [pytest.approx(10.0)]


def test_a_restart_without_a_start_in_the_gap_counts_the_whole_gap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Counters went down under the same process start (as a data-parallel page, without
    process metrics, shows every restart): nothing bounds the span better than the gap."""
    monitor = priced_monitor()
    caplog.set_level(logging.INFO, logger="spectax.monitor")
    t = OLD_START + 600.0
    monitor.observe_page(t, page("spec_ngram_3_after.txt"), 0.01)
    monitor.observe_page(t + 15.0, page("spec_ngram_2_mid.txt"), 0.01)
    line = restart_line(r.getMessage() for r in caplog.records)
    assert "15.0 s unobserved" in line and "the whole gap counts" in line, line
    assert monitor.snapshot.unobserved_seconds_total == pytest.approx(15.0)


async def test_migration_0011_adds_the_column_and_rows_before_it_read_as_none_seen(
    database_url: str,
) -> None:
    """Rows written before 0011 hold NULL ("not recorded"): restored, rolled up and
    reported, they add no unobserved time and break nothing."""
    engine = create_async_engine(database_url)
    async with engine.begin() as conn:
        await conn.run_sync(upgrade, "0010")
        assert "unobserved_seconds" not in await conn.run_sync(columns_of, "windows")
        await conn.run_sync(upgrade)
        for table in ("windows", "rollup_hourly", "rollup_daily"):
            assert "unobserved_seconds" in await conn.run_sync(columns_of, table)
    await engine.dispose()

    monitor = priced_monitor()
    t0 = 1_798_761_600.0 + 1.0
    store = await Store.open(database_url)
    try:
        for i, name in enumerate(("spec_ngram_2_mid.txt", "spec_ngram_3_after.txt")):
            for w in scrape_write(monitor, t0 + 15.0 * i, page(name)):
                await store.save(w.endpoint, w.rows, w.cursor)
    finally:
        await store.close()
    engine = create_async_engine(database_url)
    async with engine.begin() as conn:  # as a row written before 0011 holds it
        await conn.execute(sql("UPDATE windows SET unobserved_seconds = NULL"))
    await engine.dispose()
    store = await Store.open(database_url)
    try:
        restored = await store.restore("x", 300.0, 10)
        await store.rollup()
        [daily] = await store.rows("day")
    finally:
        await store.close()
    assert restored.open_window is not None and restored.open_window.unobserved_seconds == 0.0
    assert daily.unobserved_seconds is None
    settings = validate(
        {"storage_url": database_url, "endpoints": [{"name": "x", "url": "http://127.0.0.1:1"}]}
    )
    report = await report_of(database_url, Month(2027, 1), settings)
    [x] = report.endpoints
    assert x.month.unobserved_seconds == 0.0
    assert "| x | 0 |" in render(report, "md") and "Unobserved:" not in render(report, "md")


def columns_of(conn: Connection, table: str) -> set[str]:
    return {c["name"] for c in inspect(conn).get_columns(table)}
