"""The simulated benchmark sweep (`spectax.simulate.bench_sweep`): what `spectax demo` stores as the
code assistant's profile, so that its verdict rests on a profile from the first window."""

from __future__ import annotations

import pytest

from spectax.simulate import DEMO_PROFILES
from spectax.simulate.bench_sweep import SWEEP_CONCURRENCY, simulated_profile, simulated_sweep
from spectax.simulate.demo_fleet import DEMO_METHODS, DEMO_SWEPT, demo_endpoints

CODE = DEMO_PROFILES["code-assistant"]


def test_the_sweep_runs_each_level_plain_and_speculating() -> None:
    runs = simulated_sweep(CODE)
    assert [(r.concurrency, r.speculative) for r in runs] == [
        (level, side) for level in SWEEP_CONCURRENCY for side in (False, True)
    ]
    plain = [r for r in runs if not r.speculative]
    assert all(r.draft_tokens == 0 and r.time_per_output_token > 0 for r in plain)
    # Speculation at one or two users is faster per token than plain decoding: what pays.
    assert runs[1].time_per_output_token < runs[0].time_per_output_token / 2


def test_the_profile_recovers_the_simulators_step_physics() -> None:
    profile = simulated_profile("p", "code-assistant", CODE, "eagle")
    assert profile.source == "sweep" and profile.method == "eagle"
    assert profile.plain is not None and profile.plain.tokens_range is None
    # The simulator's step is a + b*tokens: B* = a/b = 32; the fit sees prefill tokens too.
    assert profile.ridge_batch == pytest.approx(CODE.ridge_batch, rel=0.1)
    assert profile.plain.fixed_seconds == pytest.approx(CODE.step_a, rel=0.15)
    assert 0 <= profile.step_overhead_ratio < 3
    assert "simulated benchmark sweep of code-assistant" in profile.learned_from


def test_only_the_live_demo_names_the_swept_profile() -> None:
    urls = {name: f"http://127.0.0.1:{18001 + i}" for i, name in enumerate(DEMO_PROFILES)}
    plain = {e["name"]: e for e in demo_endpoints(urls, DEMO_PROFILES)}
    live = {e["name"]: e for e in demo_endpoints(urls, DEMO_PROFILES, DEMO_SWEPT)}
    assert all("profile" not in e for e in plain.values())  # history, golden file: unchanged
    assert {n: e["profile"] for n, e in live.items() if "profile" in e} == DEMO_SWEPT
    assert set(DEMO_SWEPT) <= set(DEMO_METHODS)  # a swept endpoint speculates
