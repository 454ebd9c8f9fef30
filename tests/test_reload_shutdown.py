"""Reload (SIGHUP, POST /-/reload) and graceful shutdown (SIGTERM), on the real process.

A bad file keeps the running configuration and sets the reload gauge to 0; a good one keeps
unchanged endpoints with their state, starts new ones, stops removed ones after writing
their open window to the store. SIGTERM during a hanging scrape: exit 0 within the bound,
and the open window is in the store's `windows` table.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from e2e import Spectax, free_port, value, write_config
from ops_helpers import Targets
from spectax import daemon as daemon_module
from spectax.config import validate
from spectax.daemon import Daemon

pytestmark = pytest.mark.e2e
WINDOW = "1h"  # no window closes during a test: rows in the store come from flushes


def stored_output_tokens(state: Path, endpoint: str) -> float:
    with sqlite3.connect(state / "spectax.sqlite") as db:
        rows = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(output_tokens), 0) FROM windows WHERE endpoint = ?",
            (endpoint,),
        ).fetchone()
    return float(rows[1]) if rows[0] else -1.0


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
        # Three pages each: the counted tokens stop growing after the third scrape.
        settled = await spectax.wait_for(
            lambda m: (
                all((targets.requests.get(n, 0) >= 4) for n in ("keep", "drop", "change"))
                and tokens(m, "keep")
            )
        )
        await asyncio.sleep(0.3)
        settled = await spectax.metrics()
        keep_tokens = tokens(settled, "keep")
        drop_tokens = tokens(settled, "drop")
        assert keep_tokens and drop_tokens
        first_success = value(settled, "spectax_config_last_reload_success_timestamp_seconds")
        assert value(settled, "spectax_config_last_reload_successful") == 1

        # A bad file (SIGHUP): nothing changes, the gauge says so, the log says why.
        config.write_text(good.replace("scrape_interval", "scrape_intervall"))
        spectax.signal(signal.SIGHUP)
        await spectax.wait_log("reload failed")
        assert "scrape_intervall: unknown key" in spectax.log
        m = await spectax.metrics()
        assert value(m, "spectax_config_last_reload_successful") == 0
        assert value(m, "spectax_config_last_reload_success_timestamp_seconds") == first_success
        before = dict(targets.requests)
        await asyncio.sleep(1.5)
        assert all(targets.requests[n] > before[n] for n in ("keep", "drop", "change"))
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
    finally:
        assert await spectax.stop() == 0
        await targets.stop()
    assert "Traceback" not in spectax.log
    # Shutdown flushed the open windows (of those scraped twice or more).
    for name in ("keep", "change"):
        assert stored_output_tokens(tmp_path / "state", name) >= 0


async def test_sigterm_during_a_hanging_scrape(tmp_path: Path) -> None:
    targets = Targets()
    hanging = asyncio.Event()

    async def then_hang(request: web.Request) -> web.StreamResponse:
        if targets.requests["slow"] <= 3:
            from conftest import page
            from ops_helpers import PAGES

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
        assert took < 2 * daemon_module.SHUTDOWN_GRACE_SECONDS + 2
    finally:
        await spectax.kill()
        await targets.stop()
    assert stored_output_tokens(tmp_path / "state", "slow") == counted
    assert "spectax stopping" in spectax.log
    assert "Traceback" not in spectax.log


async def test_stop_cancels_a_scrape_that_outlasts_the_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process: a scrape with a long timeout is cancelled after the grace; windows stored."""
    monkeypatch.setattr(daemon_module, "SHUTDOWN_GRACE_SECONDS", 0.5)
    targets = Targets()
    release = asyncio.Event()

    async def hang_third(request: web.Request) -> web.Response:
        from conftest import page
        from ops_helpers import PAGES

        n = targets.requests["t"]
        if n >= 3:
            await release.wait()
        return web.Response(text=page(PAGES[min(n, 3) - 1]))

    targets.add("t", hang_third)
    await targets.start()
    settings = validate(
        {
            "listen": f"127.0.0.1:{free_port()}",
            "scrape_interval": "60s",
            "scrape_timeout": "60s",
            "window": WINDOW,
            "state_directory": str(tmp_path / "state"),
            "endpoints": [{"name": "t", "url": targets.url("t")}],
        }
    )
    daemon = Daemon(settings)
    await daemon.start()
    try:
        deadline = time.monotonic() + 5
        while targets.requests.get("t", 0) < 1 and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        await daemon.scrape("t")  # the second page: an open window with tokens
        stuck = asyncio.create_task(daemon.scrape("t"))
        await asyncio.sleep(0.2)
        began = time.monotonic()
        await daemon.stop()
        assert time.monotonic() - began < 3
        await asyncio.sleep(0)
        assert stuck.done()
    finally:
        release.set()
        await targets.stop()
    assert stored_output_tokens(tmp_path / "state", "t") > 0
