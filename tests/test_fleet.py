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
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml
from aiohttp import web

from e2e import Spectax, free_port, run_spectax, value, wait_until, write_config
from promstack import Prometheus, binary
from spectax.config import validate
from spectax.credentials import basic_auth_header
from spectax.endpoint import EndpointMonitor
from spectax.endpoint_config import EndpointConfig
from spectax.observed import Observed
from spectax.simulate import SimulatedFleet, start_simulated_servers
from spectax.simulate.sim_profiles import SimProfile
from spectax.sources.fleet import FleetSource
from spectax.sources.promql import RUNNING, queries
from spectax.store.pending import PendingWrite
from spectax.store.rows import pending_write

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
        metrics = await spectax.metrics()  # the fleet endpoint is served like a scraped one
        assert value(metrics, "spectax_endpoint_up", endpoint=FLEET) == 1
        assert (value(metrics, "spectax_output_tokens_total", endpoint=FLEET) or 0) > 0
        async with aiohttp.ClientSession() as session, session.get(spectax.url + "/") as page:
            landing = await page.text()  # the landing page lists it beside the scraped ones
        assert f'data-endpoint="{FLEET}"' in landing, landing
        assert 'data-endpoint="direct-a"' in landing, landing
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
    first = run_spectax("backfill", "--config", str(config), *span)
    assert first.returncode == 0, first.stderr
    assert "backfill: 4/4 windows" in first.stderr, first.stderr
    backfilled = window_rows(fresh / "state")
    assert backfilled == live, "backfill writes the windows the live daemon wrote"
    again = run_spectax("backfill", "--config", str(config), *span)
    assert again.returncode == 0, again.stderr
    assert window_rows(fresh / "state") == backfilled, "a second run adds nothing"
    # Over the live daemon's own store: the same rows, none twice.
    overlap = run_spectax("backfill", "--config", str(run.workdir / "spectax.yml"), *span)
    assert overlap.returncode == 0, overlap.stderr
    assert window_rows(run.state) == run.rows
    month = datetime.fromtimestamp(run.starts[0], UTC).strftime("%Y-%m")
    report = run_spectax(
        "report", "--config", str(config), "--month", month, "--format", "md", "--out", "-"
    )
    assert report.returncode == 0, report.stderr
    assert FLEET in report.stdout


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


class Gateway:
    """What stands in front of a Prometheus in production: a path prefix, auth, a tenant
    header (Mimir), and, when told, an outage or a partial answer (Thanos, Mimir)."""

    def __init__(self, prometheus: str, authorization: str):
        self.prometheus, self.authorization = prometheus, authorization
        self.mode = "up"  # up | down | partial | empty
        self.seen: list[str] = []  # the queries that reached it
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/prefix/api/v1/query", self._query)
        app.router.add_post("/prefix/api/v1/query_range", self._query)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}/prefix"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _query(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != self.authorization:
            return web.json_response({"status": "error", "error": "unauthorized"}, status=401)
        if request.headers.get("X-Scope-OrgID") != "tenant-1":
            return web.json_response({"status": "error", "error": "no org id"}, status=401)
        if self.mode == "down":
            return web.Response(status=503, text="upstream unavailable")
        form = await request.post()
        self.seen.append(str(form["query"]))
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{self.prometheus}{request.path.removeprefix('/prefix')}", data=dict(form)
            ) as answer,
        ):
            body = await answer.json()
        if self.mode == "empty":  # the fleet's series are gone (every pod deleted)
            body["data"]["result"] = []
        if self.mode == "partial":
            body["warnings"] = ["store 10.0.0.7:10901 did not answer"]
        return web.json_response(body)


