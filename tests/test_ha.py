"""An HA pair: two `spectax run` on one PostgreSQL, exactly one writing (issue 19, item 3).

Both processes scrape and serve /metrics; the leader holds a session
advisory lock (spectax.store.leader) and alone writes. Killed with -9, its
lock goes with its session; the follower takes over within a window,
resumes from what the leader stored, and the store ends with every window
once and every token the counter showed, once. SQLite stays one process.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from builders import priced_monitor, scrape_write
from e2e import Spectax, free_port, value, wait_until, write_config
from ops_helpers import TOKENS_PER_SCRAPE, CountingVllm, Targets
from recorded_pages import page
from spectax.store import Store
from spectax.store.leader import LOCK_KEY, POLL_SECONDS, NotLeader
from spectax.store.writer import StoreWriter

WINDOW = 6.0  # seconds; scrapes every second (e2e.write_config)
log = logging.getLogger(__name__)


def leader(m: dict[Any, float]) -> float | None:
    return value(m, "spectax_leader")


def spend(m: dict[Any, float]) -> float:
    return value(m, "spectax_spend_usd_total", endpoint="x", basis="estimated") or 0.0


def scrapes(m: dict[Any, float]) -> float:
    return value(m, "spectax_last_scrape_success_timestamp_seconds", endpoint="x") or 0.0


async def scraped_past(spectax: Spectax, moment: float) -> None:
    """Wait until `spectax` has scraped endpoint x after the wall-clock `moment`."""
    await spectax.wait_for(lambda m: scrapes(m) > moment)


async def stored(url: str) -> list[Any]:
    store = await Store.open(url)
    try:
        return await store.window_rows("x")
    finally:
        await store.close()


@pytest.mark.e2e
@pytest.mark.timeout(180)
async def test_kill_9_of_the_leader_the_follower_takes_over_and_stores_each_window_once(
    tmp_path: Path, pg_server: Any
) -> None:
    url = pg_server.database()
    vllm = CountingVllm()  # its counter grows at every page served, to either process
    targets = Targets()
    targets.add("x", vllm.serve)
    await targets.start()
    first, second = pair = spectax_pair(tmp_path, targets.url("x"), url)
    try:
        await start_pair(first, second)
        vllm.growing = True
        # The leader has closed a window of traffic and is inside the next one.
        await wait_until(lambda: two_windows_stored(url), 3 * WINDOW, "two windows stored", pair)
        m = await second.metrics()
        assert leader(m) == 0, "the follower claims to write"
        assert value(m, "spectax_store_pending_windows") == 0, "the follower queues writes"
        spend_before = spend(m)
        assert spend_before > 0
        await wait_until(lambda: 0.3 < (time.time() % WINDOW) / WINDOW < 0.6, WINDOW, "mid-window")
        assert first.process is not None
        first.process.send_signal(signal.SIGKILL)
        await first.process.wait()
        killed_at, killed = time.monotonic(), time.time()

        await second.wait_for(lambda m: leader(m) == 1, timeout=2 * WINDOW)
        took_over = time.monotonic() - killed_at
        await second.wait_log("store: leading")
        # a counter that steps back reads as a reset: rate() would see a jump of the total
        assert spend(await second.metrics()) >= spend_before
        # the window the leader was writing closes under the new leader, and one more
        await scraped_past(second, (killed // WINDOW + 2) * WINDOW + 0.5)
        vllm.growing = False  # what the last scrape saw stays put
        await scraped_past(second, time.time() + 1.0)
        assert await second.stop() == 0
    finally:
        await first.kill()
        await second.kill()
        await targets.stop()

    assert took_over < WINDOW, f"the follower took {took_over:.1f} s to take over"
    rows = await stored(url)
    starts = [row.start.timestamp() for row in rows]
    assert min(starts) < killed - WINDOW and max(starts) > killed + WINDOW
    # every token the counter showed, once: nothing lost at the kill, nothing counted twice
    assert vllm.seen[0] > 6 * TOKENS_PER_SCRAPE
    assert_every_window_once(rows, vllm.seen[0])


async def two_windows_stored(url: str) -> bool:
    rows = await stored(url)
    return len(rows) >= 2 and any(row.output_tokens for row in rows)


def spectax_pair(directory: Path, target: str, url: str) -> list[Spectax]:
    """Two spectax processes on endpoint x and the database `url`, each with its state."""
    pair = []
    for name in ("a", "b"):
        (directory / name).mkdir()
        port = free_port()
        endpoints = [{"name": "x", "url": target, "price": {"usd_per_hour": 3.99}}]
        config = write_config(
            directory / name, port, endpoints, window=f"{WINDOW:g}s", storage_url=url
        )
        pair.append(Spectax(config, port))
    return pair


async def start_pair(first: Spectax, second: Spectax) -> None:
    """`first` leads, `second` follows, both scraping."""
    await first.start()
    await first.wait_for(lambda m: leader(m) == 1 and scrapes(m) > 0)
    await second.start()
    await second.wait_for(lambda m: scrapes(m) > 0)
    await second.wait_log("store: following")


def assert_every_window_once(rows: list[Any], tokens: int) -> None:
    """Consecutive windows, none twice, holding `tokens` output tokens in all."""
    starts = sorted(row.start.timestamp() for row in rows)
    assert len(starts) == len(set(starts)), "a window stored twice"
    assert [b - a for a, b in itertools.pairwise(starts)] == [WINDOW] * (len(starts) - 1)
    assert sum(row.output_tokens for row in rows) == tokens


@pytest.mark.e2e
@pytest.mark.timeout(180)
async def test_a_database_restart_under_the_pair_loses_nothing_and_counts_nothing_twice(
    tmp_path: Path,
) -> None:
    """Both lose the lock with the database; the leader keeps its windows queued (spooled)
    meanwhile. When the database is back, one process leads: the old leader writes its
    queue if it wins, or drops it for the other's resumption from the store if it loses."""
    from pg import Cluster

    cluster = Cluster()
    vllm = CountingVllm()
    targets = Targets()
    targets.add("x", vllm.serve)
    await targets.start()
    url = cluster.create_database()
    first, second = pair = spectax_pair(tmp_path, targets.url("x"), url)
    try:
        await start_pair(first, second)
        vllm.growing = True
        await wait_until(lambda: two_windows_stored(url), 3 * WINDOW, "two windows stored", pair)
        cluster.stop()
        await first.wait_log("writes wait")  # the leader: suspended, not following
        m = await first.wait_for(lambda m: (value(m, "spectax_store_pending_windows") or 0) > 0)
        assert leader(m) == 0
        await asyncio.sleep(WINDOW)  # a window closes during the outage
        cluster.start()
        await wait_until(
            lambda: one_leader(pair), 6 * POLL_SECONDS + WINDOW, "one leader again", pair
        )
        await scraped_past(second, time.time() + WINDOW)  # the new leader closes a window
        vllm.growing = False
        await scraped_past(first, time.time() + 1.0)
        await scraped_past(second, time.time() + 1.0)
        assert await first.stop() == 0 and await second.stop() == 0
        rows = await stored(url)
    finally:
        await first.kill()
        await second.kill()
        await targets.stop()
        cluster.destroy()
    assert "store: leading" in first.log + second.log
    assert vllm.seen[0] > 6 * TOKENS_PER_SCRAPE
    assert_every_window_once(rows, vllm.seen[0])


