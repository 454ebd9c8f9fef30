"""Tests for the simulated vLLM server (spectax.simulate)."""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from spectax.engines import ENGINES, EngineSample, get_parser
from spectax.simulate import (
    DEMO_PROFILES,
    METRICS_CONTENT_TYPE,
    SimProfile,
    SimulatedVllm,
    start_simulated_servers,
)
from spectax.simulate.state import build_1_2_5_buckets
from spectax.simulate.steady import binomial
from spectax.simulate.textformat import format_value

FIXTURES = Path(__file__).parent / "fixtures" / "vllm-0.32.0"
T0 = 1_800_000_000.0

REQUIRED = [
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
    "vllm:generation_tokens",
    "vllm:prompt_tokens",
    "vllm:request_success",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:iteration_tokens_total",
    "vllm:inter_token_latency_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:time_to_first_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "process_start_time_seconds",
]

CREATIVE = DEMO_PROFILES["chat-creative"]
CONTROL = DEMO_PROFILES["chat-control"]
CODE = DEMO_PROFILES["code-assistant"]


# --------------------------------------------------------------------------- helpers


def families(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """family name -> (type, label names over all its samples)."""
    out: dict[str, tuple[str, frozenset[str]]] = {}
    for fam in text_string_to_metric_families(text):
        labels: set[str] = set()
        for s in fam.samples:
            labels |= set(s.labels)
        out[fam.name] = (fam.type, frozenset(labels))
    return out


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(
    page: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    """Sum of the samples called `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in page.items() if n == name and want <= ls)


def buckets(text: str) -> dict[str, list[str]]:
    """histogram family -> its `le` bounds, in page order."""
    return {
        fam.name: [s.labels["le"] for s in fam.samples if s.name.endswith("_bucket")]
        for fam in text_string_to_metric_families(text)
        if fam.type == "histogram"
    }


def modelled_speedup(
    g: float, a: float, dt: float, b: float, c: float, ridge: float = 32.0
) -> float:
    """S = T_ns / T_spec from ECONOMICS.md §3 (own implementation, in units of b)."""
    r = ridge / b
    t_spec = (g - a) * r + (g - a + dt) + c * dt * (r + 1)
    t_ns = g * (r + 1)
    return t_ns / t_spec


class Scraper:
    """Advance a sim in scrape-sized steps, keeping the running-gauge samples."""

    def __init__(self, profile: SimProfile) -> None:
        self.sim = SimulatedVllm(profile, T0)
        self.running: list[float] = []

    def run(
        self, seconds: float, every: float = 5.0, fast: bool = False
    ) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        for _ in range(round(seconds / every)):
            self.sim.advance(every, fast=fast)
            text = self.sim.render()
            gauge = "\n".join(
                ln for ln in text.splitlines() if ln.startswith("vllm:num_requests_running")
            )
            self.running.append(value(samples(gauge), "vllm:num_requests_running"))
        return samples(text)


def tpot(page: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> float:
    return value(page, "vllm:request_time_per_output_token_seconds_sum") / value(
        page, "vllm:request_time_per_output_token_seconds_count"
    )


# --------------------------------------------------------------------------- page format


@pytest.mark.parametrize(
    ("profile", "fixture"),
    [
        (CREATIVE, "spec_draft_3_after.txt"),
        (CODE, "spec_ngram_3_after.txt"),
        (CONTROL, "nospec_3_after.txt"),
    ],
)
def test_page_has_the_fixture_families_labels_and_buckets(
    profile: SimProfile, fixture: str
) -> None:
    sim = SimulatedVllm(profile, T0)
    sim.advance(20.0)
    text = sim.render()
    ours = families(text)
    real_text = (FIXTURES / fixture).read_text()
    real = families(real_text)

    def vllm(f: dict[str, tuple[str, frozenset[str]]]) -> dict[str, tuple[str, frozenset[str]]]:
        return {k: v for k, v in f.items() if k.startswith("vllm:")}

    assert vllm(ours) == vllm(real)  # same names, types and label names
    for fam in REQUIRED:
        if fam.startswith("vllm:spec_decode") and not profile.speculative:
            assert fam not in ours
        else:
            assert fam in ours, fam
    for fam in (
        "process_start_time_seconds",
        "process_cpu_seconds",
        "python_info",
        "python_gc_objects_collected",
    ):
        assert ours[fam] == real[fam]
    ours_b, real_b = buckets(text), buckets(real_text)
    for name, bounds in real_b.items():
        if name.startswith("vllm:"):
            assert ours_b[name] == bounds, name


def test_page_text_layout_matches_vllm() -> None:
    sim = SimulatedVllm(CREATIVE, T0)
    sim.advance(30.0)
    lines = sim.render().splitlines()
    real = (FIXTURES / "spec_draft_3_after.txt").read_text().splitlines()

    def heads(ls: list[str]) -> list[str]:
        return [ln for ln in ls if ln.startswith("# TYPE vllm:")]

    assert heads(lines) == heads(real)  # same families, same order
    m = 'engine="0",model_name="llama-3.1-8b-instruct"'
    assert f"vllm:spec_decode_num_drafts_total{{{m}}}" in "\n".join(lines)
    assert any(
        ln.startswith('vllm:request_success_total{engine="0",finished_reason="stop",model_name=')
        for ln in lines
    )
    assert any(
        ln.startswith('vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name=')
        for ln in lines
    )
    assert any(ln.startswith("vllm:spec_decode_num_drafts_created{") for ln in lines)
    assert any(ln.startswith("process_start_time_seconds 1.") for ln in lines)


def test_histograms_are_consistent() -> None:
    sim = SimulatedVllm(CREATIVE, T0)
    sim.advance(120.0, fast=False)
    sim.advance(3600.0, fast=True)
    for fam in text_string_to_metric_families(sim.render()):
        if fam.type != "histogram":
            continue
        bs = [s.value for s in fam.samples if s.name.endswith("_bucket")]
        count = next(s.value for s in fam.samples if s.name.endswith("_count"))
        assert bs == sorted(bs), fam.name
        assert bs[-1] == count, fam.name
        assert all(b == int(b) for b in bs), fam.name


def test_iteration_tokens_sum_is_prompt_plus_generation() -> None:
    # As on the real page (spec_draft_3_after: 2992 = 1300 + 1692).
    sim = SimulatedVllm(CREATIVE, T0)
    sim.advance(60.0, fast=False)
    page = samples(sim.render())
    assert value(page, "vllm:iteration_tokens_total_sum") == (
        value(page, "vllm:prompt_tokens_total") + value(page, "vllm:generation_tokens_total")
    )
    # inter-token latency is observed once per decode request-step == per draft
    assert value(page, "vllm:inter_token_latency_seconds_count") == value(
        page, "vllm:spec_decode_num_drafts_total"
    )


def test_format_value_matches_prometheus_client() -> None:
    rng = random.Random(5)
    vals = [0.0, 1.0, 0.5, 1e-6, 999999.0, 1e6, 1234567.0, 1.79599630075e9, 2.5e10]
    vals += [rng.random() * 10 ** rng.randint(-6, 12) for _ in range(2000)]
    vals += [float(rng.randrange(10 ** rng.randint(1, 14))) for _ in range(2000)]
    for v in vals:
        assert format_value(v) == floatToGoString(v)  # type: ignore[no-untyped-call]
    assert format_value(math.inf) == "+Inf"


def test_bucket_rule_matches_vllm() -> None:
    assert build_1_2_5_buckets(1024) == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
    assert build_1_2_5_buckets(20) == [1, 2, 5, 10, 20]


# --------------------------------------------------------------------------- counters


SPEC_COUNTERS = [
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
]
COUNTERS = [
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:request_success_total",
    "vllm:iteration_tokens_total_count",
    "vllm:inter_token_latency_seconds_count",
    "vllm:request_time_per_output_token_seconds_count",
]


def test_counters_are_monotonic_and_restart_resets_them() -> None:
    sim = SimulatedVllm(CODE, T0)
    prev: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for i, (dt, fast) in enumerate(
        [(5, False), (7, False), (600, True), (3, False), (0.01, False), (86400, True), (10, False)]
    ):
        sim.advance(dt, fast=fast)
        page = samples(sim.render())
        keys = [k for k in page if k[0] in COUNTERS + SPEC_COUNTERS]
        for k in keys:
            assert page[k] >= prev.get(k, 0.0), (i, k)
        prev = page
    assert value(prev, "vllm:generation_tokens_total") > 0
    start = value(prev, "process_start_time_seconds")
    created = value(prev, "vllm:generation_tokens_created")

    sim.restart()
    page = samples(sim.render())
    for name in COUNTERS + SPEC_COUNTERS:
        assert value(page, name) == 0.0, name
    assert value(page, "process_start_time_seconds") > start
    assert value(page, "process_start_time_seconds") == pytest.approx(sim.now, abs=0.01)
    assert value(page, "vllm:generation_tokens_created") > created
    # No traffic while the engine loads; then it serves again.
    sim.advance(CODE.cold_start_s - 1.0, fast=False)
    assert value(samples(sim.render()), "vllm:generation_tokens_total") == 0.0
    sim.advance(10.0, fast=False)
    assert value(samples(sim.render()), "vllm:generation_tokens_total") > 0.0
    assert sim.restarts == 1


def test_spec_counters_follow_vllm_identities() -> None:
    sim = SimulatedVllm(CODE, T0)
    sim.advance(300.0, fast=False)
    t = sim.totals()
    k = CODE.num_speculative_tokens
    assert t.draft_tokens == k * t.drafts
    assert t.accepted == sum(t.accepted_per_pos)
    assert len(t.accepted_per_pos) == k
    # Every decode request-step emits 1 + accepted (minus what overshoots the end), and
    # each request's first token comes from its prefill step.
    assert t.generation_tokens <= t.drafts + t.accepted + t.requests_finished + t.running
    assert t.generation_tokens > 0.97 * (t.drafts + t.accepted)


@pytest.mark.parametrize("fast", [False, True])
def test_per_position_acceptance(fast: bool) -> None:
    sim = SimulatedVllm(CODE, T0)
    sim.advance(600.0, fast=fast)
    t = sim.totals()
    per_pos = t.accepted_per_pos
    assert list(per_pos) == sorted(per_pos, reverse=True)
    for k, pk in enumerate(CODE.acceptance_per_position):
        assert per_pos[k] / t.drafts == pytest.approx(pk, abs=0.01)
    assert t.accepted / t.draft_tokens == pytest.approx(CODE.expected_acceptance_ratio, abs=0.01)


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    k=st.integers(min_value=0, max_value=6),
    p0=st.floats(min_value=0.0, max_value=1.0),
    decay=st.floats(min_value=0.0, max_value=1.0),
    clients=st.integers(min_value=0, max_value=12),
    think=st.sampled_from([0.0, 0.5]),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_invariants_hold_for_any_profile(
    k: int, p0: float, decay: float, clients: int, think: float, seed: int
) -> None:
    prof = SimProfile(
        model_name="m",
        num_speculative_tokens=k,
        acceptance_p0=p0,
        acceptance_decay=decay,
        draft_cost_ratio=0.05,
        concurrency=clients,
        max_num_seqs=8,
        think_time_s=think,
        prompt_len_mean=50,
        output_len_mean=30,
        max_tokens=64,
        seed=seed,
    )
    sim = SimulatedVllm(prof, T0)
    sim.advance(20.0, fast=False)
    sim.advance(500.0, fast=True)
    sim.advance(5.0, fast=False)
    t = sim.totals()
    assert t.draft_tokens == k * t.drafts
    assert t.accepted == sum(t.accepted_per_pos)
    assert list(t.accepted_per_pos) == sorted(t.accepted_per_pos, reverse=True)
    assert t.running <= 8
    fams = families(sim.render())
    assert ("vllm:spec_decode_num_drafts" in fams) == (k > 0)
    if clients == 0:
        assert t.generation_tokens == 0


def test_binomial_sampler() -> None:
    rng = random.Random(3)
    assert binomial(rng, 10**6, 5e-324) == 0  # subnormal p: no overflow
    assert binomial(rng, 10, 1.0) == 10
    assert binomial(rng, 0, 0.5) == 0
    for n, p in [(200, 0.05), (10**6, 0.3), (40, 0.9)]:
        xs = [binomial(rng, n, p) for _ in range(3000)]
        assert sum(xs) / len(xs) == pytest.approx(n * p, rel=0.03)
        assert all(0 <= x <= n for x in xs)


def test_deterministic_given_seed() -> None:
    a, b = SimulatedVllm(CREATIVE, T0), SimulatedVllm(CREATIVE, T0)
    for s in (a, b):
        s.advance(30.0, fast=False)
        s.advance(3600.0, fast=True)
    assert a.render() == b.render()
    c = SimulatedVllm(replace(CREATIVE, seed=CREATIVE.seed + 1), T0)
    c.advance(30.0, fast=False)
    c.advance(3600.0, fast=True)
    assert c.render() != a.render()


# --------------------------------------------------------------------------- fast vs exact


@pytest.mark.parametrize("profile", [CREATIVE, CONTROL, CODE], ids=lambda p: p.model_name)
def test_fast_path_agrees_with_exact_path(profile: SimProfile) -> None:
    span = 900.0
    exact = SimulatedVllm(profile, T0)
    exact.advance(span, fast=False)
    fast = SimulatedVllm(profile, T0)
    fast.advance(span, fast=True)
    e, f = exact.totals(), fast.totals()
    if profile.speculative:
        assert f.accepted / f.draft_tokens == pytest.approx(e.accepted / e.draft_tokens, rel=0.02)
        assert f.drafts == pytest.approx(e.drafts, rel=0.03)
    assert f.generation_tokens == pytest.approx(e.generation_tokens, rel=0.03)
    assert f.prompt_tokens == pytest.approx(e.prompt_tokens, rel=0.05)
    assert f.requests_finished == pytest.approx(e.requests_finished, rel=0.08)
    assert f.engine_steps == pytest.approx(e.engine_steps, rel=0.03)
    assert f.itl_sum / f.itl_count == pytest.approx(e.itl_sum / e.itl_count, rel=0.03)
    assert f.tpot_sum / f.tpot_count == pytest.approx(e.tpot_sum / e.tpot_count, rel=0.05)
    assert f.running == e.running or abs(f.running - e.running) <= 3


def test_a_month_for_three_endpoints_is_cheap() -> None:
    # The demo's first three vLLM endpoints, as this test has always timed them (the fast path
    # is the same for every engine; only the pages differ).
    vllm = ("code-assistant", "chat-creative", "chat-control")
    sims = [SimulatedVllm(DEMO_PROFILES[name], T0) for name in vllm]
    t0 = time.process_time()
    for _ in range(30 * 24 * 12):  # 5-minute scrapes
        for s in sims:
            s.advance(300.0, fast=True)
    elapsed = time.process_time() - t0
    assert elapsed < 3.0
    t = sims[1].totals()
    # ~540 tokens/s for 30 days
    assert t.generation_tokens == pytest.approx(540 * 30 * 86400, rel=0.05)


def test_diurnal_load_moves_the_batch() -> None:
    prof = replace(CREATIVE, concurrency=60, diurnal_amplitude=0.8)
    sc = Scraper(prof)
    sc.run(86400.0, every=1800.0, fast=True)
    assert min(sc.running) < 25
    assert max(sc.running) > 80


# --------------------------------------------------------------------------- economics


def test_own_speedup_formula_reproduces_economics_examples() -> None:
    rows = [
        (600, 800, 1, 2.154047),
        (600, 800, 64, 1.027397),
        (600, 800, 128, 0.925926),
        (400, 1000, 8, 1.176471),
        (400, 1000, 32, 0.869565),
    ]
    for a, dt, b, s in rows:
        assert modelled_speedup(1000, a, dt, b, 0.05) == pytest.approx(s, abs=1e-6)


def _modelled_s(profile: SimProfile, seconds: float) -> tuple[float, float]:
    sc = Scraper(profile)
    page = sc.run(seconds)
    g = value(page, "vllm:generation_tokens_total")
    a = value(page, "vllm:spec_decode_num_accepted_tokens_total")
    dt = value(page, "vllm:spec_decode_num_draft_tokens_total")
    b = sum(sc.running) / len(sc.running)
    return modelled_speedup(g, a, dt, b, profile.draft_cost_ratio), b


def test_speculation_pays_for_code_assistant() -> None:
    s, b = _modelled_s(CODE, 300.0)
    assert b == pytest.approx(2.0, abs=0.3)
    assert s >= 1.5


def test_speculation_is_a_tax_for_creative_chat() -> None:
    s, b = _modelled_s(CREATIVE, 240.0)
    assert b >= 90
    assert s <= 0.9


def test_measured_time_per_output_token_shows_the_same_physics() -> None:
    # Saturated chat: the control (no speculation) is faster per output token.
    creative = Scraper(CREATIVE).run(300.0, every=60.0)
    control = Scraper(CONTROL).run(300.0, every=60.0)
    assert value(creative, "vllm:num_requests_waiting") > 0
    assert tpot(control) / tpot(creative) < 0.9  # measured speedup < 1: a tax
    # Low concurrency: speculation beats the same endpoint without it.
    code = Scraper(CODE).run(300.0, every=60.0)
    code_ns = Scraper(CODE.without_speculation()).run(300.0, every=60.0)
    assert tpot(code_ns) / tpot(code) > 1.5


# --------------------------------------------------------------------------- servers


async def test_servers_serve_evolving_pages_over_loopback() -> None:
    # speed 100: 0.3 s of wall time is 30 s of traffic (chat's first prefills take seconds)
    fleet = await start_simulated_servers(DEMO_PROFILES, speed=100.0)
    async with fleet, aiohttp.ClientSession() as session:
        assert set(fleet.urls) == set(DEMO_PROFILES)
        ports = {url.rsplit(":", 1)[1] for url in fleet.urls.values()}
        assert len(ports) == len(DEMO_PROFILES)
        first: dict[str, EngineSample] = {}
        raw: dict[str, dict[tuple[str, frozenset[tuple[str, str]]], float]] = {}
        for name, url in fleet.urls.items():
            engine = fleet.sims[name].profile.serving_engine
            assert url.startswith("http://127.0.0.1:")
            async with session.get(url + "/health") as resp:
                assert resp.status == 200
            async with session.get(url + ENGINES[engine].metrics_path) as resp:
                assert resp.status == 200
                if engine == "vllm":
                    assert resp.headers["Content-Type"] == METRICS_CONTENT_TYPE
                text = await resp.text()
                first[name] = get_parser(engine)(text)
                assert first[name].engine == engine
                raw[name] = samples(text)
        await asyncio.sleep(0.3)
        second: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for name, url in fleet.urls.items():
            engine = fleet.sims[name].profile.serving_engine
            async with session.get(url + ENGINES[engine].metrics_path) as resp:
                text = await resp.text()
            second = samples(text) if name == "code-assistant" else second
            (before_m,), (after_m,) = (
                first[name].models.values(),
                get_parser(engine)(text).models.values(),
            )
            assert after_m.generation_tokens > before_m.generation_tokens, name
            if fleet.sims[name].profile.speculative:
                assert (after_m.drafts or 0) > (before_m.drafts or 0), name
        url = fleet.urls["code-assistant"]
        before = value(raw["code-assistant"], "process_start_time_seconds")
        fleet.restart("code-assistant")
        async with session.get(url + "/metrics") as resp:
            assert resp.status == 503  # engine loading (cold start)
        async with session.get(url + "/health") as resp:
            assert resp.status == 503
        await asyncio.sleep(1.05 * CODE.cold_start_s / 100.0)
        async with session.get(url + "/metrics") as resp:
            assert resp.status == 200
            page = samples(await resp.text())
        assert value(page, "process_start_time_seconds") > before
        assert value(page, "vllm:generation_tokens_created") > value(
            second, "vllm:generation_tokens_created"
        )
        assert value(page, "vllm:generation_tokens_total") < value(
            second, "vllm:generation_tokens_total"
        )
        assert fleet.sims["code-assistant"].restarts == 1
        async with session.get(url + "/version") as resp:
            assert (await resp.json())["version"] == "0.32.0"
    # closed: connections are refused now
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.get(fleet.urls["chat-control"] + "/health")


async def test_fixed_ports() -> None:
    probe = await start_simulated_servers({"x": CODE})
    base = int(probe.urls["x"].rsplit(":", 1)[1])
    await probe.close()
    async with await start_simulated_servers({"a": CODE, "b": CONTROL}, port=base) as fleet:
        assert fleet.urls == {"a": f"http://127.0.0.1:{base}", "b": f"http://127.0.0.1:{base + 1}"}


async def test_simulated_history_does_not_log_each_simulated_restart(tmp_path, caplog) -> None:
    """`demo --history 30d` wrote 35 INFO "engine restarted" lines for restarts it had
    simulated itself; its summary line counts them."""
    import logging

    from spectax.config import validate
    from spectax.simulate.demo_fleet import DEMO_DEFAULTS
    from spectax.simulate.demo_history import write_demo_history

    url = f"sqlite+aiosqlite:///{tmp_path}/demo.sqlite"
    settings = validate({**DEMO_DEFAULTS, "storage_url": url}, "<test>")
    caplog.set_level(logging.INFO)
    written = await write_demo_history(settings, 2 * 86400, now=1_764_000_000, restarts_per_week=20)
    assert written.cold_starts > 0
    assert not [r for r in caplog.records if "restarted" in r.getMessage()]
    assert logging.getLogger("spectax.monitor").level == logging.NOTSET  # as it was
