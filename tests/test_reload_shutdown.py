"""Reload (SIGHUP, POST /-/reload) and graceful shutdown (SIGTERM), on the real process.

A bad file keeps the running configuration and sets the reload gauge to 0; a good one keeps
unchanged endpoints with their state, starts new ones, stops removed ones after writing
their open window to the store. SIGTERM during a hanging scrape: exit 0 within the bound,
and the open window is in the store's `windows` table.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from e2e import Spectax, free_port, stored_windows, value, wait_until, write_config
from ops_helpers import Targets
from spectax.config import validate
from spectax.daemon import SHUTDOWN_GRACE_SECONDS, Daemon

pytestmark = pytest.mark.e2e
WINDOW = "1h"  # no window closes during a test: rows in the store come from flushes


def stored_output_tokens(state: Path, endpoint: str) -> float:
    """Output tokens in the store's windows; -1 when it holds no window of `endpoint`."""
    rows, output_tokens = stored_windows(state, endpoint)
    return output_tokens if rows else -1.0


def tokens(m: Any, endpoint: str) -> float | None:
    return value(m, "spectax_output_tokens_total", endpoint=endpoint)


async def test_reload_bad_then_good(tmp_path: Path) -> None:
    targets = Targets()
    for name in ("keep", "drop", "change", "new"):
        targets.add_pages(name)
    await targets.start()
    port = free_port()

    def endpoints(*names: str, threshold: float = 0.5) -> list[dict[str, Any]]:
        return [
            {"name": n, "url": targets.url(n), "acceptance_threshold": threshold}
            if n == "change"
            else {"name": n, "url": targets.url(n)}
            for n in names
        ]

    config = write_config(tmp_path, port, endpoints("keep", "drop", "change"), window=WINDOW)
    good = config.read_text()
    spectax = Spectax(config, port)
    await spectax.start()
    try:
        # Three pages each: the counted tokens stop growing after the third scrape. A scrape
        # starts only once the one before it is done, its /metrics lines included: after the
        # fourth request, /metrics holds the tokens of all three pages.
        await wait_until(
            lambda: all(targets.requests.get(n, 0) >= 4 for n in ("keep", "drop", "change")),
            20,
            "a fourth scrape of keep, drop and change",
            [spectax],
        )
        settled = await spectax.metrics()
        keep_tokens = tokens(settled, "keep")
        drop_tokens = tokens(settled, "drop")
        change_tokens = tokens(settled, "change")
        assert keep_tokens and drop_tokens and change_tokens
        first_success = value(settled, "spectax_config_last_reload_success_timestamp_seconds")
        assert value(settled, "spectax_config_last_reload_successful") == 1

        await spectax.wait_ready()  # a reload before then is refused: "still starting"
        # A bad file (SIGHUP): nothing changes, the gauge says so, the log says why.
        config.write_text(good.replace("scrape_interval", "scrape_intervall"))
        spectax.signal(signal.SIGHUP)
        await spectax.wait_log("reload failed")
        assert "scrape_intervall: unknown key" in spectax.log
        m = await spectax.metrics()
        assert value(m, "spectax_config_last_reload_successful") == 0
        assert value(m, "spectax_config_last_reload_success_timestamp_seconds") == first_success
        before = dict(targets.requests)
        await wait_until(  # within a few 1 s intervals; a stopped schedule never scrapes
            lambda: all(targets.requests[n] > before[n] for n in ("keep", "drop", "change")),
            5,
            "a scrape of every endpoint after the failed reload",
            [spectax],
        )
        # ... and through the HTTP endpoint, with the reason in the answer.
        status, text = await spectax.post("/-/reload")
        assert status == 500 and "unknown key" in text

        # A setting that only a restart can change is refused the same way.
        restart_only = yaml.safe_load(good)
        restart_only["listen"] = f"127.0.0.1:{free_port()}"
        config.write_text(yaml.safe_dump(restart_only))
        status, text = await spectax.post("/-/reload")
        assert status == 500 and "listen: changing it takes a restart" in text

        # A good file: keep one, drop one, change one, add one.
        config.write_text(
            yaml.safe_dump(
                {
                    **yaml.safe_load(good),
                    "endpoints": endpoints("keep", "change", "new", threshold=0.7),
                }
            )
        )
        started = time.time()
        status, text = await spectax.post("/-/reload")
        assert status == 200, text
        m = await spectax.wait_for(lambda m: value(m, "spectax_endpoint_up", endpoint="new"))
        assert value(m, "spectax_config_last_reload_successful") == 1
        assert value(m, "spectax_config_last_reload_success_timestamp_seconds") >= started
        assert tokens(m, "keep") == keep_tokens  # same monitor: its state went on
        assert value(m, "spectax_endpoint_up", endpoint="drop") is None
        assert value(m, "spectax_acceptance_threshold_ratio", endpoint="change") == 0.7
        # The removed endpoint's open window reached the store before it went.
        assert stored_output_tokens(tmp_path / "state", "drop") == drop_tokens
        # The changed endpoint resumed from the store: its window went on from its cursor.
        assert "endpoint change: resuming from" in spectax.log
        assert "configuration reloaded: 1 endpoint(s) kept, 2 started, 2 stopped" in spectax.log

        # SIGHUP with a good file works as well.
        spectax.signal(signal.SIGHUP)
        await spectax.wait_log("configuration reloaded: 3 endpoint(s) kept")
        # The pages of keep and change ran out before the reload: these counts are final.
        last = await spectax.metrics()
    finally:
        assert await spectax.stop() == 0
        await targets.stop()
    assert "Traceback" not in spectax.log
    # Shutdown flushed the open windows (of those whose pages ran out): every token counted
    # is in the store. The changed endpoint counts afresh in its new monitor; the window it
    # resumed, flushed again, kept what the old one had counted.
    assert tokens(last, "keep") == keep_tokens
    assert stored_output_tokens(tmp_path / "state", "keep") == keep_tokens
    counted_by_both = change_tokens + (tokens(last, "change") or 0.0)
    assert stored_output_tokens(tmp_path / "state", "change") == counted_by_both