@pytest.mark.e2e
@pytest.mark.timeout(180)
async def test_the_leaders_session_ended_by_the_server_leaves_one_writer_and_nothing_twice(
    tmp_path: Path, pg_server: Any
) -> None:
    """The server ends the leader's lock session (pg_terminate_backend; an administrator,
    idle_session_timeout, a proxy) while the database stays up and its other connections
    keep working: it must stop writing at its next batch, and whichever process holds the
    lock next writes, from where the store is."""
    url = pg_server.database()
    vllm = CountingVllm()
    targets = Targets()
    targets.add("x", vllm.serve)
    await targets.start()
    first, second = pair = spectax_pair(tmp_path, targets.url("x"), url)
    try:
        await start_pair(first, second)
        vllm.growing = True
        await wait_until(lambda: two_windows_stored(url), 3 * WINDOW, "two windows stored", pair)
        assert await end_the_lock_session(url) == 1
        await first.wait_log("lost the leader's lock")
        await wait_until(
            lambda: one_leader(pair), 3 * POLL_SECONDS + WINDOW, "one leader again", pair
        )
        await scraped_past(first, time.time() + WINDOW)  # a window closes under that leader
        vllm.growing = False
        await scraped_past(first, time.time() + 1.0)
        await scraped_past(second, time.time() + 1.0)
        assert await first.stop() == 0 and await second.stop() == 0
    finally:
        await first.kill()
        await second.kill()
        await targets.stop()
    assert vllm.seen[0] > 6 * TOKENS_PER_SCRAPE
    assert_every_window_once(await stored(url), vllm.seen[0])


