"""The simulator's pages for SGLang, TensorRT-LLM, TGI and llama.cpp: each engine's shape,
the state's counts.

Each engine's page is rendered from the same physics as vLLM's (`spectax.simulate.pages`).
A user relies on two things: spectax's parser reads from the simulated page the counters the
simulation holds (so the demo's figures are the physics'), and the page is the real
engine's shape (its fixtures' metric names, types and label keys), so what works on the demo
works on the engine.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from spectax.cli.assess import AssessOptions, assess_pages
from spectax.engines import ENGINES, detect, get_parser
from spectax.engines.llamacpp import MODEL_NAME as LLAMACPP_MODEL
from spectax.engines.tgi import MODEL as TGI_MODEL
from spectax.simulate import SimProfile, SimulatedVllm
from spectax.simulate.pages import PAGES

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_SETS = {
    "sglang": "sglang-0.5.23",
    "trtllm": "trtllm-050f80d",
    "tgi": "tgi-3.3.6",
    "llamacpp": "llamacpp-11434.0.0",
}
# Each engine's fixture page after traffic, with speculation and without.
TRAFFIC = {"llamacpp": ("draft_2_after_traffic", "control_2_after_traffic")}
DEFAULT_TRAFFIC = ("spec_1_after", "nospec_1_after")
MODELS = {"tgi": TGI_MODEL, "llamacpp": LLAMACPP_MODEL}  # engines whose page names no model
T0 = 1_800_000_000.0
SPEC = SimProfile(
    model_name="llama-3.1-8b-instruct",
    num_speculative_tokens=3,
    acceptance_p0=0.8,
    acceptance_decay=0.8,
    draft_cost_ratio=0.05,
    concurrency=6,
    seed=5,
)


def shape(text: str) -> set[tuple[str, str, str, frozenset[str]]]:
    """(family, type, sample name, label keys) of every sample of a page."""
    return {
        (f.name, f.type, s.name, frozenset(s.labels))
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def simulated(engine: str, profile: SimProfile, seconds: float, fast: bool) -> SimulatedVllm:
    sim = SimulatedVllm(replace(profile, serving_engine=engine), T0)
    sim.advance(seconds, fast=fast)
    return sim


def test_every_registered_engine_has_a_simulated_page() -> None:
    assert set(PAGES) == set(ENGINES)
    assert set(FIXTURE_SETS) == set(ENGINES) - {"vllm"}  # vLLM's: tests/test_simulate.py


@pytest.mark.parametrize("engine", sorted(FIXTURE_SETS))
@pytest.mark.parametrize("speculating", [True, False])
def test_simulated_page_has_the_fixtures_shape(engine: str, speculating: bool) -> None:
    profile = SPEC if speculating else SPEC.without_speculation()
    page = simulated(engine, profile, 120.0, fast=False).render()
    fixture = TRAFFIC.get(engine, DEFAULT_TRAFFIC)[0 if speculating else 1]
    recorded = (FIXTURES / FIXTURE_SETS[engine] / f"{fixture}.txt").read_text(encoding="utf-8")
    assert shape(page) == shape(recorded)
    assert detect(page) == engine


@pytest.mark.parametrize("engine", sorted(FIXTURE_SETS))
@pytest.mark.parametrize("fast", [False, True])
def test_parser_reads_the_states_counters(engine: str, fast: bool) -> None:
    sim = simulated(engine, SPEC, 600.0 if fast else 120.0, fast)
    t = sim.totals()
    h = sim._state.hists
    sample = get_parser(engine)(sim.render())
    m = sample.models[MODELS.get(engine, SPEC.model_name)]
    assert m.speculating
    assert m.requests_running == t.running
    if engine == "llamacpp":  # no finished-request counter, no histograms: exact counters
        assert m.requests_finished == 0 and t.requests_finished > 0
        assert (m.generation_tokens, m.prompt_tokens) == (t.generation_tokens, t.prompt_tokens)
        assert (m.drafts, m.draft_tokens, m.accepted_tokens) == (
            t.drafts,
            t.draft_tokens,
            t.accepted,
        )
        assert m.accepted_per_position == t.accepted_per_pos
        return
    assert m.requests_finished == t.requests_finished > 0
    if engine == "tgi":  # tokens only as per-request histograms; drafted tokens absent
        assert m.generation_tokens == round(h["gen_tokens"].sum)
        assert m.prompt_tokens == round(h["prompt"].sum)
        assert m.accepted_tokens == t.accepted
        assert m.drafts == t.drafts + t.running  # a running request's prefill is counted
        assert m.draft_tokens is None
    else:
        assert m.generation_tokens == t.generation_tokens
        assert m.prompt_tokens == t.prompt_tokens
        assert m.drafts == t.drafts
    if engine == "trtllm":
        assert m.draft_tokens == t.draft_tokens
        assert m.accepted_tokens == t.accepted
        assert m.accepted_per_position == t.accepted_per_pos
        assert m.draft_overhead is not None and 0 < m.draft_overhead < 1
        assert sample.process_start_time_seconds == sim.process_start_time
    if engine == "sglang":  # accepted derived: generated - finished - verify calls
        assert m.draft_tokens is None
        assert m.accepted_tokens is not None and m.drafts
        derived = 1 + m.accepted_tokens / m.drafts
        assert derived == pytest.approx(1 + t.accepted / t.drafts, rel=0.03)
    assert m.time_per_output_token is not None
    assert m.time_per_output_token.count == round(t.tpot_count)


@pytest.mark.parametrize("engine", sorted(FIXTURE_SETS))
def test_without_speculation_the_page_shows_none(engine: str) -> None:
    sim = simulated(engine, SPEC.without_speculation(), 60.0, fast=False)
    (only,) = get_parser(engine)(sim.render()).models.values()
    assert not only.speculating
    assert only.generation_tokens > 0


@pytest.mark.parametrize("engine", sorted(FIXTURE_SETS))
def test_a_restart_starts_the_counters_again(engine: str) -> None:
    sim = simulated(engine, SPEC, 60.0, fast=False)
    parse = get_parser(engine)
    (before,) = parse(sim.render()).models.values()
    sim.restart()
    sim.advance(SPEC.cold_start_s, fast=False)
    sample = parse(sim.render())
    assert all(m.generation_tokens < before.generation_tokens for m in sample.models.values())
    if engine == "trtllm":  # the one with a process start time
        assert sample.process_start_time_seconds == sim.process_start_time > T0


@pytest.mark.parametrize("engine", ["sglang", "tgi", "trtllm"])
def test_a_control_gives_every_engine_a_measured_verdict(engine: str) -> None:
    """Without a drafted count (SGLang, TGI) there is no speedup to model: `spectax assess`
    says uncertain, on basis default, naming what the engine does not expose. The same
    pages beside a control's (the same traffic without speculation) measure it: at 6
    requests against a ridge of 32 and acceptance 0.8, speculation pays, measured."""
    spec = simulated(engine, SPEC, 60.0, fast=False)
    plain = simulated(engine, replace(SPEC.without_speculation(), seed=9), 60.0, fast=False)
    before, control_before = spec.render(), plain.render()
    spec.advance(120.0, fast=False)
    plain.advance(120.0, fast=False)
    options = AssessOptions(seconds=120.0, usd_per_hour=2.0, method="eagle")
    (alone,) = assess_pages(before, spec.render(), options)
    (paired,) = assess_pages(
        before, spec.render(), options, control=(control_before, plain.render())
    )
    a = alone.assessment
    assert a.acceptance_length_tokens is not None and a.acceptance_length_tokens > 1.5
    if engine in ("sglang", "tgi"):
        assert (a.verdict, a.verdict_basis, a.acceptance_ratio) == ("uncertain", "default", None)
        assert any(f"not exposed by {engine}" in note.text for note in alone.notes)
    m = paired.assessment
    assert (m.verdict, m.verdict_basis) == ("pays", "measured")
    assert m.speedup_measured_ratio is not None and m.speedup_measured_ratio > 1.2
