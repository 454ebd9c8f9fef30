"""A restart on either side loses at most what no scrape ever saw (issue 16, finding 6).

spectax killed (kill -9, a host reboot) while its window is open, and vLLM restarted
before spectax is back: vLLM's counters are back near zero, so the next delta cannot
cover the gap. Only what spectax stored of the open window can. It stores the open
window and its cursor after every scrape, merged per endpoint while they wait.
"""

from __future__ import annotations

import asyncio
import signal
import time
from decimal import Decimal
from pathlib import Path

import pytest

from builders import monitor_of, priced_monitor, scrape_write
from e2e import Spectax, free_port, stored_windows, value, write_config
from ops_helpers import TOKENS_PER_SCRAPE, CountingVllm, Targets
from recorded_pages import page
from spectax.config import validate
from spectax.daemon import Daemon
from spectax.store import Store
from spectax.store.writer import WriteQueue


async def scrapes_after(spectax: Spectax, count: int) -> None:
    """Wait until spectax has scraped `count` more times (its last-success timestamp)."""
    m = await spectax.metrics()
    last = value(m, "spectax_last_scrape_success_timestamp_seconds", endpoint="x") or 0
    await spectax.wait_for(
        lambda m: (
            (value(m, "spectax_last_scrape_success_timestamp_seconds", endpoint="x") or 0)
            >= last + count - 0.5
        )
    )


@pytest.mark.e2e
@pytest.mark.timeout(120)
async def test_kill_9_then_a_vllm_restart_loses_no_token_a_scrape_saw(tmp_path: Path) -> None:
    vllm = CountingVllm()
    targets = Targets()
    targets.add("x", vllm.serve)
    await targets.start()
    try:
        port = free_port()
        # an hour's window: the kill and the restart both fall inside the open window
        config = write_config(tmp_path, port, [{"name": "x", "url": targets.url("x")}], window="1h")
        spectax = Spectax(config, port)
        await spectax.start()
        await spectax.wait_for(lambda m: value(m, "spectax_endpoint_up", endpoint="x") == 1)
        vllm.growing = True
        await spectax.wait_for(
            lambda m: (
                (value(m, "spectax_output_tokens_total", endpoint="x") or 0)
                >= 4 * TOKENS_PER_SCRAPE
            )
        )
        vllm.growing = False  # what the last scrape saw stays put, and spectax has seen it
        await spectax.wait_for(
            lambda m: value(m, "spectax_output_tokens_total", endpoint="x") == vllm.seen[0]
        )
        await scrapes_after(spectax, 2)  # ...and has had a writer pass since
        assert spectax.process is not None
        spectax.process.send_signal(signal.SIGKILL)
        await spectax.process.wait()

        vllm.restart()  # while spectax is down: its counters start again from zero
        vllm.growing = True
        spectax = Spectax(config, port)
        await spectax.start()
        await spectax.wait_log("engine restarted")
        await scrapes_after(spectax, 3)
        vllm.growing = False
        await scrapes_after(spectax, 2)  # the last sample holds the final counter
        assert await spectax.stop() == 0
    finally:
        await targets.stop()
    assert vllm.seen[0] >= 4 * TOKENS_PER_SCRAPE and vllm.seen[1] > 0
    _, tokens = stored_windows(tmp_path / "state", "x")
    assert tokens == sum(vllm.seen)


async def test_a_restart_from_the_open_window_counts_its_spend_once(database_url: str) -> None:
    """Restored from a partial open window, spend goes on from the stored total: the partial
    rows are neither lost nor added twice, as a run that never stopped would count."""
    names = ("spec_ngram_0_before_traffic.txt", "spec_ngram_2_mid.txt", "spec_ngram_3_after.txt")
    pages = [page(n) for n in names]
    t0 = 1_798_761_600.0 + 1.0  # just after a window boundary: every scrape below is inside it
    steady = priced_monitor()
    for i, text in enumerate(pages):
        steady.observe_page(t0 + 15.0 * i, text, 0.01)

    store = await Store.open(database_url)
    try:
        first = priced_monitor()
        for i, text in enumerate(pages[:2]):
            for w in scrape_write(first, t0 + 15.0 * i, text):
                await store.save(w.endpoint, w.rows, w.cursor)
        # killed here: the window is open, nothing closed it
        second = priced_monitor(await store.restore("x", 300.0, 10))
        for w in scrape_write(second, t0 + 30.0, pages[2]):
            await store.save(w.endpoint, w.rows, w.cursor)
        stored_spend, _ = await store.money_totals("x")
        [row] = await store.window_rows("x")
    finally:
        await store.close()
    assert steady.snapshot.spend_usd_total > 0
    assert second.snapshot.spend_usd_total == steady.snapshot.spend_usd_total == stored_spend
    assert row.output_tokens == round(steady.snapshot.tokens_total["tiny-llama"][0])


def test_an_outage_queues_one_open_window_write_per_endpoint_not_one_per_scrape(
    tmp_path: Path,
) -> None:
    pages = [page("spec_ngram_0_before_traffic.txt"), page("spec_ngram_2_mid.txt")]
    monitor = priced_monitor()
    queue = WriteQueue(tmp_path / "spool.jsonl")
    t0 = 1_798_761_600.0
    for step in range(100):  # 25 minutes of 15 s scrapes with the database away: 5 windows
        for write in scrape_write(monitor, t0 + 15.0 * step, pages[min(step, 1)]):
            queue.append(write)
    [write] = queue.peek(10_000)
    starts = sorted({row["start"] for row in write.rows})
    assert len(starts) == 5 and len(write.rows) == 5  # each window once, the open one too
    assert write.cursor is not None and write.cursor[0] == t0 + 15.0 * 99
    assert queue.pending_rows == 5