async def test_a_write_already_past_the_check_is_refused_once_the_lock_session_ends(
    pg_server: Any, tmp_path: Path
) -> None:
    """The fence inside each write's transaction: the lock session ended (here by the
    server) between the writer's check and its write, the write is refused, not stored."""
    url = pg_server.database()
    monitor = priced_monitor()
    writes = scrape_write(monitor, 1_798_761_601.0, page("spec_ngram_0_before_traffic.txt"))
    writer = StoreWriter(
        lambda: Store.open(url), tmp_path / "spool.jsonl", 100, asyncio.Event(), log
    )
    store = await writer.connect()
    assert store is not None and writer.leading
    try:
        await store.save_many([(w.endpoint, w.rows, w.cursor) for w in writes])  # leading: taken
        assert await store.cursor_times() != {}
        assert await end_the_lock_session(url) == 1
        with pytest.raises(NotLeader):
            await store.save_many(
                [(w.endpoint, [], (w.cursor[0] + 1, w.cursor[1])) for w in writes if w.cursor]
            )
        assert (await store.cursor_times())["x"] == writes[-1].cursor[0]
    finally:
        await writer.close()


async def end_the_lock_session(url: str) -> int:
    """Terminate the session holding spectax's advisory lock; how many were ended, once the
    lock is free (pg_terminate_backend only signals the backend: on a loaded machine it held
    the lock a moment longer, and the write after it was not yet refused)."""
    held = (
        "FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = :high"
        " AND objid = :low AND database = (SELECT oid FROM pg_database"
        " WHERE datname = current_database())"
    )
    key = {"high": LOCK_KEY >> 32, "low": LOCK_KEY & 0xFFFFFFFF}
    engine = create_async_engine(url)
    try:
        async with engine.connect() as connection:
            ended = await connection.execute(
                text(f"SELECT pg_terminate_backend(pid) {held}"),
                key,
            )
            count = sum(1 for (done,) in ended if done)
            for _ in range(200):
                if not (await connection.execute(text(f"SELECT count(*) {held}"), key)).scalar():
                    break
                await asyncio.sleep(0.05)
            return count
    finally:
        await engine.dispose()


async def one_leader(pair: list[Spectax]) -> bool:
    leaders = [leader(await spectax.metrics()) for spectax in pair]
    return sorted(leaders) == [0, 1]


