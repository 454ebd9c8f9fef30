"""Settings, monitors and the writes they queue, built one way for every test.

Test modules import these instead of each other: a change to `EndpointMonitor` or to the
config's shape is made here once, not in every module that built one by hand.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from recorded_pages import page
from spectax.config import Settings, validate
from spectax.endpoint import EndpointMonitor
from spectax.observed import Observed
from spectax.store import Store
from spectax.store.pending import PendingWrite
from spectax.store.rows import pending_write
from spectax.store.writer import StoreWriter, WriteQueue

#: The recorded ngram-speculating vLLM, from before traffic to after it, in order.
NGRAM_PAGES = (
    "spec_ngram_0_before_traffic.txt",
    "spec_ngram_1_after_first_request.txt",
    "spec_ngram_2_mid.txt",
    "spec_ngram_3_after.txt",
)


def ngram_settings(
    name: str = "ngram",
    *,
    window: str = "5m",
    storage_url: str | None = None,
    state_directory: Path | None = None,
    **endpoint: Any,
) -> Settings:
    """Windows (5 minutes unless said) of one ngram-speculating endpoint at 3.6 USD an hour,
    on a port nothing answers (its pages are fed by hand); `endpoint` adds or replaces fields."""
    raw: dict[str, Any] = {
        "window": window,
        "endpoints": [
            {
                "name": name,
                "url": "http://127.0.0.1:1",
                "speculation": {"method": "ngram"},
                "price": {"usd_per_hour": 3.6},
                **endpoint,
            }
        ],
    }
    if storage_url is not None:
        raw["storage_url"] = storage_url
    if state_directory is not None:
        raw["state_directory"] = str(state_directory)
    return validate(raw)


def monitor_of(
    settings: Settings, window_seconds: float = 300.0, *more: Any, **kwargs: Any
) -> EndpointMonitor:
    """The monitor of `settings`' first endpoint, priced as the config prices it; `more`
    and `kwargs` are EndpointMonitor's own (what it resumes from, its lookups, its GPU)."""
    endpoint = settings.config.endpoints[0]
    price = settings.usd_per_hour.get(endpoint.name)
    return EndpointMonitor(endpoint, price, window_seconds, *more, **kwargs)


def monitors_of(settings: Settings, window_seconds: float = 300.0) -> dict[str, EndpointMonitor]:
    """A monitor per configured endpoint, by name, each priced as the config prices it."""
    return {
        e.name: EndpointMonitor(e, settings.usd_per_hour.get(e.name), window_seconds)
        for e in settings.config.endpoints
    }


async def store_pages(
    monitor: EndpointMonitor, store: Store, times_pages: Iterable[tuple[float, str]]
) -> None:
    """Scrape each recorded page at its time; every write the monitor queues is saved."""
    for t, name in times_pages:
        write = queued(monitor.observe_page(t, page(name), 0.01))
        if write is not None:
            await store.save(write.endpoint, write.rows, write.cursor)


def queued(observed: Observed | None) -> PendingWrite | None:
    """What the store writer queues of what a monitor handed out: its rows and cursor."""
    return None if observed is None else pending_write(observed)


def scrape_write(monitor: EndpointMonitor, t: float, text: str) -> list[PendingWrite]:
    """What the daemon queues for one scrape: closed windows, then the open window so far."""
    observed = (monitor.observe_page(t, text, 0.01), monitor.flush())
    return [pending_write(o) for o in observed if o is not None]


def priced_monitor(*more: Any) -> EndpointMonitor:
    """5-minute windows of an H100 endpoint `x` at 3.99 USD an hour, priced as the config
    resolves it; `more` is EndpointMonitor's own (what it resumes from)."""
    settings = validate(
        {
            "window": "5m",
            "endpoints": [
                {
                    "name": "x",
                    "url": "http://127.0.0.1:1/metrics",
                    "gpu": "H100 SXM",
                    "price": {"usd_per_hour": 3.99},
                }
            ],
        }
    )
    return monitor_of(settings, 300.0, *more)


# ------------------------------------------------------------------ the store writer's input


def closed_window() -> Observed:
    """One closed window [0, 300) of the recorded ngram pages, as the monitor hands it out."""
    monitor = monitor_of(ngram_settings(url="http://127.0.0.1:1/metrics", gpus=2))
    monitor.observe_page(0, page(NGRAM_PAGES[0]), 0.01)
    monitor.observe_page(200, page(NGRAM_PAGES[2]), 0.01)
    observed = monitor.observe_page(400, page(NGRAM_PAGES[3]), 0.01)
    assert observed is not None and observed.closed and observed.cursor is not None
    return observed


def closed_window_rows() -> PendingWrite:
    """One closed window of the recorded ngram pages: real rows as the codec writes them."""
    return pending_write(closed_window())


def rows_of(endpoint: str, start: int, **values: Any) -> PendingWrite:
    """`closed_window_rows` as `endpoint`'s, the window moved to `start`, `values` replaced."""
    write = closed_window_rows()
    shift = start - write.rows[0]["start"].timestamp()
    rows = [
        {
            **row,
            "endpoint": endpoint,
            "start": row["start"] + timedelta(seconds=shift),
            "end": row["end"] + timedelta(seconds=shift),
            **values,
        }
        for row in write.rows
    ]
    assert write.cursor is not None
    return PendingWrite(endpoint, rows, (write.cursor[0] + shift, write.cursor[1]))


async def started_writer(url: str, state: Path) -> StoreWriter:
    """A running store writer on `url`, spooling under `state`, logging as the daemon does."""
    log = logging.getLogger("spectax.daemon")
    writer = StoreWriter(
        lambda: Store.open(url), state / "spool.jsonl", 10_000, asyncio.Event(), log
    )
    assert await writer.connect() is not None
    writer.start()
    return writer


def numbered_write(n: int) -> PendingWrite:
    """A one-row write of endpoint `e<n>` whose row carries `n`, to follow it through a queue."""
    row = {"n": n, "start": datetime(2026, 11, 1, tzinfo=UTC), "spend_usd": Decimal("0.1")}
    return PendingWrite(f"e{n}", [row], None)


def drain(queue: WriteQueue, batch_rows: int = 1) -> list[int]:
    """Take every numbered write out of `queue`, `batch_rows` rows at a time: their numbers."""
    seen = []
    while batch := queue.peek(batch_rows):
        assert sum(len(w.rows) for w in batch) <= batch_rows
        seen.extend(w.rows[0]["n"] for w in batch)
        queue.pop(batch)
    return seen
