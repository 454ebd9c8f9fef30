"""Faults: a database outage and kill -9, against the real daemon. Nothing lost, nothing twice.

The simulated servers start frozen (speed 0: every counter at zero), so the
daemon's first scrape is the true baseline; traffic then runs fast, and is
frozen again before the daemon stops. The history must then hold exactly
the simulators' own counter totals.
"""

from __future__ import annotations

import asyncio
import random
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from e2e import Spectax, free_port, value, wait_until, write_config
from spectax.engines import get_parser
from spectax.simulate import DEMO_PROFILES, start_simulated_servers
from spectax.simulate.demo_fleet import demo_endpoints
from spectax.store import Store

pytestmark = pytest.mark.e2e
NAMES = list(DEMO_PROFILES)


async def stored_totals(url: str) -> dict[str, tuple[int, int]]:
    """(output tokens, accepted tokens) per endpoint, summed over every stored window."""
    store = await Store.open(url)
    try:
        rows = await store.rows("window")
    finally:
        await store.close()
    totals: dict[str, tuple[int, int]] = {}
    for row in rows:
        out, acc = totals.get(row.endpoint, (0, 0))
        totals[row.endpoint] = (out + row.output_tokens, acc + (row.accepted_tokens or 0))
    return totals


def source_totals(fleet: Any) -> dict[str, tuple[int, int]]:
    """(output tokens, accepted tokens) per endpoint as its engine's page says them (SGLang
    derives its accepted tokens, TGI counts tokens per finished request), since its start."""
    totals = {}
    for name, sim in fleet.sims.items():
        sample = get_parser(sim.profile.serving_engine)(sim.render())
        (model,) = sample.models.values()
        totals[name] = (round(model.generation_tokens), round(model.accepted_tokens or 0))
    return totals


async def freeze_and_stop(fleet: Any, spectax: Spectax) -> None:
    fleet.speed = 0.0
    # two scrapes after the freeze, so the last sample holds the final counters
    seen = await spectax.metrics()
    stamps = {
        n: value(seen, "spectax_last_scrape_success_timestamp_seconds", endpoint=n) for n in NAMES
    }
    await spectax.wait_for(
        lambda m: all(
            (value(m, "spectax_last_scrape_success_timestamp_seconds", endpoint=n) or 0)
            > (stamps[n] or 0) + 1.5
            for n in NAMES
        )
    )
    code = await spectax.stop()
    assert code == 0, f"spectax did not stop cleanly ({code}); log:\n{spectax.log_tail(6000)}"


def config_for(tmp_path: Path, port: int, fleet: Any, url: str, **extra: Any) -> Path:
    return write_config(
        tmp_path,
        port,
        demo_endpoints(dict(fleet.urls), DEMO_PROFILES),
        window="4s",
        storage_url=url,
        rollup_interval="2s",
        **extra,
    )


