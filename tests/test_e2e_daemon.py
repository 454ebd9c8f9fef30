"""End to end: `spectax run` as a real process, scraping simulated vLLM servers over loopback."""

from __future__ import annotations

import asyncio
import re
import resource
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from e2e import Spectax, free_port, stored_windows, value, wait_until, write_config
from spectax.exposition import FAMILIES
from spectax.simulate import DEMO_PROFILES, start_simulated_servers
from spectax.simulate.demo_fleet import demo_endpoints
from spectax.simulate.focus_export import write_focus_export

pytestmark = pytest.mark.e2e
METRICS_DOC = Path(__file__).parent.parent / "docs" / "metrics.md"


@pytest.fixture
async def fleet() -> AsyncIterator[Any]:
    """The demo servers at real speed. At 4x, the engines' latency sums grew 4 simulated
    seconds a real second, and spectax's running requests (the larger of the running gauge
    and the decode and prefill time the engine counted: docs/economics.md) read 4x the
    engine's load once it was steady: chat-creative at ~380 running where it ran ~100, so
    no acceptance paid there. Whether a run met that depended on how long the daemon took
    to close its first window after the fleet started (it failed every time on a slow VM,
    the last landed tree too)."""
    async with await start_simulated_servers(DEMO_PROFILES, speed=1.0) as fleet:
        yield fleet


@pytest.fixture
async def realtime_fleet() -> AsyncIterator[Any]:
    """The demo servers in real time (their clocks are the wall clock), with 2 s cold starts."""
    profiles = {name: replace(p, cold_start_s=2.0) for name, p in DEMO_PROFILES.items()}
    async with await start_simulated_servers(profiles) as fleet:
        yield fleet


