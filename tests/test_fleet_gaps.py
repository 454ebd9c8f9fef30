"""Fleet mode across a gap in Prometheus's samples (a Prometheus paused, its scrapes
failing), on a real Prometheus (the Debian package) holding history written with
`promtool tsdb create-blocks-from openmetrics`: the live daemon's one-window reads
(FleetSource.read_due) and `spectax backfill`'s span must store the same rows, with a
lookback shorter than the window and the gap; the windows with no sample store no row,
and their seconds, spend and tokens go into the next window, as a direct scrape after
the gap counts them: nothing of the span is lost.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from promstack import Prometheus, history_start, prometheus_holding
from spectax.cli.backfill import backfill
from spectax.config import Settings, validate
from spectax.endpoint import EndpointMonitor
from spectax.endpoint_config import EndpointConfig
from spectax.observed import Observed
from spectax.sources.fleet import FleetSource
from spectax.sources.promql import SERIES
from spectax.store import Store
from spectax.store.pending import PendingWrite
from spectax.store.rows import pending_write
from spectax.tariffs import running_pricing

pytestmark = pytest.mark.e2e  # a real Prometheus, scraping for seconds

W = 10.0
SPAN = 7  # windows
USD_PER_HOUR = 3.6  # $0.001 a second
GEN = SERIES["generation_tokens"]
# A sample every 2 s, none in (20, 42]: windows 3 and 4 have none, window 5's first
# sample is 22 s after the last one (past the 5 s lookback and the 10 s window).
STAMPS = [t for t in range(-6, SPAN * int(W) + 1, 2) if not 20 < t <= 42]
COLUMNS = ("seconds", "busy_seconds", "output_tokens", "spend_usd", "restarts")


def tokens_at(t: int) -> int:
    return 1000 + 3 * (t + 6)


def openmetrics(t0: int) -> str:
    labels = 'namespace="ns1",model_name="m",pod="a"'
    lines = [f"{GEN}{{{labels}}} {tokens_at(t)} {t0 + t}" for t in STAMPS]
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture
async def prometheus(tmp_path: Path):  # type: ignore[no-untyped-def]
    t0 = history_start()
    async with prometheus_holding(tmp_path, openmetrics(t0)) as server:
        yield server, float(t0)


def settings_for(url: str, database_url: str) -> Settings:
    source = {
        "url": url,
        "endpoint_labels": ["namespace"],
        "delay": "1s",
        "lookback": "5s",
        "endpoint": {"gpu": "H100 SXM", "price": {"usd_per_hour": USD_PER_HOUR}},
    }
    return validate(
        {
            "scrape_interval": "1s",
            "window": f"{W:g}s",
            "storage_url": database_url,
            "sources": [source],
        }
    )


async def live_rows(settings: Settings, t0: float) -> dict[float, dict[str, Any]]:
    """The rows the live daemon's reads give, one window at a time, as each falls due."""
    written: list[PendingWrite] = []

    async def new_monitors(endpoints: Sequence[EndpointConfig]) -> AsyncIterator[EndpointMonitor]:
        for endpoint in endpoints:
            usd_per_hour = running_pricing(endpoint, settings.prices).usd_per_hour
            yield EndpointMonitor(endpoint, usd_per_hour, W)

    def emit(monitor: EndpointMonitor, observed: Observed | None) -> None:
        if observed is not None:
            written.append(pending_write(observed))

    source = settings.config.sources[0]
    async with aiohttp.ClientSession() as session:
        fleet = FleetSource(source, W, session, new_monitors, emit)
        fleet.next_end = t0 + W
        for k in range(1, SPAN + 1):
            assert await fleet.read_due(t0 + k * W + source.delay + 0.5)
            assert fleet.next_end == t0 + (k + 1) * W, "one window a read"
    return {row["start"].timestamp(): row for w in written for row in w.rows}


async def test_live_and_backfill_store_the_same_rows_and_lose_nothing_of_a_gap(
    prometheus: tuple[Prometheus, float], database_url: str
) -> None:
    server, t0 = prometheus
    settings = settings_for(server.url, database_url)
    live = await live_rows(settings, t0)
    assert await backfill(settings, t0, t0 + SPAN * W) == len(live)
    store = await Store.open(settings.config.database_url)
    try:
        stored = {row.start.timestamp(): row for row in await store.window_rows("ns1")}
    finally:
        await store.close()
    assert sorted(live) == sorted(stored) == [t0 + k * W for k in (0, 1, 4, 5, 6)]
    for start, row in live.items():
        assert {c: row[c] for c in COLUMNS} == {c: getattr(stored[start], c) for c in COLUMNS}
    after = live[t0 + 4 * W]
    assert after["seconds"] == 3 * W, "the two windows without a sample go into the next"
    assert after["output_tokens"] == tokens_at(50) - tokens_at(20)
    assert sum(row["seconds"] for row in live.values()) == SPAN * W
    assert sum(row["output_tokens"] for row in live.values()) == tokens_at(70) - tokens_at(0)
    spend = sum((Decimal(row["spend_usd"]) for row in live.values()), Decimal(0))
    assert spend == Decimal("0.001") * int(SPAN * W), "every second of the span is spent"
