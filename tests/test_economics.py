"""spectax.economics vs ECONOMICS.md; expectations come from the spec, not from the code."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from spectax import economics as E
from spectax.economics import Money, Parameters, StepModel, Traffic

C, B_STAR, G, TOL = 0.05, 32.0, 1000.0, 1e-6
# ECONOMICS.md §6: (A, Dt, B, alpha, alpha*, S) with c = 0.05, B* = 32, G = 1000.
WORKED = [
    (600, 800, 1, 0.75, 0.080303, 2.154047),
    (600, 800, 64, 0.75, 0.716667, 1.027397),
    (600, 800, 128, 0.75, 0.85, 0.925926),
    (400, 1000, 8, 0.40, 0.25, 1.176471),
    (400, 1000, 32, 0.40, 0.55, 0.869565),
]


def known(b_star: float, h: float = 0.0) -> StepModel:
    """Parameters known exactly (a sweep profile of this method fitted without error): the
    band is the point, so the verdict follows S alone, as §6's examples state it. §6 is
    §3's formula, h = 0: the floor under h is a property of a method, lowered here to 0."""
    return StepModel(
        ridge_batch=b_star,
        step_overhead_ratio=h,
        source="sweep",
        relative_error=0.0,
        step_overhead_floor=0.0,
        overhead_known=True,
    )


PARAMS = Parameters(draft_cost_ratio=C, step_model=known(B_STAR))
TEN_USD = Money(seconds=3600.0, spend_usd=10.0, busy_spend_usd=10.0)
FAST = settings(max_examples=150, deadline=None)

costs = st.floats(0.0, 0.5)
batches = st.floats(1.0, 512.0)
ridges = st.floats(1.0, 256.0)


@st.composite
def windows(draw: st.DrawFn) -> tuple[float, float, float]:
    """(G, A, Dt) with G > A >= 0 and Dt >= A, Dt > 0."""
    dt = draw(st.integers(1, 20_000))
    a = draw(st.integers(0, dt))
    return float(a + draw(st.integers(1, 20_000))), float(a), float(dt)


def traffic(*, g=G, a=600.0, dt=800.0, b=1.0, dr=200.0, p=0.0, per_pos=()) -> Traffic:
    return Traffic(
        output_tokens=g,
        prompt_tokens=p,
        concurrency=b,
        drafts=dr,
        draft_tokens=dt,
        accepted_tokens=a,
        accepted_per_position=per_pos,
    )


# ---------------------------------------------------------------- 1. worked examples


@pytest.mark.parametrize("row", WORKED)
def test_worked_examples_via_functions(row) -> None:
    a, dt, b, alpha, alpha_star, s = row
    assert E.acceptance_ratio(a, dt) == pytest.approx(alpha, abs=TOL)
    assert E.breakeven_acceptance(b, B_STAR, C) == pytest.approx(alpha_star, abs=TOL)
    assert E.modelled_speedup(G, a, dt, b, B_STAR, C) == pytest.approx(s, abs=TOL)
    r = E.relative_batch(B_STAR, b)
    assert r == pytest.approx(B_STAR / b)
    ratio = E.gpu_time_without_speculation(G, r) / E.gpu_time_with_speculation(G, a, dt, r, C)
    assert ratio == pytest.approx(s, abs=TOL)


@pytest.mark.parametrize("dr", [100.0, 200.0, 400.0])
@pytest.mark.parametrize("row", WORKED)
def test_worked_examples_via_assess(row, dr) -> None:
    a, dt, b, alpha, alpha_star, s = row
    res = E.assess_model("m", traffic(a=a, dt=dt, b=b, dr=dr), PARAMS, TEN_USD)
    assert res.acceptance_ratio == pytest.approx(alpha, abs=TOL)
    assert res.breakeven_acceptance_ratio == pytest.approx(alpha_star, abs=TOL)
    assert res.speedup_ratio == pytest.approx(s, abs=TOL)  # S does not depend on Dr
    assert res.acceptance_length_tokens == pytest.approx(1 + a / dr)
    assert res.verdict == ("pays" if s > 1 else "tax")


def test_iid_acceptance_length() -> None:
    assert E.iid_acceptance_length(0.8, 5) == pytest.approx(3.68928, abs=TOL)
    assert E.iid_acceptance_length(1.0, 5) == pytest.approx(6.0)
    assert E.iid_acceptance_length(0.0, 5) == pytest.approx(1.0)