@pytest.fixture
async def bad_targets() -> AsyncIterator[dict[str, str]]:
    """A target that never answers, one that answers garbage, one that is far too large."""

    async def hang(request: web.Request) -> web.Response:
        await asyncio.sleep(3600)
        return web.Response(text="")

    async def garbage(request: web.Request) -> web.Response:
        return web.Response(text='vllm:generation_tokens_total{model_name="m"} banana\n')

    async def huge(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        chunk = b"# " + b"x" * 65536 + b"\n"
        for _ in range(200):  # 13 MB, over the 10 MB cap
            await response.write(chunk)
        return response

    app = web.Application()
    app.router.add_get("/hang/metrics", hang)
    app.router.add_get("/garbage/metrics", garbage)
    app.router.add_get("/huge/metrics", huge)
    runner = web.AppRunner(app, shutdown_timeout=0.5)  # do not wait for the hanging handler
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    base = f"http://127.0.0.1:{port}"
    yield {name: f"{base}/{name}/metrics" for name in ("hang", "garbage", "huge")}
    await runner.shutdown()
    await runner.cleanup()


def scraped_at(m: dict[Any, float], endpoint: str) -> float:
    """When spectax last scraped `endpoint`, on its own clock (0 before the first scrape)."""
    return value(m, "spectax_last_scrape_success_timestamp_seconds", endpoint=endpoint) or 0.0


def speedups_present(m: dict[Any, float]) -> bool:
    return all(
        value(m, "spectax_speedup_ratio", endpoint=e, method="modeled") is not None
        for e in ("code-assistant", "chat-creative")
    )


async def test_daemon_finds_the_tax_and_the_payoff(tmp_path, fleet, bad_targets) -> None:
    port = free_port()
    endpoints = demo_endpoints(dict(fleet.urls), DEMO_PROFILES)
    endpoints += [{"name": name, "url": url} for name, url in bad_targets.items()]
    window_s, scrape_s = 6.0, 1.0
    spectax = Spectax(write_config(tmp_path, port, endpoints, window="6s"), port)
    await spectax.start()
    try:
        m = await spectax.wait_for(speedups_present)
        # The physics of the simulator, read back through real HTTP and the economics:
        assert value(m, "spectax_speedup_ratio", endpoint="chat-creative", method="modeled") < 1
        assert value(m, "spectax_speedup_ratio", endpoint="code-assistant", method="modeled") > 1
        assert value(m, "spectax_speculation_savings_usd_per_hour", endpoint="chat-creative") < 0
        assert value(m, "spectax_speculation_savings_usd_per_hour", endpoint="code-assistant") > 0
        assert value(m, "spectax_acceptance_ratio", endpoint="chat-control") is None
        creative_alpha = value(m, "spectax_acceptance_ratio", endpoint="chat-creative")
        creative_bar = value(m, "spectax_breakeven_acceptance_ratio", endpoint="chat-creative")
        assert creative_alpha < creative_bar
        # Against its control the tax shows in measured time per output token too, once the
        # 6 s window has left the start-up ramp (96 prompts prefilling at once) behind. The
        # first measured figure still spans the ramp; a window and a scrape later, counted in
        # spectax's own scrapes of both sides (a loaded machine scrapes late), the window
        # starts after that figure, past the ramp.
        m = await spectax.wait_for(
            lambda m: value(m, "spectax_speedup_ratio", endpoint="chat-creative", method="measured")
        )
        pair = ("chat-creative", "chat-control")
        ramp = {e: scraped_at(m, e) for e in pair}
        # At real speed a window may finish too few requests to measure: the first measured
        # figure past the ramp is the one judged.
        m = await spectax.wait_for(
            lambda m: (
                all(scraped_at(m, e) >= ramp[e] + window_s + scrape_s for e in pair)
                and value(m, "spectax_speedup_ratio", endpoint="chat-creative", method="measured")
                is not None
            )
        )
        assert value(m, "spectax_speedup_ratio", endpoint="chat-creative", method="measured") < 1
        assert (
            value(m, "spectax_speedup_ratio", endpoint="code-assistant", method="measured") is None
        )

        # Bad targets fail alone, each for its own reason, without delaying the others.
        m = await spectax.wait_for(
            lambda m: value(m, "spectax_scrape_failures_total", endpoint="hang", reason="timeout")
        )
        for name, reason in (("hang", "timeout"), ("garbage", "parse"), ("huge", "too_large")):
            assert value(m, "spectax_endpoint_up", endpoint=name) == 0
            assert value(m, "spectax_scrape_failures_total", endpoint=name, reason=reason) >= 1
        now = time.time()
        for name in fleet.urls:
            assert value(m, "spectax_endpoint_up", endpoint=name) == 1
            last = value(m, "spectax_last_scrape_success_timestamp_seconds", endpoint=name)
            assert now - last < 2.5, f"{name} fell behind its 1 s schedule"
    finally:
        assert await spectax.stop() == 0
    log = spectax.log
    assert "Traceback" not in log
    assert log.count("endpoint hang: scrape failed") == 1  # logged once, not every scrape


async def test_restart_keeps_the_spend_counter(tmp_path, realtime_fleet) -> None:
    fleet = realtime_fleet
    port = free_port()
    # A simulated, already invoiced bill of the control (issue 4), for the billing families.
    bill = write_focus_export(tmp_path / "focus", "chat-control", Decimal("2.5"))
    endpoints = demo_endpoints(dict(fleet.urls), DEMO_PROFILES)
    for endpoint in endpoints:  # an objective, for spectax_latency_slo_seconds
        if endpoint["name"] == "chat-creative":
            endpoint["latency_slo"] = {"metric": "tpot", "quantile": 0.99, "seconds": 0.1}
        if endpoint["name"] == "code-assistant":  # its K, 4, as a schedule: the boundary gauge
            endpoint["speculation"] = {**endpoint["speculation"], "schedule": [[1, 1024, 4]]}
    config = write_config(tmp_path, port, endpoints, window="6s", billing=[bill])
    first = Spectax(config, port)
    await first.start()

    def spend(m: dict[Any, float]) -> float:
        return value(m, "spectax_spend_usd_total", endpoint="code-assistant") or 0.0

    m = await first.wait_for(lambda m: spend(m) > 0)
    # The counter to carry over holds a closed window in the store and the open one
    # (written at the stop). The closed one has served tokens: the load curves the second
    # run makes as it starts (then every 5 minutes) come from it, and a first window cut
    # short by the start, with none, gives no curve (CI, loaded: 40 s without one).
    await wait_until(
        lambda: stored_windows(tmp_path / "state", "code-assistant")[1] > 0,
        20,
        "a closed window of code-assistant with output tokens in the store",
        [first],
    )
    before = spend(await first.metrics())
    assert await first.stop() == 0

    second = Spectax(config, port)
    await second.start()
    try:
        m = await second.wait_for(
            lambda m: value(m, "spectax_endpoint_up", endpoint="code-assistant")
        )
        assert spend(m) >= before  # continues from the store; never back to 0
        m = await second.wait_for(lambda m: spend(m) > before)

        # A cold start of an engine: counted once, timed, priced (serverless), others untouched.
        fleet.restart("chat-creative")
        m = await second.wait_for(
            lambda m: value(m, "spectax_cold_starts_total", endpoint="chat-creative") == 1
        )
        seconds = value(m, "spectax_cold_start_duration_seconds", endpoint="chat-creative")
        assert 2 <= seconds < 4  # 2 s to load, plus up to one 1 s scrape interval
        price = value(m, "spectax_gpu_cost_usd_per_hour", endpoint="chat-creative")
        cost = value(m, "spectax_cold_start_cost_usd_total", endpoint="chat-creative")
        assert cost == pytest.approx(seconds * price / 3600, rel=1e-6)
        assert value(m, "spectax_cold_starts_total", endpoint="code-assistant") == 0

        m = await second.wait_for(lambda m: value(m, "spectax_billing_drift_ratio") is not None)
        m = await second.wait_for(  # the load curves, made at start of the first run's windows
            lambda m: value(m, "spectax_load_crossover_running_requests", endpoint="code-assistant")
        )
        # Now every family has had its occasion: docs/metrics.md's table is what is served.
        served = {re.sub(r"(_total|_created)$", "", name) for name, _ in m}
        documented = set(re.findall(r"^\| `(spectax_[a-z_]+)` \|", METRICS_DOC.read_text(), re.M))
        assert documented == set(FAMILIES)
        assert {re.sub(r"_total$", "", n) for n in documented} == served
    finally:
        assert await second.stop() == 0
    assert "resuming from" in second.log


async def test_the_readme_demo_command_shows_the_tax(tmp_path) -> None:
    """`spectax demo`, as a newcomer runs it (only the port moved): figures within seconds."""
    port = free_port()
    demo = Spectax(tmp_path / "unused.yml", port)
    await demo.start_demo(tmp_path, listen_flag="--listen")
    try:
        m = await demo.wait_for(speedups_present, timeout=60)
        assert value(m, "spectax_speedup_ratio", endpoint="chat-creative", method="modeled") < 1
        assert value(m, "spectax_speedup_ratio", endpoint="code-assistant", method="modeled") > 1
    finally:
        assert await demo.stop() == 0
    assert f"http://127.0.0.1:{port}/metrics" in demo.log  # it says where to look
    assert (tmp_path / "spectax-state" / "spectax.sqlite").exists()  # the embedded default


async def test_spectax_lifts_its_open_files_limit(tmp_path: Path) -> None:
    """Started with the usual soft limit of open files far below the hard one (a socket per
    target does not fit in 1,024 at fleet scale), spectax raises it to the hard limit."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard <= 256:
        pytest.skip(f"hard limit {hard}: nothing to lift")
    port = free_port()
    config = write_config(
        tmp_path, port, [{"name": "gone", "url": f"http://127.0.0.1:{port}/x"}], window="6s"
    )
    spectax = Spectax(config, port)
    await spectax.start(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)))
    try:
        await spectax.wait_for(lambda m: value(m, "spectax_endpoint_up", endpoint="gone") == 0)
        assert spectax.process is not None
        limits = await asyncio.to_thread(Path(f"/proc/{spectax.process.pid}/limits").read_text)
        line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
        assert line.split()[3:5] == [str(hard), str(hard)], line
    finally:
        assert await spectax.stop() == 0