async def test_sigterm_during_a_hanging_scrape(tmp_path: Path) -> None:
    targets = Targets()
    hanging = asyncio.Event()

    async def then_hang(request: web.Request) -> web.StreamResponse:
        if targets.requests["slow"] <= 3:
            from ops_helpers import PAGES
            from recorded_pages import page

            return web.Response(text=page(PAGES[targets.requests["slow"] - 1]))
        hanging.set()
        response = web.StreamResponse()
        await response.prepare(request)
        await asyncio.sleep(8)  # longer than the scrape timeout; bounded for teardown
        return response

    targets.add("slow", then_hang)
    await targets.start()
    port = free_port()
    config = write_config(
        tmp_path, port, [{"name": "slow", "url": targets.url("slow")}], window=WINDOW
    )
    spectax = Spectax(config, port)
    await spectax.start()
    try:
        await asyncio.wait_for(hanging.wait(), 20)
        m = await spectax.metrics()
        counted = tokens(m, "slow")
        assert counted
        began = time.monotonic()
        spectax.signal(signal.SIGTERM)
        assert await spectax.stop(timeout=15) == 0
        took = time.monotonic() - began
        assert took < 2 * SHUTDOWN_GRACE_SECONDS + 2
    finally:
        await spectax.kill()
        await targets.stop()
    assert stored_output_tokens(tmp_path / "state", "slow") == counted
    assert "spectax stopping" in spectax.log
    assert "Traceback" not in spectax.log