@pytest.mark.timeout(180)
async def test_database_outage_loses_nothing(tmp_path) -> None:
    from pg import Cluster

    cluster = Cluster()
    try:
        url = cluster.create_database()
        async with await start_simulated_servers(DEMO_PROFILES, speed=0.0) as fleet:
            port = free_port()
            # a small in-memory bound, so the outage also spills to the spool file
            config = config_for(tmp_path, port, fleet, url, store_queue_max_rows=4)
            spectax = Spectax(config, port)
            await spectax.start()
            await spectax.wait_for(
                lambda m: all(value(m, "spectax_endpoint_up", endpoint=n) == 1 for n in NAMES)
            )
            fleet.speed = 4.0
            # Real traffic before the outage (with the mixed fleet's seven endpoints the
            # closed windows fill memory, and so end the outage, sooner than with three).
            await spectax.wait_for(
                lambda m: (
                    (value(m, "spectax_output_tokens_total", endpoint="chat-creative") or 0)
                    > 10_000
                )
            )
            cluster.stop()
            m = await spectax.wait_for(lambda m: value(m, "spectax_store_up") == 0)
            spool = tmp_path / "state" / "spool.jsonl"
            # The outage lasts until more closed windows wait than memory holds: they spill.
            # (Each endpoint's open window waits too, as one row: hence the len(NAMES).)
            m = await spectax.wait_for(
                lambda m: (
                    value(m, "spectax_store_pending_windows") > 4 + len(NAMES) and spool.exists()
                )
            )
            assert value(m, "spectax_store_pending_windows") > 4 + len(NAMES)
            assert value(m, "spectax_store_write_errors_total") >= 1
            assert (tmp_path / "state" / "spool.jsonl").exists()
            cluster.start()
            await spectax.wait_for(
                lambda m: (
                    value(m, "spectax_store_pending_windows") == 0
                    and value(m, "spectax_store_up") == 1
                ),
                timeout=60,
            )
            assert not (tmp_path / "state" / "spool.jsonl").exists()
            await freeze_and_stop(fleet, spectax)
            expected = source_totals(fleet)
        assert expected["chat-creative"][0] > 10_000  # real traffic went through
        assert await stored_totals(url) == expected
        log = spectax.log
        assert log.count("retrying") == 1 and "writing again" in log  # once down, once back
    finally:
        cluster.destroy()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_kill_9_loses_nothing_and_counts_nothing_twice(tmp_path, backend, request) -> None:
    if backend == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path}/history.sqlite"
    else:
        url = request.getfixturevalue("pg_server").database()
    rng = random.Random(5)
    async with await start_simulated_servers(DEMO_PROFILES, speed=0.0) as fleet:
        port = free_port()
        config = config_for(tmp_path, port, fleet, url)
        spectax = Spectax(config, port)
        await spectax.start()
        await spectax.wait_for(
            lambda m: all(value(m, "spectax_endpoint_up", endpoint=n) == 1 for n in NAMES)
        )
        fleet.speed = 4.0
        for _ in range(3):
            await asyncio.sleep(rng.uniform(3.0, 6.0))
            assert spectax.process is not None
            spectax.process.send_signal(signal.SIGKILL)
            await spectax.process.wait()
            await asyncio.sleep(rng.uniform(0.0, 2.0))  # traffic goes on while spectax is dead
            spectax = Spectax(config, port)
            await spectax.start()
            await spectax.wait_for(
                lambda m: all(value(m, "spectax_endpoint_up", endpoint=n) == 1 for n in NAMES)
            )
        await asyncio.sleep(3)
        await freeze_and_stop(fleet, spectax)
        expected = source_totals(fleet)
    assert await stored_totals(url) == expected
    if backend == "sqlite":  # the export command reads the same numbers
        path = url.split(":///", 1)[1]
        with sqlite3.connect(path) as db:
            [(total,)] = db.execute(
                "SELECT SUM(output_tokens) FROM windows WHERE endpoint = 'code-assistant'"
            ).fetchall()
        assert total == expected["code-assistant"][0]


@pytest.mark.timeout(120)
async def test_a_spool_the_database_refuses_does_not_keep_spectax_from_scraping(
    tmp_path, request
) -> None:
    """PostgreSQL refuses a model name over 256 characters: the spooled row is quarantined,
    the rest of the spool written, and spectax gets ready and scrapes (it used to wait for
    the spool to drain, answering 503 "spectax is starting" forever)."""
    from builders import rows_of
    from spectax.store.writer import WriteQueue

    # An hour back, inside retention: the config's 2-s rollups apply it, and a window from
    # 1970 was deleted before it was read whenever one ran first (seven endpoints start
    # slower than three did).
    start = (int(time.time()) // 3600 - 1) * 3600

    url = request.getfixturevalue("pg_server").database()
    state = tmp_path / "state"
    spool = WriteQueue(state / "spool.jsonl", max_rows=1)
    spool.append(rows_of("code-assistant", start, model="m" * 300))
    spool.append(rows_of("chat-creative", start))
    spool.spill_all()
    async with await start_simulated_servers(DEMO_PROFILES, speed=0.0) as fleet:
        port = free_port()
        spectax = Spectax(config_for(tmp_path, port, fleet, url), port)
        await spectax.start()
        try:
            m = await spectax.wait_for(
                lambda m: all(value(m, "spectax_endpoint_up", endpoint=n) == 1 for n in NAMES)
            )
            assert await spectax.get("/-/ready") == (200, "spectax is ready.\n")
            m = await spectax.wait_for(lambda m: value(m, "spectax_store_pending_windows") == 0)
            rows = "spectax_store_quarantined_rows_total"
            assert value(m, rows, endpoint="code-assistant") == 1
            assert value(m, rows, endpoint="chat-creative") == 0
            assert value(m, "spectax_store_up") == 1
        finally:
            assert await spectax.stop() == 0
    assert [r.endpoint for r in await stored_rows(url, start)] == ["chat-creative"] * len(
        rows_of("x", start).rows
    ), spectax.log[-4000:]
    assert "the store refuses its window rows" in spectax.log


async def stored_rows(url: str, start: float) -> list[Any]:
    store = await Store.open(url)
    try:
        return [r for r in await store.rows("window") if r.start.timestamp() == start]
    finally:
        await store.close()


async def stops_before_systemd_kills_it(spectax: Spectax) -> None:
    """SIGTERM: exit 0 with 5 s to spare before the shipped unit's TimeoutStopSec (when
    systemd sends SIGKILL)."""
    from systemd_unit import UNIT, directives

    (value,) = directives(UNIT.read_text())["TimeoutStopSec"]
    bound = float(value.removesuffix("s"))
    began = time.monotonic()
    code = await spectax.stop(timeout=bound + 5)
    took = time.monotonic() - began
    assert code == 0, spectax.log_tail()
    assert took < bound - 5, f"SIGTERM took {took:.1f} s"


async def connect(url: str) -> Any:
    """Another session on the database of `url` (asyncpg's own connection)."""
    import asyncpg

    return await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))