@pytest.mark.e2e  # a daemon and its target on loopback, scraping every second
@pytest.mark.timeout(60)
async def test_a_spool_left_at_start_up_is_resumed_from_not_counted_again(
    tmp_path: Path, database_url: str
) -> None:
    """The start-up drain cannot finish (0 s here, 10 s in production): the monitor is restored
    while the last run's writes still wait in the spool, later than the store's cursor. It
    must resume from them: once all is written, the store holds what the target counted."""
    vllm = CountingVllm()
    targets = Targets()
    targets.add("x", vllm.serve)
    await targets.start()
    state = tmp_path / "state"
    endpoint = {"name": "x", "url": targets.url("x"), "gpu": "H100 SXM"}
    settings = validate(
        {
            "listen": f"127.0.0.1:{free_port()}",
            "scrape_interval": "1s",
            "scrape_timeout": "1s",
            "window": "1m",
            "storage_url": database_url,
            "state_directory": str(state),
            "endpoints": [{**endpoint, "price": {"usd_per_hour": 3.99}}],
        }
    )
    # The last run: 10 scrapes 15 s apart over three windows; the store took the first 3, the
    # rest waited for it in memory and went to the spool at the stop (WriteQueue.spill_all).
    first = monitor_of(settings, 60.0)
    t0 = time.time() - 150.0
    store = await Store.open(database_url)
    queue = WriteQueue(state / "spool.jsonl")
    try:
        for i in range(10):
            for w in scrape_write(first, t0 + 15.0 * i, vllm.next_page()):
                if i < 3:
                    await store.save(w.endpoint, w.rows, w.cursor)
                else:
                    queue.append(w)
            queue.spill_all()
            vllm.growing = True
    finally:
        await store.close()
    assert queue.pending_rows > 0

    daemon = Daemon(settings, startup_drain_seconds=0.0)
    try:
        await daemon.start()
        await served(targets, 3)
        vllm.growing = False
        await served(targets, 5)  # the last sample holds the final counter
    finally:
        await daemon.stop()
        await targets.stop()
    exported = daemon.monitors["x"].snapshot.spend_usd_total
    assert not daemon.writer.queue and not (state / "spool.jsonl").exists()

    store = await Store.open(database_url)
    try:
        rows = await store.window_rows("x")
        spend, _ = await store.money_totals("x")
        cursor = await store.cursor("x")
    finally:
        await store.close()
    assert cursor is not None
    assert vllm.seen[0] >= 12 * TOKENS_PER_SCRAPE
    assert sum(row.output_tokens for row in rows) == vllm.seen[0]
    assert spend == exported  # what /metrics says is what the store holds
    # provisioned: every second from the first scrape to the last, once
    assert abs(spend - Decimal("3.99") * Decimal(repr(cursor[0] - t0)) / 3600) < Decimal("1e-6")


async def served(targets: Targets, count: int) -> None:
    """Wait until target x has served `count` pages."""
    while targets.requests.get("x", 0) < count:  # noqa: ASYNC110 (no event for it)
        await asyncio.sleep(0.05)


async def test_restore_overlays_the_queued_writes_on_the_store(
    tmp_path: Path, database_url: str
) -> None:
    """Store.restore with the writes still queued (some spooled, some in memory) resumes as a
    run that never stopped: the same spend, to the nano-dollar, and the same tokens."""
    vllm = CountingVllm()
    vllm.growing = True
    t0 = 1_798_761_600.0 + 1.0
    timeline = [(t0 + 15.0 * i, vllm.next_page()) for i in range(50)]  # 3 windows and a bit
    steady = priced_monitor()
    for t, text in timeline:
        steady.observe_page(t, text, 0.01)

    store = await Store.open(database_url)
    try:
        first = priced_monitor()
        queue = WriteQueue(tmp_path / "spool.jsonl")
        for i, (t, text) in enumerate(timeline[:40]):
            for w in scrape_write(first, t, text):
                if i < 5:
                    await store.save(w.endpoint, w.rows, w.cursor)
                else:
                    queue.append(w)
            if i == 30:
                queue.spill_all()  # the older ones on disk, the newer in memory
        restored = await store.restore("x", 300.0, 10, list(queue.pending("x")))
        second = priced_monitor(restored)
        while batch := queue.peek(100):  # then the queue drains, behind the new monitor
            await store.save_many([(w.endpoint, w.rows, w.cursor) for w in batch])
            queue.pop(batch)
        for t, text in timeline[40:]:
            for w in scrape_write(second, t, text):
                await store.save(w.endpoint, w.rows, w.cursor)
        stored_spend, _ = await store.money_totals("x")
        rows = await store.window_rows("x")
    finally:
        await store.close()
    # its closed window speculated: nothing of it for the calibration
    assert restored.recent_windows == () and restored.open_window is not None
    assert second.snapshot.spend_usd_total == steady.snapshot.spend_usd_total == stored_spend
    assert sum(row.output_tokens for row in rows) == 49 * TOKENS_PER_SCRAPE  # the 1st: baseline