@in_module_loop
async def test_fleet_source_through_a_gateway_waits_out_an_outage_and_partial_answers(
    run: Run,
) -> None:
    """Path prefix, basic auth and a tenant header reach the server; an outage and a
    partial answer leave the windows waiting (nothing written, the endpoint down with the
    reason, no secret in it); once the gateway answers whole, the windows that waited are
    read in one pass and equal the live daemon's. The same queries whatever the fleet's
    size (two a counter, one for running requests), and raw reads of odd series only."""
    gateway = Gateway(run.prometheus.url, basic_auth_header("spectax", "s3cret-pw"))
    await gateway.start()
    config = source(gateway.url) | {
        "basic_auth": {"username": "spectax", "password": "s3cret-pw"},
        "headers": {"X-Scope-OrgID": "tenant-1"},
    }
    settings = validate({"scrape_interval": "1s", "window": f"{WINDOW:g}s", "sources": [config]})
    prometheus_source = settings.config.sources[0]
    written: list[PendingWrite] = []

    async def new_monitors(endpoints: Sequence[EndpointConfig]) -> AsyncIterator[EndpointMonitor]:
        for endpoint in endpoints:
            yield EndpointMonitor(endpoint, None, WINDOW)

    def emit(monitor: EndpointMonitor, observed: Observed | None) -> None:
        if observed is not None:
            written.append(pending_write(observed))

    try:
        async with aiohttp.ClientSession() as session:
            fleet = FleetSource(prometheus_source, WINDOW, session, new_monitors, emit)
            fleet.next_end = run.starts[1] + WINDOW
            now = run.starts[-1] + WINDOW + 3.0  # windows 1 to 3 are due
            gateway.mode = "up"
            assert await fleet.read_due(run.starts[1] + WINDOW + 3.0)  # window 1: found
            reads = [list(gateway.seen)]
            monitor = fleet.monitors[FLEET]
            for mode in ("down", "partial"):
                gateway.mode = mode
                assert not await fleet.read_due(now)
                assert fleet.next_end == run.starts[2] + WINDOW, "the windows wait"
                assert not monitor.snapshot.up and monitor.snapshot.last_error
                assert "s3cret-pw" not in monitor.snapshot.last_error
            await asyncio.sleep(1.0)  # the queries cancelled in flight may still arrive
            reads.append(gateway.seen[sum(map(len, reads)) :])
            assert len(written) == 1
            gateway.mode = "up"
            assert await fleet.read_due(now)
            reads.append(gateway.seen[sum(map(len, reads)) :])
            assert monitor.snapshot.up
            gateway.mode = "empty"
            assert await fleet.read_due(now + WINDOW)
            reads.append(gateway.seen[sum(map(len, reads)) :])
            assert not monitor.snapshot.up, "an endpoint without series is down, not stale"
            assert "every replica gone" in (monitor.snapshot.last_error or "")
    finally:
        await gateway.close()
    sent = list(queries(prometheus_source, WINDOW).values())
    got = {(w.endpoint, row["start"].timestamp()): row for w in written for row in w.rows}
    for start in run.starts[1:]:
        row = got[(FLEET, start)]
        live = run.rows[(FLEET, stamp(start))]
        assert {c: row[c] for c in COUNTERS} == {c: live[c] for c in COUNTERS}, start
    # The whole reads (first, up, empty) sent the queries of every series name, whatever the
    # fleet's size; beyond them only raw reads of the odd series (the one restart, in
    # windows 1-2), one per counter at most, naming them by their pods; the partial one
    # stopped before any (the outage's queries never reached the gateway's log).
    fleet_wide = {q for v in sent if not isinstance(v, str) for q in (v.sums, v.odd)}
    for read in (reads[0], reads[2], reads[3]):
        # running requests: raw, over the span read (one window, or two after the outage)
        running = [q for q in read if q.startswith(f"{RUNNING}{{")]
        odd = [q for q in read if q not in fleet_wide and q not in running]
        assert set(read) >= fleet_wide and len(running) == 1, read
        assert all("pod" not in q for q in [*fleet_wide, *running]), read
        assert all('pod=~"' in q for q in odd), odd
        assert len({q.split("{", 1)[0] for q in odd}) == len(odd), "one raw read a counter"
    assert len(reads[0]) > len(fleet_wide) + 1, "window 1's restart was read raw"
    assert len(reads[3]) == len(fleet_wide) + 1, "an answer without series: no raw read"
    assert 1 <= len(reads[1]) <= len(fleet_wide) + 1, "no raw read after a partial answer"


@in_module_loop
async def test_a_restarted_daemon_reads_the_windows_it_missed(run: Run) -> None:
    """The store's history of the fleet ends at the second window (a daemon that died
    then); a new `spectax run` reads from there on, and writes what the live one wrote."""
    state = run.workdir / "resumed"
    state.mkdir()
    port = free_port()
    config = write_config(
        state, port, [], window=f"{WINDOW:g}s", sources=[source(run.prometheus.url)]
    )
    head = ["--from", _iso(run.starts[0]), "--to", _iso(run.starts[1])]
    assert run_spectax("backfill", "--config", str(config), *head).returncode == 0
    spectax = Spectax(config, port)
    await spectax.start()
    try:

        def caught_up() -> bool:
            rows = window_rows(state / "state")
            return all((FLEET, stamp(s)) in rows for s in run.starts)

        await wait_until(caught_up, 20, "the missed windows", [spectax])
    finally:
        assert await spectax.stop() == 0, spectax.log_tail()
    rows = window_rows(state / "state")
    for start in run.starts:
        assert rows[(FLEET, stamp(start))] == run.rows[(FLEET, stamp(start))], start


@in_module_loop
async def test_a_reload_starts_and_stops_reading_a_source(run: Run) -> None:
    """`sources:` changes on reload like `endpoints:` do: a changed source's endpoints are
    found and served, the endpoints it no longer selects leave /metrics."""
    workdir = run.workdir / "reloaded"
    workdir.mkdir()
    port = free_port()
    nothing = {**source(run.prometheus.url), "selector": 'job="none"'}
    config = write_config(workdir, port, [], window=f"{WINDOW:g}s", sources=[nothing])
    spectax = Spectax(config, port)
    await spectax.start()
    try:
        await asyncio.sleep(WINDOW)
        assert value(await spectax.metrics(), "spectax_endpoint_up", endpoint=FLEET) is None
        write_config(workdir, port, [], window=f"{WINDOW:g}s", sources=[source(run.prometheus.url)])
        assert (await spectax.post("/-/reload"))[0] == 200
        await spectax.wait_for(
            lambda m: value(m, "spectax_endpoint_up", endpoint=FLEET) == 1, timeout=3 * WINDOW
        )
        write_config(workdir, port, [], window=f"{WINDOW:g}s", sources=[nothing])
        assert (await spectax.post("/-/reload"))[0] == 200
        await spectax.wait_for(
            lambda m: value(m, "spectax_endpoint_up", endpoint=FLEET) is None, timeout=WINDOW
        )
    finally:
        assert await spectax.stop() == 0, spectax.log_tail()