async def lock_windows(holder: Any) -> None:
    """Hold the windows table locked in `holder`'s open transaction, as an operator's
    `LOCK TABLE` or a long migration does, until `holder` closes."""
    await holder.transaction().start()
    await holder.execute("LOCK TABLE windows IN ACCESS EXCLUSIVE MODE")


@pytest.mark.timeout(150)
async def test_sigterm_with_the_windows_table_locked_spools_and_exits_in_time(
    tmp_path, request
) -> None:
    """PostgreSQL stalled, not down: another session holds `LOCK TABLE windows IN ACCESS
    EXCLUSIVE MODE`, so every write waits for the lock. The store must show as behind
    (`spectax_store_up` 0, the oldest pending write's age growing) while the windows pile
    up, and SIGTERM must spool what is queued and exit within the unit's TimeoutStopSec.
    It used to wait for the lock (SIGTERM ended only when the lock went, `store_up` 1)."""
    from spectax.store.writer import WRITE_BOUND_SECONDS, WriteQueue

    url = request.getfixturevalue("pg_server").database()
    async with await start_simulated_servers(DEMO_PROFILES, speed=4.0) as fleet:
        port = free_port()
        config = write_config(
            tmp_path,
            port,
            demo_endpoints(dict(fleet.urls), DEMO_PROFILES),
            window="2s",
            storage_url=url,
        )
        spectax = Spectax(config, port)
        await spectax.start()
        holder = await connect(url)
        try:
            await spectax.wait_for(
                lambda m: (
                    all(value(m, "spectax_endpoint_up", endpoint=n) == 1 for n in NAMES)
                    and value(m, "spectax_store_up") == 1
                )
            )
            await lock_windows(holder)
            m = await spectax.wait_for(
                lambda m: (
                    value(m, "spectax_store_up") == 0
                    and value(m, "spectax_store_pending_windows") >= 40
                ),
                timeout=60,
            )
            age = value(m, "spectax_store_oldest_pending_age_seconds")
            assert age is not None and age > WRITE_BOUND_SECONDS
            assert value(m, "spectax_store_write_errors_total") >= 1
            await stops_before_systemd_kills_it(spectax)
        finally:
            await holder.close()  # the lock goes with the session
            await spectax.kill()
    spool = tmp_path / "state" / "spool.jsonl"
    spooled = WriteQueue(spool).pending_rows if spool.exists() else 0
    assert spooled >= 40, spectax.log_tail()
    assert "not yet stored; they wait in" in spectax.log
    assert "Traceback" not in spectax.log


@pytest.mark.timeout(120)
async def test_sigterm_while_starting_on_a_locked_windows_table_exits_in_time(
    tmp_path, request
) -> None:
    """Started while another session holds the windows table locked, spectax connects and
    then waits in restoring the endpoints from it; SIGTERM then went unheard (the stop
    waited for the start) until systemd killed it. Now the start is given up."""
    url = request.getfixturevalue("pg_server").database()
    await (await Store.open(url)).close()  # the tables, to be locked
    async with await start_simulated_servers(DEMO_PROFILES, speed=1.0) as fleet:
        port = free_port()
        spectax = Spectax(config_for(tmp_path, port, fleet, url), port)
        holder = await connect(url)
        try:
            await lock_windows(holder)
            await spectax.start()
            await spectax.wait_for(lambda m: value(m, "spectax_store_up") == 1)

            async def restore_waits() -> bool:
                return bool(
                    await holder.fetchval(
                        "SELECT count(*) FROM pg_locks"
                        " WHERE NOT granted AND relation = 'windows'::regclass"
                    )
                )

            await wait_until(restore_waits, 20, "spectax to wait for the lock", [spectax])
            assert await spectax.get("/-/ready") == (503, "spectax is starting.\n")
            await stops_before_systemd_kills_it(spectax)
        finally:
            await holder.close()
            await spectax.kill()
    assert "Traceback" not in spectax.log