async def test_stop_cancels_a_scrape_that_outlasts_the_grace(tmp_path: Path) -> None:
    """In process: a scrape with a long timeout is cancelled after the grace; windows stored."""
    targets = Targets()
    release = asyncio.Event()

    async def hang_third(request: web.Request) -> web.Response:
        from ops_helpers import PAGES
        from recorded_pages import page

        n = targets.requests["t"]
        if n >= 3:
            await release.wait()
        return web.Response(text=page(PAGES[min(n, 3) - 1]))

    targets.add("t", hang_third)
    await targets.start()
    settings = validate(
        {
            "listen": f"127.0.0.1:{free_port()}",
            "scrape_interval": "4s",  # the schedule's second scrape hangs as well
            "scrape_timeout": "4s",  # longer than the stop takes: the grace ends the scrape
            "window": WINDOW,
            "state_directory": str(tmp_path / "state"),
            "endpoints": [{"name": "t", "url": targets.url("t")}],
        }
    )
    daemon = Daemon(settings, shutdown_grace_seconds=0.5)
    await daemon.start()
    try:
        await wait_until(lambda: targets.requests.get("t", 0) >= 1, 5, "the first scrape")
        await daemon.scrape("t")  # the second page: an open window with tokens
        stuck = asyncio.create_task(daemon.scrape("t"))
        await wait_until(lambda: targets.requests["t"] >= 3, 5, "the third scrape to hang")
        # A scrape of the schedule's: stop waits the grace for it, then cancels it.
        await wait_until(lambda: targets.requests["t"] >= 4, 10, "the schedule's scrape to hang")
        began = time.monotonic()
        await daemon.stop()
        assert time.monotonic() - began < 3
        await asyncio.sleep(0)
        assert stuck.done()
    finally:
        release.set()
        await targets.stop()
    assert stored_output_tokens(tmp_path / "state", "t") > 0


# Loaded by the spectax process (a sitecustomize on its PYTHONPATH): each rollup takes
# the database's write lock, says so in the log, and holds it for a minute.
HOLDING_ROLLUP = """
import asyncio, logging
from sqlalchemy import text
from spectax.store.rollup import Rollups

async def rollup(self):
    async with self._sessions() as session:
        await session.execute(text("CREATE TABLE IF NOT EXISTS held (x INTEGER)"))
        await session.execute(text("INSERT INTO held VALUES (1)"))
        logging.getLogger("test").warning("rollup holds the write lock")
        await asyncio.sleep(60)
        await session.commit()
    return 0

Rollups.rollup = rollup
"""


async def test_sigterm_during_a_rollup_rolls_it_back_and_stores_the_open_window(
    tmp_path: Path,
) -> None:
    """SQLite: a rollup holding the database's write lock when SIGTERM comes is given the
    grace, then cancelled and rolled back before the store closes, and the process exits 0
    with the open window stored, not spooled. APScheduler's shutdown left it to unwind
    after the store had closed, as the process ended: its rollback was cut off
    ("Exception during reset"), which can leave aiosqlite's worker thread, not a daemon
    thread, keeping the process alive (the likely cause of a CI run's SIGTERM that was
    killed after 20 s). The open window is stored only if the rollback let go of the lock
    before the last write."""
    targets = Targets()
    targets.add_pages("t")
    await targets.start()
    (tmp_path / "patch").mkdir()
    (tmp_path / "patch" / "sitecustomize.py").write_text(HOLDING_ROLLUP)
    port = free_port()
    config = write_config(
        tmp_path,
        port,
        [{"name": "t", "url": targets.url("t")}],
        window=WINDOW,
        rollup_interval="1s",
    )
    path = os.pathsep.join([str(tmp_path / "patch"), os.environ.get("PYTHONPATH", "")])
    spectax = Spectax(config, port, env={"PYTHONPATH": path})
    await spectax.start()
    try:
        await spectax.wait_log("rollup holds the write lock")
        # three pages, then the third again: by the fourth request the third is counted
        await wait_until(lambda: targets.requests.get("t", 0) >= 4, 10, "four scrapes", [spectax])
        counted = tokens(await spectax.metrics(), "t")
        assert counted
        began = time.monotonic()
        assert await spectax.stop(timeout=15) == 0, spectax.log_tail()
        assert time.monotonic() - began < 3 * SHUTDOWN_GRACE_SECONDS + 2
    finally:
        await spectax.kill()
        await targets.stop()
    assert "cut short" in spectax.log
    assert "Traceback" not in spectax.log and "Exception during reset" not in spectax.log
    assert stored_output_tokens(tmp_path / "state", "t") == counted
    spool = tmp_path / "state" / "spool.jsonl"
    assert not spool.exists() or not spool.read_text().strip(), "spooled, not stored"
