"""A target rotating its model names (issue 30 item 6): each page is capped at 64 models, but
names that change from scrape to scrape piled up without end (6,208 models exported, a 50 MB
database and RSS climbing after two minutes, other endpoints' writes locked out).

The ledger alone (cap, expiry, an outage), then two monitors on a real store (SQLite and
PostgreSQL) with a simulated clock, then a real `spectax run` on loopback scraping a churning
target and a good one: the churning one's models stay bounded, its drops are counted and
told once, and the good one's figures and rows are what they would be alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from builders import queued
from e2e import Spectax, free_port, value, write_config
from ops_helpers import Targets
from spectax.config import validate
from spectax.endpoint import EndpointMonitor
from spectax.pipeline.model_ledger import MAX_MODELS_HELD, ModelLedger
from spectax.store import Store

WINDOW = 60.0
STEP = 2.0  # seconds between simulated scrapes


def churn_page(k: int) -> str:
    """Page `k` of a target that rotates its names: 32 new ones, and the 32 of page k - 1
    (each name is on two pages, so it has one interval and counts tokens). Counters only
    grow, so nothing reads as a restart."""
    lines = []
    for born in (k, k - 1):  # the new first: when there is room, it goes to them
        if born < 0:
            continue
        for i in range(32):
            tokens = 1000 * born + 10 * i + 7 * (k - born)
            lines.append(f'vllm:generation_tokens_total{{model_name="s{born}-{i}"}} {tokens}\n')
    return "".join(lines)


def good_page(k: int) -> str:
    return f'vllm:generation_tokens_total{{model_name="good"}} {100 * k}\n'


# ------------------------------------------------------------------ the ledger


def test_the_ledger_refuses_new_names_past_its_cap_until_held_ones_expire() -> None:
    ledger = ModelLedger(expiry=10.0, limit=4)
    first = ledger.admit(0.0, ["a", "b", "c"])
    assert (first.kept, first.refused, first.expired) == (None, 0, ())
    full = ledger.admit(1.0, ["a", "d", "e", "f"])  # room for one: d
    assert full.kept == {"a", "b", "c", "d"} and full.refused == 2 and full.expired == ()
    # b and c were last seen at 0: at 9.5 they are not yet a window old, at 10.5 they are
    assert ledger.admit(9.5, ["a", "e"]).refused == 1
    later = ledger.admit(10.5, ["a", "e"])
    assert later.expired == ("b", "c") and later.refused == 0 and later.kept is None
    assert len(ledger) == 3  # a, d (seen at 1.0), e
    assert ledger.admit(11.5, ["a", "e"]).expired == ("d",)


def test_an_endpoint_back_after_an_outage_keeps_its_models() -> None:
    """A page's names are refreshed before anything expires: no page for an hour (the target
    down) and the same page again forgets nothing and refuses nothing."""
    ledger = ModelLedger(expiry=10.0, limit=2)
    ledger.admit(0.0, ["a", "b"])
    back = ledger.admit(3600.0, ["a", "b"])
    assert (back.kept, back.refused, back.expired) == (None, 0, ())


# ------------------------------------------------------------------ monitors on a real store


def endpoints(url: str) -> Any:
    return validate(
        {
            "window": "1m",
            "storage_url": url,
            "endpoints": [
                {"name": name, "url": "http://127.0.0.1:1", "price": {"usd_per_hour": 3.6}}
                for name in ("churn", "good", "alone")
            ],
        }
    )


def apart_url(database_url: str, request: pytest.FixtureRequest) -> str:
    """A second empty database of the same backend."""
    if database_url.startswith("sqlite"):
        return database_url.replace("history.sqlite", "alone.sqlite")
    return str(request.getfixturevalue("pg_server").database())


async def test_a_churning_endpoint_is_bounded_and_a_good_one_is_unaffected(
    database_url: str, caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest
) -> None:
    """Five windows of scrapes every 2 s: the churning endpoint never holds more than the
    cap (tokens, sliding window), stores at most twice the cap of models in a window, counts
    what it refused and what expired, and says so once; the good endpoint's stored rows are
    those of the same endpoint scraped alone, in a store nobody churns."""
    settings = endpoints(database_url)
    churn, good, alone = (
        EndpointMonitor(config, Decimal("3.6"), WINDOW) for config in settings.config.endpoints
    )
    store = await Store.open(database_url)
    alone_store = await Store.open(apart_url(database_url, request))
    t0 = 1_790_000_000.0 - 1_790_000_000.0 % WINDOW
    try:
        with caplog.at_level(logging.WARNING, logger="spectax.monitor"):
            for k in range(int(5 * WINDOW / STEP)):
                now = t0 + STEP * k
                for monitor, text in ((churn, churn_page(k)), (good, good_page(k))):
                    write = queued(monitor.observe_page(now, text, 0.01))
                    if write is not None:
                        await store.save(write.endpoint, write.rows, write.cursor)
                if (write := queued(alone.observe_page(now, good_page(k), 0.01))) is not None:
                    await alone_store.save(write.endpoint, write.rows, write.cursor)
                window = churn.window()
                assert len(churn.snapshot.tokens_total) <= MAX_MODELS_HELD
                assert window is None or len(window.models) <= MAX_MODELS_HELD
        for monitor, into in ((churn, store), (good, store), (alone, alone_store)):
            if (write := queued(monitor.flush())) is not None:
                await into.save(write.endpoint, write.rows, write.cursor)
        stored, alone_stored = await store.rows("window"), await alone_store.rows("window")
    finally:
        await store.close()
        await alone_store.close()
    per_window = Counter(row.start for row in stored if row.endpoint == "churn")
    assert per_window and max(per_window.values()) <= 2 * MAX_MODELS_HELD
    dropped = churn.snapshot.models_dropped
    # 150 pages of 32 new names: the first 4 fill the 128, then most are refused
    assert dropped["limit"] > 100 * 32 and dropped["expired"] > 0
    assert good.snapshot.models_dropped == {}
    assert churn.snapshot.tokens_total  # names it holds count tokens
    told = [r for r in caplog.records if "model names within" in r.getMessage()]
    assert len(told) == 1 and "churn" in told[0].getMessage()

    def figures(rows: list[Any], endpoint: str) -> list[tuple[Any, ...]]:
        return [
            (row.start, row.model, row.output_tokens, row.seconds, row.spend_usd)
            for row in rows
            if row.endpoint == endpoint
        ]

    good_stored = figures(stored, "good")
    assert good_stored == figures(alone_stored, "alone")
    assert sum(row[2] for row in good_stored) == 100 * (int(5 * WINDOW / STEP) - 1)


# ------------------------------------------------------------------ a real daemon on loopback


@pytest.mark.e2e
async def test_spectax_run_bounds_a_churning_target_beside_a_good_one(
    tmp_path: Path, database_url: str
) -> None:
    targets = Targets()
    pages = {"churn": 0, "good": 0}

    def serving(name: str, render: Any) -> Any:
        async def serve(request: web.Request) -> web.Response:
            text = render(pages[name])
            pages[name] += 1
            return web.Response(text=text)

        return serve

    targets.add("churn", serving("churn", churn_page))
    targets.add("good", serving("good", good_page))
    await targets.start()
    port = free_port()
    config = write_config(
        tmp_path,
        port,
        [{"name": name, "url": targets.url(name)} for name in ("churn", "good")],
        scrape_interval="0.25s",
        scrape_timeout="0.25s",
        storage_url=database_url,
    )
    spectax = Spectax(config, port)
    await spectax.start()
    try:

        def churned(metrics: Any) -> bool:
            return (
                value(metrics, "spectax_models_dropped_total", endpoint="churn", reason="expired")
                or 0
            ) > 0

        metrics = await spectax.wait_for(churned, timeout=60)
        await asyncio.sleep(2)  # a few more windows of churn
        _, text = await spectax.get()
    finally:
        assert await spectax.stop() == 0
        await targets.stop()
    churn_models = {
        line.split('model="', 1)[1].split('"', 1)[0]
        for line in text.splitlines()
        if line.startswith('spectax_output_tokens_total{endpoint="churn"')
    }
    assert 0 < len(churn_models) <= MAX_MODELS_HELD
    assert value(metrics, "spectax_models_dropped_total", endpoint="churn", reason="limit")
    assert value(metrics, "spectax_models_dropped_total", endpoint="good", reason="limit") == 0
    assert value(metrics, "spectax_endpoint_up", endpoint="good") == 1
    assert spectax.log.count("model names within") == 1
    assert "Traceback" not in spectax.log and "database is locked" not in spectax.log
    store = await Store.open(database_url)
    try:
        stored, cursor = await store.rows("window"), await store.cursor("good")
    finally:
        await store.close()
    good = [row for row in stored if row.endpoint == "good"]
    # every token of the good target's pages up to the last one spectax read (the stored
    # cursor; page 0 has none), stored once: a page served as it stopped may be unread
    assert (
        cursor is not None and pages["good"] - 2 <= cursor[1].models["good"].generation_tokens / 100
    )
    assert sum(row.output_tokens for row in good) == cursor[1].models["good"].generation_tokens
    per_window = Counter(row.start for row in stored if row.endpoint == "churn")
    assert max(per_window.values()) <= 2 * MAX_MODELS_HELD