# ---------------------------------------------------------------- 2. closed forms vs the model


@FAST
@given(
    b=batches,
    b_star=ridges,
    c=st.floats(0.0, 0.45),
    dt=st.integers(1, 10_000),
    extra=st.integers(1, 10_000),
)
def test_speedup_is_one_at_breakeven(b, b_star, c, dt, extra) -> None:
    alpha_star = c + b / (b + b_star)
    assume(alpha_star <= 1.0)
    a = alpha_star * dt
    assert E.breakeven_acceptance(b, b_star, c) == pytest.approx(alpha_star, rel=1e-12)
    assert E.modelled_speedup(a + extra, a, dt, b, b_star, c) == pytest.approx(1.0, rel=1e-9)


@FAST
@given(alpha=st.floats(0.0, 1.0), c=costs, b_star=ridges)
def test_crossover_round_trips_through_breakeven(alpha, c, b_star) -> None:
    assume(1e-3 < alpha - c < 1 - 1e-3)
    bx = E.crossover_concurrency(alpha, b_star, c)
    assert bx == pytest.approx(b_star * (alpha - c) / (1 - alpha + c), rel=1e-12)
    assume(bx >= 1.0)  # breakeven floors the batch at one request
    assert E.breakeven_acceptance(bx, b_star, c) == pytest.approx(alpha, abs=1e-9)


def test_crossover_edges() -> None:
    assert E.crossover_concurrency(0.05, B_STAR, 0.05) is None
    assert E.crossover_concurrency(0.04, B_STAR, 0.05) is None
    assert E.crossover_concurrency(1.0, B_STAR, 0.0) == math.inf
    assert E.crossover_concurrency(0.75, B_STAR, C) == pytest.approx(32 * 0.7 / 0.3)


@pytest.mark.parametrize(
    ("a", "dt", "b", "c"),
    [(600, 800, 1, 0.05), (400, 1000, 32, 0.05), (10, 900, 200, 0.3), (0, 50, 7, 0)],
)
def test_shares_are_ratios_of_gpu_seconds(a, dt, b, c) -> None:
    # Real seconds from T(n) = a_s + b_s*n with B* = a_s/b_s, independent of the units-of-b code.
    b_s = 2e-4
    a_s = B_STAR * b_s
    per_token = a_s / b + b_s  # one request's share of a step plus its own token
    t_spec = (G - a) * a_s / b + b_s * (G - a + dt) + c * dt * per_token
    drafting = c * dt * per_token
    rejected = (dt - a) * b_s + c * (dt - a) * per_token
    r = E.relative_batch(B_STAR, b)
    assert E.draft_compute_share(G, a, dt, r, c) == pytest.approx(drafting / t_spec, rel=1e-12)
    assert E.rejected_share(G, a, dt, r, c) == pytest.approx(rejected / t_spec, rel=1e-12)
    assert E.modelled_speedup(G, a, dt, b, B_STAR, c) == pytest.approx(G * per_token / t_spec)


# ---------------------------------------------------------------- 3. properties


@FAST
@given(w=windows(), c=costs, b=batches, b_star=ridges)
def test_pays_exactly_when_alpha_clears_breakeven(w, c, b, b_star) -> None:
    g, a, dt = w
    alpha, alpha_star = a / dt, c + b / (b + b_star)
    s = E.modelled_speedup(g, a, dt, b, b_star, c)
    assert s is not None
    if alpha > alpha_star + 1e-9:
        assert s > 1.0
    elif alpha < alpha_star - 1e-9:
        assert s < 1.0
    else:
        assert s == pytest.approx(1.0, abs=1e-6)


@FAST
@given(w=windows(), c=costs, b1=batches, b2=batches, b_star=ridges)
def test_monotone_in_batch(w, c, b1, b2, b_star) -> None:
    g, a, dt = w
    lo, hi = sorted((b1, b2))
    s_lo, s_hi = (E.modelled_speedup(g, a, dt, b, b_star, c) for b in (lo, hi))
    assert s_lo is not None and s_hi is not None
    assert s_hi <= s_lo * (1 + 1e-12)
    assert E.breakeven_acceptance(hi, b_star, c) >= E.breakeven_acceptance(lo, b_star, c) - 1e-12


