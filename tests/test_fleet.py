"""Fleet mode on real parts: a real Prometheus (Debian package) scrapes two simulated vLLM
replicas of one model; one `spectax run` scrapes the replicas directly (`direct-a`,
`direct-b`) and, side by side, reads the same replicas from Prometheus as one fleet
endpoint (`fleet.<model>`, endpoint_labels [model_name]). Their stored windows must agree
exactly on every counter, summed over the replicas, across a vLLM restart of one replica
and the disappearance of the other. Then `spectax backfill` reads the same span from
Prometheus into a fresh store and must write the windows the live daemon wrote, adding
nothing when run twice or over the live daemon's windows, and `spectax report` must work
on what it wrote.

How the two readers can agree to the token: they sample at different instants, so the
simulated traffic runs only in the middle of each window and is frozen for FREEZE s on
each side of every boundary (`fleet.speed = 0`); the last sample before a boundary then
holds the same values for both. The restart and the disappearance happen in a freeze,
after both readers took the values before them.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from e2e import Spectax, free_port, value, wait_until, write_config
from promstack import Prometheus, binary
from spectax.simulate import SimulatedFleet, start_simulated_servers
from spectax.simulate.profiles import SimProfile

pytestmark = pytest.mark.e2e
in_module_loop = pytest.mark.asyncio(loop_scope="module")

WINDOW = 8.0
FREEZE = 3.0  # s of frozen traffic on each side of every boundary (1 s scrapes)
# When in a freeze the restart and the disappearance happen: both readers (1 s scrapes)
# have sampled in the freeze before, and sample again before the boundary after.
EVENT = FREEZE - 1.4
MODEL = "llama-fleet"
FLEET = f"fleet.{MODEL}"
DIRECT = ("direct-a", "direct-b")
COUNTERS = (
    "output_tokens",
    "prompt_tokens",
    "requests_finished",
    "drafts",
    "draft_tokens",
    "accepted_tokens",
    "iteration_tokens_sum",
    "iteration_tokens_count",
    "inter_token_latency_count",
    "time_per_output_token_count",
)
REPLICA = SimProfile(
    model_name=MODEL, num_speculative_tokens=3, concurrency=4, cold_start_s=0.0, seed=7
)


def source(prometheus_url: str) -> dict[str, Any]:
    return {
        "type": "prometheus",
        "url": prometheus_url,
        "selector": 'job="vllm"',
        "endpoint_labels": ["model_name"],
        "name_prefix": "fleet.",
        "delay": "2s",
        "lookback": "10s",
        "endpoint": {"gpu": "H100 SXM", "price": {"usd_per_hour": 2.5}},
    }


def window_rows(state: Path) -> dict[tuple[str, str], dict[str, float]]:
    """(endpoint, start) -> the counters and restarts of its window rows, summed over models."""
    uri = f"file:{state / 'spectax.sqlite'}?mode=ro"
    columns = ", ".join(f"SUM({c})" for c in (*COUNTERS, "restarts"))
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        rows = db.execute(
            f"SELECT endpoint, start, COUNT(*), {columns} FROM windows GROUP BY endpoint, start"
        ).fetchall()
    return {
        (endpoint, start): dict(zip(("rows", *COUNTERS, "restarts"), rest, strict=True))
        for endpoint, start, *rest in rows
    }


async def freeze_near_boundaries(fleet: SimulatedFleet) -> None:
    """Traffic only in the middle of each window."""
    while True:
        phase = time.time() % WINDOW
        fleet.speed = 1.0 if FREEZE <= phase < WINDOW - FREEZE else 0.0
        await asyncio.sleep(0.02)


async def sleep_until(t: float) -> None:
    await asyncio.sleep(max(0.0, t - time.time()))


@dataclass
class Run:
    workdir: Path
    prometheus: Prometheus
    state: Path
    starts: list[float]  # the compared windows' starts
    rows: dict[tuple[str, str], dict[str, float]]


def stamp(t: float) -> str:
    """A window start as the SQLite store spells it."""
    return datetime.fromtimestamp(t, UTC).replace(tzinfo=None).isoformat(sep=" ") + ".000000"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def run(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Run]:
    binary("prometheus")
    workdir = tmp_path_factory.mktemp("fleet")
    fleet = await start_simulated_servers({"a": REPLICA, "b": replace(REPLICA, seed=8)})
    freezer = asyncio.create_task(freeze_near_boundaries(fleet))
    targets = [
        {"targets": [url.removeprefix("http://")], "labels": {"pod": pod}}
        for pod, url in fleet.urls.items()
    ]
    prometheus = Prometheus(
        workdir / "prometheus",
        {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [{"job_name": "vllm", "static_configs": targets}],
        },
    )
    await prometheus.start()
    spectax: Spectax | None = None
    try:
        await prometheus.wait_ready()

        async def both_scraped() -> bool:
            return len(await prometheus.series('vllm:generation_tokens_total{job="vllm"}')) == 2

        await wait_until(both_scraped, 30, "Prometheus to scrape both replicas", [prometheus])
        port = free_port()
        endpoints = [{"name": f"direct-{pod}", "url": url} for pod, url in fleet.urls.items()]
        config = write_config(
            workdir,
            port,
            endpoints,
            window=f"{WINDOW:g}s",
            sources=[source(prometheus.url)],
        )
        spectax = Spectax(config, port)
        await spectax.start()
        await spectax.wait_for(
            lambda m: all(value(m, "spectax_endpoint_up", endpoint=n) == 1 for n in DIRECT)
        )
        first = -(-time.time() // WINDOW) * WINDOW  # the first window both readers see whole
        starts = [first + i * WINDOW for i in range(4)]
        # In the freeze before the end of the second window: replica a restarts (vLLM
        # reloads: every counter from zero, a new process_start_time_seconds).
        await sleep_until(starts[2] - EVENT)
        fleet.restart("a")
        # In the freeze before the end of the third: replica b is gone (its pod deleted).
        await sleep_until(starts[3] - EVENT)
        await fleet._runners[1].cleanup()
        await sleep_until(starts[3] + WINDOW + 2.0 + 1.0)  # the last window, read from Prometheus

        def fleet_has_the_last_window() -> bool:
            return (FLEET, stamp(starts[-1])) in window_rows(workdir / "state")

        await wait_until(fleet_has_the_last_window, 15, "the fleet's last window", [spectax])
        assert await spectax.stop() == 0, spectax.log_tail()
        yield Run(workdir, prometheus, workdir / "state", starts, window_rows(workdir / "state"))
    finally:
        freezer.cancel()
        if spectax is not None and spectax.process and spectax.process.returncode is None:
            await spectax.kill()
        await prometheus.stop()
        await fleet.close()


@in_module_loop
async def test_fleet_windows_equal_direct_scraping_summed_over_replicas(run: Run) -> None:
    """Counter sums agree to the token in every window, across a restart of replica a and
    the disappearance of replica b (whose last counts stay, and are no reset)."""
    for i, start in enumerate(run.starts):
        key = stamp(start)
        fleet = run.rows.get((FLEET, key))
        assert fleet is not None, f"no fleet window at {key}: {sorted(run.rows)}"
        direct = [run.rows[(name, key)] for name in DIRECT if (name, key) in run.rows]
        for counter in COUNTERS:
            summed = sum(row[counter] or 0 for row in direct)
            assert fleet[counter] == summed, (i, counter, fleet, direct)
        # Traffic in every window but the one after the restart (a's clients come back
        # over 5 s of simulated time, 2 s of it in a window).
        assert fleet["output_tokens"] > 0 or i == 2, (i, fleet)
        restarts = sum(row["restarts"] for row in direct)
        assert fleet["restarts"] == restarts == (1 if i == 1 else 0), (i, fleet, direct)
    gone = run.rows.get(("direct-b", stamp(run.starts[3])))
    assert gone is None or gone["output_tokens"] == 0, "replica b is gone in the last window"


@in_module_loop
async def test_backfill_writes_the_windows_the_live_daemon_wrote(run: Run) -> None:
    fresh = run.workdir / "fresh"
    fresh.mkdir()
    config = fresh / "spectax.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "scrape_interval": "1s",
                "window": f"{WINDOW:g}s",
                "state_directory": str(fresh / "state"),
                "sources": [source(run.prometheus.url)],
            }
        )
    )
    span = ["--from", _iso(run.starts[0]), "--to", _iso(run.starts[-1] + WINDOW)]
    live = {k: v for k, v in run.rows.items() if k[0] == FLEET and k[1] in map(stamp, run.starts)}
    first = _spectax("backfill", "--config", str(config), *span)
    assert first.returncode == 0, first.stderr
    assert "backfill: 4/4 windows" in first.stderr, first.stderr
    backfilled = window_rows(fresh / "state")
    assert backfilled == live, "backfill writes the windows the live daemon wrote"
    again = _spectax("backfill", "--config", str(config), *span)
    assert again.returncode == 0, again.stderr
    assert window_rows(fresh / "state") == backfilled, "a second run adds nothing"
    # Over the live daemon's own store: the same rows, none twice.
    overlap = _spectax("backfill", "--config", str(run.workdir / "spectax.yml"), *span)
    assert overlap.returncode == 0, overlap.stderr
    assert window_rows(run.state) == run.rows
    month = datetime.fromtimestamp(run.starts[0], UTC).strftime("%Y-%m")
    report = _spectax(
        "report", "--config", str(config), "--month", month, "--format", "md", "--out", "-"
    )
    assert report.returncode == 0, report.stderr
    assert FLEET in report.stdout


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def _spectax(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spectax", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
