"""A bounded version of bench/metrics_load.py: 100 concurrent clients on /metrics.

No request may fail, and scraping must go on under the load: every endpoint's last
successful scrape stays within a few intervals of the clock (lower bound, see the bench).
Latency and throughput are measured by the bench, not asserted here.
SPECTAX_LOAD_SECONDS sets the duration (default 5 s; the bench's default is 20 s).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
BENCH = Path(__file__).parent.parent / "bench" / "metrics_load.py"


async def test_metrics_under_100_concurrent_clients() -> None:
    spec = importlib.util.spec_from_file_location("metrics_load", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    seconds = float(os.environ.get("SPECTAX_LOAD_SECONDS", "5"))
    result = await bench.run(clients=100, seconds=seconds, interval=1.0)
    print(result)
    assert result["errors"] == {}
    assert result["requests"] >= 100  # every client was answered; speed is the bench's business
    # Scrapes are delayed by the queue of requests on the event loop, never stopped.
    assert result["scrape_lag_max_seconds"] < 10.0