@FAST
@given(
    dt=st.integers(10, 10_000), data=st.data(), c=costs, b_star=ridges, extra=st.integers(1, 20_000)
)
def test_crossover_separates_pay_from_tax(dt, data, c, b_star, extra) -> None:
    a = data.draw(st.integers(0, dt))
    alpha = a / dt
    assume(alpha > c + 1e-3)
    bx = E.crossover_concurrency(alpha, b_star, c)
    assume(bx is not None and 2.0 <= bx <= 1e4)
    params = Parameters(draft_cost_ratio=c, step_model=known(b_star))
    below = E.assess_model("m", traffic(g=a + extra, a=a, dt=dt, b=bx * 0.999), params, TEN_USD)
    above = E.assess_model("m", traffic(g=a + extra, a=a, dt=dt, b=bx * 1.001), params, TEN_USD)
    assert below.speedup_ratio is not None and below.speedup_ratio > 1.0
    assert above.speedup_ratio is not None and above.speedup_ratio < 1.0
    assert (below.verdict, above.verdict) == ("pays", "tax")
    assert below.crossover_concurrency_requests == pytest.approx(bx)


@FAST
@given(w=windows(), c=costs, b=batches, b_star=ridges)
def test_shares_bounded(w, c, b, b_star) -> None:
    g, a, dt = w
    r = b_star / b
    d, rej = E.draft_compute_share(g, a, dt, r, c), E.rejected_share(g, a, dt, r, c)
    assert 0.0 <= d <= 1.0 and 0.0 <= rej <= 1.0
    # The rejected share includes drafting the rejected tokens, which the draft share
    # also counts: without that overlap the two never exceed the whole.
    t_spec = (g - a) * (r + 1) + dt + c * dt * (r + 1)
    assert d + rej - c * (dt - a) * (r + 1) / t_spec <= 1.0 + 1e-12
    if c * dt <= g - a:  # c times mean draft length <= 1: the plain sum fits too
        assert d + rej <= 1.0 + 1e-12


# ---------------------------------------------------------------- 4. assess()

NO_SPEC = Traffic(output_tokens=G, prompt_tokens=10.0, concurrency=4.0)
NO_TRAFFIC = traffic(g=0.0, a=0.0, dt=800.0, dr=200.0)
NO_DRAFTS = traffic(a=0.0, dt=0.0, dr=0.0)
UNSPECULATED = [
    (NO_SPEC, "no_speculation"),
    (Traffic(output_tokens=0.0, prompt_tokens=0.0, concurrency=0.0), "no_speculation"),
    (NO_TRAFFIC, "no_traffic"),
]


@pytest.mark.parametrize(("t", "verdict"), UNSPECULATED)
def test_verdicts_without_speculation_have_no_numbers(t, verdict) -> None:
    params = Parameters(
        draft_cost_ratio=C, draft_weight_bytes=2 * 10**9, gpu_memory_bytes=80 * 10**9
    )
    res = E.assess_model("m", t, params, TEN_USD)
    assert res.verdict == verdict
    for field in (
        "acceptance_ratio",
        "acceptance_length_tokens",
        "speedup_ratio",
        "speculation_savings_usd",
        "cost_per_million_output_tokens_no_speculation_usd",
        "draft_compute_share_ratio",
        "rejected_share_ratio",
        "draft_compute_usd",
        "rejected_usd",
        "crossover_concurrency_requests",
    ):
        assert getattr(res, field) is None, field
    assert res.speedup_in_force is None
    if verdict == "no_speculation":
        assert res.breakeven_acceptance_ratio is None and res.vram_usd is None


@pytest.mark.parametrize("t", [NO_SPEC, NO_TRAFFIC])
def test_measured_speedup_does_not_invent_savings(t) -> None:
    res = E.assess_model("m", t, PARAMS, TEN_USD, measured_speedup=1.3)
    assert res.speculation_savings_usd is None  # got 10 * 0.3 = 3.0


@pytest.mark.parametrize(("b", "measured", "verdict"), [(64, 0.8, "tax"), (128, 1.2, "pays")])
def test_measured_speedup_overrides_model(b, measured, verdict) -> None:
    res = E.assess_model("m", traffic(b=b), PARAMS, TEN_USD, measured_speedup=measured)
    assert res.verdict == verdict
    assert res.speedup_ratio == pytest.approx(1.027397 if b == 64 else 0.925926, abs=TOL)
    assert res.speedup_measured_ratio == measured and res.speedup_in_force == measured
    assert res.speculation_savings_usd == pytest.approx(10 * (measured - 1))
    assert res.cost_per_million_output_tokens_no_speculation_usd == pytest.approx(
        10 * measured / G * 1e6
    )