@pytest.mark.e2e  # waits out the follower's lock polls (POLL_SECONDS), seconds of wall time
async def test_the_follower_writes_nothing_and_takes_over_when_the_leader_lets_go(
    pg_server: Any, tmp_path: Path
) -> None:
    """Two writers on one database (in one process here): the second follows, its writes
    are dropped and rollups skipped, until the first closes; then it resumes (take_over)
    and writes."""
    url = pg_server.database()
    monitor = priced_monitor()
    t0 = 1_798_761_600.0 + 1.0
    writes = scrape_write(monitor, t0, page("spec_ngram_0_before_traffic.txt"))
    writes += scrape_write(monitor, t0 + 15.0, page("spec_ngram_2_mid.txt"))
    writers = []
    for name in ("a", "b"):
        writer = StoreWriter(
            lambda: Store.open(url), tmp_path / name / "spool.jsonl", 100, asyncio.Event(), log
        )
        assert await writer.connect() is not None
        writers.append(writer)
    first, second = writers
    took_over = asyncio.Event()

    async def take_over() -> None:
        took_over.set()

    first.start()
    second.start(take_over)
    try:
        assert first.leading and not second.leading
        for write in writes:
            second.enqueue_rows(write)
        assert not second.queue
        await second.maintain(time.time(), {"window": None, "hour": None, "day": None})
        assert await stored(url) == []

        await first.stop([], 5.0)
        await first.close()  # the session ends, the lock with it
        await asyncio.wait_for(took_over.wait(), 3 * POLL_SECONDS)
        assert second.leading
        for write in writes:
            second.enqueue_rows(write)
        await second.settle(10.0)
        [row] = await stored(url)
        assert row.output_tokens == round(monitor.snapshot.tokens_total["tiny-llama"][0]) > 0
    finally:
        await second.stop([], 5.0)
        await second.close()


@pytest.mark.e2e
@pytest.mark.timeout(60)
async def test_a_second_spectax_on_the_same_sqlite_file_is_refused_naming_the_first(
    tmp_path: Path,
) -> None:
    targets = Targets()
    targets.add("x", CountingVllm().serve)
    await targets.start()
    endpoints = [{"name": "x", "url": targets.url("x")}]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    port_a, port_b = free_port(), free_port()
    first = Spectax(write_config(tmp_path / "a", port_a, endpoints), port_a)
    database = tmp_path / "a" / "state" / "spectax.sqlite"
    second = Spectax(
        write_config(tmp_path / "b", port_b, endpoints, storage_url=f"sqlite:///{database}"),
        port_b,
    )
    try:
        await first.start()
        await first.wait_for(lambda m: leader(m) == 1 and scrapes(m) > 0)
        await second.start()
        assert second.process is not None and first.process is not None
        assert await asyncio.wait_for(second.process.wait(), 30) == 1
        assert f"another spectax process (pid {first.process.pid}) is running on" in second.log
        assert "PostgreSQL" in second.log
        first.check_alive()
        m = await first.metrics()
        assert leader(m) == 1 and value(m, "spectax_store_up") == 1
    finally:
        await first.stop()
        await second.kill()
        await targets.stop()


@pytest.mark.e2e
@pytest.mark.timeout(60)
async def test_a_process_waiting_for_its_database_does_not_claim_to_lead(tmp_path: Path) -> None:
    """/metrics is served before the store connects: while PostgreSQL cannot be reached,
    spectax_leader is 0 (it read 1 from the start, so SpectaxNoLeader never fired)."""
    vllm = CountingVllm()
    targets = Targets()
    targets.add("x", vllm.serve)
    await targets.start()
    nowhere = f"postgresql+asyncpg://spectax@127.0.0.1:{free_port()}/spectax"  # nothing listens
    port = free_port()
    endpoints = [{"name": "x", "url": targets.url("x"), "price": {"usd_per_hour": 3.99}}]
    config = write_config(tmp_path, port, endpoints, window=f"{WINDOW:g}s", storage_url=nowhere)
    spectax = Spectax(config, port)
    try:
        await spectax.start()
        await spectax.wait_log("retrying until it answers")
        for _ in range(3):
            m = await spectax.wait_for(lambda m: leader(m) is not None)
            assert leader(m) == 0, "leads without its database"
            await asyncio.sleep(POLL_SECONDS)
    finally:
        await spectax.kill()
        await targets.stop()
