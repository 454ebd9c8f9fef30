"""What a target's page can put into spectax is bounded (issue 16).

A counter the store cannot hold, a model_name longer than the store's column (or 5 MB),
a model_name that echoes the credential spectax sent, and an HTML page answered with 200:
each takes down its own endpoint with a reason, and none of it reaches /metrics, the
store or the log, while the endpoints beside it keep their history. The parser's bounds
themselves are tested in test_engine_vllm.py.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from builders import monitor_of
from e2e import Spectax, free_port, stored_windows, value, wait_until, write_config
from ops_helpers import Targets
from spectax import logs
from spectax.config import validate
from spectax.endpoint import EndpointMonitor
from spectax.scrape import ScrapeError, fetch

CANARY = "CANARY-reflected"  # a planted bearer token; no other text here holds it
HUGE_NAME = "x" * 5_000_000
G = "vllm:generation_tokens_total"


def monitor_with_token(token: str) -> EndpointMonitor:
    s = validate(
        {"endpoints": [{"name": "echo", "url": "http://127.0.0.1:1", "bearer_token": token}]}
    )
    return monitor_of(s)


def test_a_page_whose_model_name_echoes_the_token_is_refused_without_repeating_it() -> None:
    monitor = monitor_with_token(f"{CANARY}-monitor")
    assert monitor.observe_page(0.0, f'{G}{{model_name="m"}} 1\n', 0.01) is not None
    reflected = f'{G}{{model_name="Bearer {CANARY}-monitor"}} 2\n'
    assert monitor.observe_page(1.0, reflected, 0.01) is None
    snap = monitor.snapshot
    assert not snap.up and snap.failures == {"parse": 1}
    assert snap.last_error is not None and "holds a credential" in snap.last_error
    assert CANARY not in snap.last_error
    assert all(CANARY not in model for model in snap.tokens_total)
    assert all(CANARY not in model for model in snap.assessments)
    # The next clean page is taken again: the endpoint recovers.
    assert monitor.observe_page(2.0, f'{G}{{model_name="m"}} 3\n', 0.01) is None
    assert monitor.snapshot.up


def test_a_malformed_line_that_echoes_the_token_is_not_kept_in_the_last_error() -> None:
    """A ParseError quotes the offending line; the snapshot keeps it with secrets blanked."""
    monitor = monitor_with_token(f"{CANARY}-value")
    monitor.observe_page(0.0, f'{G}{{model_name="m"}} Bearer {CANARY}-value\n', 0.01)
    assert monitor.snapshot.failures == {"parse": 1}
    error = monitor.snapshot.last_error or ""
    assert "cannot parse" in error and "<secret>" in error and CANARY not in error


def test_a_secret_registered_later_is_checked_against_names_already_seen() -> None:
    """A reload can add a credential; a model name found clean before is checked again."""
    monitor = monitor_with_token(f"{CANARY}-first")
    later = "added-by-a-reload-0f3e9a"  # shares no 8 characters with the first token
    page = f'{G}{{model_name="{later}"}} 1\n'
    monitor.observe_page(0.0, page, 0.01)
    assert monitor.snapshot.up
    logs.register_secret(later)
    monitor.observe_page(1.0, page, 0.01)
    assert not monitor.snapshot.up and monitor.snapshot.failures == {"parse": 1}


async def test_fetch_says_an_html_page_answered_with_200_is_not_a_metrics_page() -> None:
    targets = Targets()

    async def html(request: web.Request) -> web.Response:
        return web.Response(text="<h1>Sign in</h1>", content_type="text/html")

    async def html_as_text(request: web.Request) -> web.Response:
        return web.Response(text=" \n\t<!DOCTYPE html><html></html>")  # text/plain

    async def no_engine_metrics(request: web.Request) -> web.Response:
        return web.Response(text="# HELP python_info x\npython_info 1\n")

    targets.add("html", html)
    targets.add("html_as_text", html_as_text)
    targets.add("plain", no_engine_metrics)
    await targets.start()
    try:
        async with aiohttp.ClientSession() as session:
            for name, why in (("html", "Content-Type text/html"), ("html_as_text", "'<'")):
                with pytest.raises(ScrapeError) as error:
                    await fetch(session, targets.url(name), 2.0, 1_000_000)
                assert error.value.reason == "parse"
                assert "answered 200 with an HTML page" in str(error.value)
                assert why in str(error.value) and "check the endpoint's url" in str(error.value)
            # A real page without vllm: families (--disable-log-stats) is still a page.
            assert "python_info" in await fetch(session, targets.url("plain"), 2.0, 1_000_000)
    finally:
        await targets.stop()


def store_holds(state: Path, needle: bytes) -> bool:
    return any(needle in p.read_bytes() for p in state.rglob("*") if p.is_file())


def cursor_of(state: Path, endpoint: str) -> str | None:
    uri = f"file:{state / 'spectax.sqlite'}?mode=ro"
    with sqlite3.connect(uri, uri=True) as db:
        row = db.execute("SELECT sample FROM cursors WHERE endpoint = ?", (endpoint,)).fetchone()
    return None if row is None else str(row[0])


@pytest.mark.e2e
async def test_hostile_pages_take_down_only_their_own_endpoint(tmp_path: Path) -> None:
    targets = Targets()

    async def counter_overflow(request: web.Request) -> web.Response:
        first = targets.requests["overflow"] == 1
        return web.Response(text=f'{G}{{model_name="m"}} {"1" if first else "1e19"}\n')

    async def long_name(request: web.Request) -> web.Response:
        return web.Response(text=f'{G}{{model_name="{HUGE_NAME}"}} 1\n')

    async def echo(request: web.Request) -> web.Response:
        received = request.headers.get("Authorization", "")
        return web.Response(text=f'{G}{{model_name="{received}"}} 5\n')

    async def html(request: web.Request) -> web.Response:
        return web.Response(text="<html><body>Sign in</body></html>", content_type="text/html")

    targets.add_pages("good")
    targets.add("overflow", counter_overflow)
    targets.add("long", long_name)
    targets.add("echo", echo)
    targets.add("html", html)
    await targets.start()
    port = free_port()
    bad = ("overflow", "long", "echo", "html")
    endpoints = [{"name": n, "url": targets.url(n)} for n in ("good", *bad)]
    endpoints[3]["bearer_token"] = CANARY
    config = write_config(tmp_path, port, endpoints, max_body_bytes=8 * 1024 * 1024)
    state = tmp_path / "state"
    spectax = Spectax(config, port)
    await spectax.start()
    try:
        m = await spectax.wait_for(
            lambda m: all(
                value(m, "spectax_scrape_failures_total", endpoint=n, reason="parse") for n in bad
            )
        )
        for name in bad:
            assert value(m, "spectax_endpoint_up", endpoint=name) == 0, name
        # The good endpoint keeps its history: a window closes and is stored after all four
        # bad pages were seen (the overflow one has served 1e19 by then).
        rows = stored_windows(state, "good")[0] if (state / "spectax.sqlite").exists() else 0
        await wait_until(
            lambda: stored_windows(state, "good")[0] > rows, 30, "a new window of good", [spectax]
        )
        status, text = await spectax.get("/metrics")
        assert status == 200
        assert len(text) < 200_000, "one target's model_name inflated /metrics"
        assert CANARY not in text
        assert "1e+19" not in text and "xxxxxxxxxxxxxxxx" not in text
    finally:
        assert await spectax.stop() == 0
        await targets.stop()
    assert stored_windows(state, "good")[0] >= 1
    assert stored_windows(state, "long") == (0, 0.0)
    assert stored_windows(state, "echo") == (0, 0.0)
    assert stored_windows(state, "overflow")[1] < 2**53
    assert cursor_of(state, "long") is None and cursor_of(state, "echo") is None
    assert not store_holds(state, CANARY.encode())
    assert not store_holds(state, b"x" * 1000)
    assert CANARY not in spectax.log
    assert "refused /metrics page: a model_name holds a credential" in spectax.log
    assert "model_name is 5000000 characters long" in spectax.log
    assert "answered 200 with an HTML page" in spectax.log
    assert "at most 2**53, got 1e19" in spectax.log