def test_money_on_worked_example() -> None:  # plus per_hour() and the spend estimate
    s = 33000 / 15320  # row 1: T_ns = 1000*33, T_spec = 400*32 + 1200 + 0.05*800*33
    res = E.assess_model("m", traffic(p=500.0), PARAMS, TEN_USD)
    assert res.speculation_savings_usd == pytest.approx(10 * (s - 1))
    assert res.speculation_savings_usd == pytest.approx(11.54047, abs=1e-5)
    assert res.cost_per_million_output_tokens_no_speculation_usd == pytest.approx(10 * s / G * 1e6)
    assert res.cost_per_million_output_tokens_usd == pytest.approx(10_000.0)
    assert res.cost_per_million_tokens_usd == pytest.approx(10 / 1500 * 1e6)
    assert res.draft_compute_usd == pytest.approx(10 * 1320 / 15320)  # c*Dt*(r+1) = 1320
    assert res.rejected_usd == pytest.approx(10 * 200 * 2.65 / 15320)  # (Dt-A)(1+c(r+1))
    assert res.vram_usd is None
    assert E.spend_estimate_usd(2.5, 4, 1800.0) == pytest.approx(5.0)
    half_hour = E.assess_model(
        "m", traffic(), PARAMS, Money(seconds=1800.0, spend_usd=5.0, busy_spend_usd=5.0)
    )
    assert (half_hour.per_hour(5.0), half_hour.per_hour(-1.5)) == pytest.approx((10.0, -3.0))
    assert half_hour.per_hour(None) is None
    idle = E.assess_model(
        "m", traffic(), PARAMS, Money(seconds=0.0, spend_usd=0.0, busy_spend_usd=0.0)
    )
    assert idle.per_hour(1.0) is None


@pytest.mark.parametrize(
    ("draft_bytes", "gpu_bytes", "expected"),
    [
        (2 * 10**9, 80 * 10**9, 0.25),
        (None, 80 * 10**9, None),
        (2 * 10**9, None, None),
        (0, 80 * 10**9, None),
        (None, None, None),
    ],
)
def test_vram_usd(draft_bytes, gpu_bytes, expected) -> None:
    params = Parameters(
        draft_cost_ratio=C, draft_weight_bytes=draft_bytes, gpu_memory_bytes=gpu_bytes
    )
    partly_idle = Money(seconds=3600.0, spend_usd=10.0, busy_spend_usd=6.0)  # $, not $_busy
    assert E.assess_model("m", traffic(), params, partly_idle).vram_usd == (
        None if expected is None else pytest.approx(expected)
    )


def test_position_acceptance_and_recommendation_in_assess() -> None:
    per_pos = (190.0, 170.0, 140.0, 100.0)  # sums to A = 600 over Dr = 200 drafts of K = 4
    res = E.assess_model("m", traffic(b=64, per_pos=per_pos), PARAMS, TEN_USD)
    assert res.position_acceptance_ratio == pytest.approx((0.95, 0.85, 0.7, 0.5))
    assert res.recommended_speculative_tokens == 2  # alpha* = 0.716667
    assert res.recommended_speedup_ratio > res.speedup_in_force  # K = 2 beats the K = 4 run
    low = E.assess_model("m", traffic(b=1, per_pos=per_pos), PARAMS, TEN_USD)
    # Every position pays at B = 1, but a fifth was never drafted: its acceptance would be a
    # guess (the old rule extrapolated one, 0.5 * 0.5 / 0.7, and said "raise K to 5").
    assert (low.speculative_tokens, low.recommended_speculative_tokens) == (4, 4)
    assert low.recommended_speedup_ratio == low.speedup_in_force


def test_a_recommended_draft_length_predicts_at_the_window_own_speedup_when_kept() -> None:
    """The per-step what-if at the K a window ran, with its share of drafting steps, is the
    window's own modelled speedup: so "K = 2 beats K = 4" compares like with like."""
    per_pos = (190.0, 170.0, 140.0, 100.0)
    for b in (1.0, 8.0, 64.0):
        for dr, f_steps in ((200.0, 400.0), (100.0, 400.0)):  # every step drafts, or a quarter
            a = sum(per_pos) * dr / 200.0
            g = f_steps + a
            t = traffic(
                g=g, a=a, dt=4 * dr, b=b, dr=dr, per_pos=tuple(x * dr / 200 for x in per_pos)
            )
            res = E.assess_model("m", t, PARAMS, TEN_USD)
            tau = 1 + sum(res.position_acceptance_ratio)
            again = E.speedup_per_step(tau, 4, b, B_STAR, C, 0.0, dr / (g - a))
            assert again == pytest.approx(res.speedup_ratio)


def test_a_measured_tax_recommends_turning_it_off_and_shows_no_impossible_break_even() -> None:
    """assess --control on real n-gram pages once said TAX (measured 0.597), a break-even of
    2.76 and "raise K to 5". With the h the measurement implies, no acceptance pays at this
    load and no K observed beats plain decoding: break-even is not shown, K = 0."""
    per_pos = (190.0, 170.0, 140.0, 100.0)
    params = Parameters(draft_cost_ratio=0.0, step_model=StepModel(ridge_batch=B_STAR))
    res = E.assess_model("m", traffic(b=1, per_pos=per_pos), params, TEN_USD, 0.597)
    assert (res.verdict, res.verdict_basis) == ("tax", "measured")
    assert res.breakeven_acceptance_ratio is None and res.no_acceptance_pays
    assert res.recommended_speculative_tokens == 0
    assert res.crossover_concurrency_requests is None  # it pays at no load
    # the implied h is what makes the model say 0.597
    h = res.step_overhead_ratio
    assert E.modelled_speedup(G, 600.0, 800.0, 1.0, B_STAR, 0.0, h) == pytest.approx(0.597)
    assert res.breakeven_step_overhead_ratio < h


# ---------------------------------------------------------------- 5. draft cost ratio


@pytest.mark.parametrize(
    ("method", "sizes", "expected"),
    [
        ("ngram", (), 0.0),
        ("eagle", (), 0.05),
        ("eagle3", (), 0.05),
        ("mtp", (), 0.05),
        ("medusa", (), 0.05),
        ("draft_model", (), None),
        ("draft_model", (1e9, None), None),
        ("draft_model", (1e9, 70e9), 2 / 70),
        ("draft_model", (8e9, 70e9), 16 / 70),
        ("draft_model", (0.1e9, 70e9), 0.02),
        ("unknown", (), None),
    ],
)
def test_draft_cost_ratio_for(method, sizes, expected) -> None:
    got = E.draft_cost_ratio_for(method, *sizes)
    assert got == (None if expected is None else pytest.approx(expected))


# ---------------------------------------------------------------- 5. §3b: no drafts, bands


@pytest.mark.parametrize(("b", "h"), [(1.0, 0.5), (8.0, 0.57), (64.0, 2.0)])
def test_a_window_that_proposed_nothing_is_priced_as_a_tax(b, h) -> None:
    """§3b: speculation on, nothing proposed: S = (r + 1) / (r(1 + h) + 1), below 1, and the
    money says what it cost; there is no acceptance to show."""
    params = Parameters(draft_cost_ratio=C, step_model=known(B_STAR, h))
    res = E.assess_model("m", traffic(a=0.0, dt=0.0, dr=0.0, b=b), params, TEN_USD)
    r = B_STAR / b
    assert res.speedup_ratio == pytest.approx((r + 1) / (r * (1 + h) + 1), abs=TOL)
    assert res.verdict == "tax" and res.verdict_basis == "profile"
    assert res.acceptance_ratio is None and res.breakeven_acceptance_ratio is None
    assert res.speculation_savings_usd == pytest.approx(10 * (res.speedup_ratio - 1))
    assert res.recommended_speculative_tokens is None


def test_configured_parameters_give_a_wide_band_and_an_honest_uncertain() -> None:
    """With nothing measured, B* is known within x4 and h from its floor h_min to 3: row 2 of
    §6 (S = 1.03 at the configured B* = 32 and h = 0, which the floor lifts to 0.01) could be
    anything from a tax to a gain: uncertain."""
    configured = StepModel(ridge_batch=B_STAR, step_overhead_ratio=0.0)
    params = Parameters(draft_cost_ratio=C, step_model=configured)
    res = E.assess_model("m", traffic(b=64), params, TEN_USD)
    h_min = E.MIN_STEP_OVERHEAD_RATIO
    assert res.speedup_ratio == pytest.approx(E.modelled_speedup(G, 600, 800, 64, B_STAR, C, h_min))
    corners = [
        E.modelled_speedup(G, 600, 800, 64, b_star, C, h)
        for b_star in (B_STAR / 4, B_STAR * 4)
        for h in (h_min, 3.0)
    ]
    assert res.speedup_low_ratio == pytest.approx(min(corners))
    assert res.speedup_high_ratio == pytest.approx(max(corners))
    assert res.speedup_low_ratio < 1 < res.speedup_high_ratio
    assert (res.verdict, res.verdict_basis, res.model_source) == (
        "uncertain",
        "default",
        "configured",
    )


def test_a_measured_speedup_is_its_own_band() -> None:
    params = Parameters(draft_cost_ratio=C, step_model=StepModel(ridge_batch=B_STAR))
    res = E.assess_model("m", traffic(b=64), params, TEN_USD, measured_speedup=0.8)
    assert (res.speedup_low_ratio, res.speedup_high_ratio) == (0.8, 0.8)
    assert (res.verdict, res.verdict_basis) == ("tax", "measured")


def test_a_plain_curve_prices_the_window_against_its_own_time_per_token() -> None:
    """The counterfactual curve a + b*n at the window's plain tokens per step, over the
    window's own time per output token; the band is the curve's residual spread, and the h it
    implies makes break-even agree with S (alpha = alpha* exactly where S = 1)."""
    curve = E.PlainCurve(0.004, 0.0001, 20, (-0.05, 0.04), (1.0, 40.0))
    model = StepModel(ridge_batch=40.0, source="control", curve=curve)
    t = Traffic(
        output_tokens=G,
        prompt_tokens=500.0,
        concurrency=4.0,
        drafts=200.0,
        draft_tokens=800.0,
        accepted_tokens=600.0,
        time_per_output_token=0.0025,  # S = 1.84: h = 0.085, within physics
    )
    res = E.assess_model("m", t, Parameters(draft_cost_ratio=C, step_model=model), TEN_USD)
    n = 4.0 * (1 + 500.0 / G)
    s = (0.004 + 0.0001 * n) / 0.0025
    assert res.speedup_ratio == pytest.approx(s)
    assert res.speedup_low_ratio == pytest.approx(s * 0.95)
    assert res.speedup_high_ratio == pytest.approx(s * 1.04)
    assert (res.verdict, res.verdict_basis, res.model_source) == ("pays", "calibrated", "control")
    h = res.step_overhead_ratio
    again = E.modelled_speedup(G, 600.0, 800.0, 4.0, 40.0, C, h)
    assert again == pytest.approx(s)
    # at alpha*, the same steps and Dt give S = 1
    q = (G - 600.0) / 800.0
    alpha_star = E.breakeven_acceptance(4.0, 40.0, C, h, q)
    a_star = alpha_star * 800.0
    assert E.modelled_speedup(
        (G - 600.0) + a_star, a_star, 800.0, 4.0, 40.0, C, h
    ) == pytest.approx(1.0)


def test_a_speedup_that_implies_an_unphysical_h_has_its_figures_at_the_nearest_physical_one() -> (
    None
):
    """A measured 0.8 at B = 96 where the model at B* = 32 gives 0.71 even at h = 0 implies
    h = -0.79: c or B* are off, not the step. The demo's saturated chat endpoint did this: with
    that h its break-even, crossover and K said "K = 1 pays 1.76x" beside a measured tax.
    The figures take the floor instead, the h physics allows nearest to the measurement."""
    per_pos = (110.0, 66.0, 39.0, 24.0)
    t = traffic(g=1000, a=239.0, dt=800.0, dr=200.0, b=96.0, per_pos=per_pos)
    params = Parameters(draft_cost_ratio=0.05, step_model=StepModel(ridge_batch=B_STAR))
    implied = E.implied_step_overhead(1000, 239.0, 800.0, 96.0, B_STAR, 0.05, 0.8)
    assert implied is not None and implied < 0
    res = E.assess_model("m", t, params, TEN_USD, measured_speedup=0.8)
    assert res.step_overhead_ratio == E.MIN_STEP_OVERHEAD_RATIO
    assert (res.verdict, res.recommended_speculative_tokens) == ("tax", 0)
    assert res.breakeven_acceptance_ratio > res.acceptance_ratio  # below the bar, as measured


def test_the_default_step_overhead_prices_a_window_that_proposed_nothing_as_a_tax() -> None:
    """Unset, h is 0.1: a window that proposed nothing is a tax at the point estimate, not
    "no effect", and its band says how sure that is."""
    assert StepModel().step_overhead_ratio == E.DEFAULT_STEP_OVERHEAD_RATIO == 0.1
    params = Parameters(draft_cost_ratio=C, step_model=StepModel(ridge_batch=B_STAR))
    res = E.assess_model("m", traffic(a=0.0, dt=0.0, dr=0.0, b=4.0), params, TEN_USD)
    r = B_STAR / 4.0
    assert res.speedup_ratio == pytest.approx((r + 1) / (r * 1.1 + 1))
    # h >= h_min: even at best (the floor, B* / 4) the proposer cost something: a tax, and
    # the band's top says at least how much
    best = (r / 4 + 1) / (r / 4 * (1 + E.MIN_STEP_OVERHEAD_RATIO) + 1)
    assert res.speedup_high_ratio == pytest.approx(best) and best < 1
    assert res.verdict == "tax" and res.speculation_savings_usd < 0


@pytest.mark.parametrize("method", E.SPECULATIVE_METHODS)
def test_every_method_has_a_floor_under_h_above_zero(method) -> None:
    assert E.step_overhead_floor(method) == E.MIN_STEP_OVERHEAD_RATIO > 0
    assert E.step_overhead_floor(None) == 0.0  # no speculation, no overhead
    # a drafter of known size reads its weights on each drafting pass: a floor under c (h
    # would count the same reads twice: the catch-up is the first drafting pass)
    assert E.draft_cost_floor(7e9, 70e9) == pytest.approx(0.1)
    assert E.draft_cost_floor(None, 70e9) == 0.0


def test_a_band_that_touches_one_by_rounding_does_not_decide() -> None:
    assert E.verdict_of_band(0.9999999999999999, 0.9999999999999999) == "uncertain"
    assert E.verdict_of_band(0.5, 0.99) == "tax" and E.verdict_of_band(1.01, 2.0) == "pays"


def test_a_zero_draft_window_priced_on_a_plain_curve_is_a_tax_whatever_its_noise() -> None:
    """Live, against a baseline curve, a window that proposed nothing came out 1.08 with a
    band top of 1.37 (a noisy time per token: the control's was inflated by the machine's
    load) and "uncertain". Physics caps any window at G / ((G - A)(1 + h_min)): with
    nothing accepted, 1 / 1.01. The speedup and its band stop there: a tax."""
    curve = E.PlainCurve(0.004, 0.0001, 20, (-0.1, 0.25), (1.0, 40.0))
    model = StepModel(ridge_batch=40.0, source="baseline", curve=curve)
    noisy = Traffic(
        output_tokens=G,
        prompt_tokens=0.0,
        concurrency=4.0,
        drafts=0.0,
        draft_tokens=0.0,
        accepted_tokens=0.0,
        time_per_output_token=0.0040,  # the curve says 0.0044 plain: "1.1x" without drafting
    )
    res = E.assess_model("m", noisy, Parameters(draft_cost_ratio=0.0, step_model=model), TEN_USD)
    ceiling = 1 / (1 + E.MIN_STEP_OVERHEAD_RATIO)
    assert res.speedup_ratio == pytest.approx(ceiling)
    assert res.speedup_high_ratio == pytest.approx(ceiling) and ceiling < 1
    assert (res.verdict, res.verdict_basis) == ("tax", "calibrated")
    # a drafting window keeps what its curve says, below its own ceiling
    drafting = dataclasses.replace(noisy, drafts=200.0, draft_tokens=800.0, accepted_tokens=600.0)
    res = E.assess_model("m", drafting, Parameters(draft_cost_ratio=0.0, step_model=model), TEN_USD)
    assert res.speedup_ratio == pytest.approx(0.0044 / 0.0040)
    assert E.speedup_ceiling(G, 600.0, 0.01) == pytest.approx(1000 / (400 * 1.01))
