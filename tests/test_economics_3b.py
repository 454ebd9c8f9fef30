"""§3b's step overhead h: the closed forms against the model they were derived from.

Expectations come from ECONOMICS.md §3/§3b written out here, not from the code.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from spectax import economics as E
from spectax.economics import formulas as F
from spectax.economics.sweep import SweepRow, fit_sweep, row_speedup

FAST = settings(max_examples=200, deadline=None)
batches = st.floats(1.0, 1024.0)
ridges = st.floats(1.0, 512.0)
costs = st.floats(0.0, 0.5)
overheads = st.floats(0.0, 4.0)
draft_lengths = st.integers(1, 8)


@FAST
@given(
    b=batches,
    b_star=ridges,
    c=costs,
    h=overheads,
    steps=st.integers(1, 10_000),
    dt=st.integers(1, 40_000),
)
def test_speedup_is_exactly_one_at_the_breakeven_acceptance(b, b_star, c, h, steps, dt) -> None:
    """Over a window of counters: G - A request-steps carried Dt drafts (q = steps / Dt)."""
    alpha_star = E.breakeven_acceptance(b, b_star, c, h, steps / dt)
    assume(alpha_star <= 1.0)
    accepted = alpha_star * dt
    s = E.modelled_speedup(accepted + steps, accepted, dt, b, b_star, c, h)
    assert s == pytest.approx(1.0, abs=1e-9)


@FAST
@given(b=batches, b_star=ridges, c=costs, h=overheads, k=draft_lengths)
def test_per_step_speedup_is_one_at_the_breakeven_with_q_one_over_k(b, b_star, c, h, k) -> None:
    alpha_star = E.breakeven_acceptance(b, b_star, c, h, 1 / k)
    assume(alpha_star <= 1.0)
    tau = 1 + alpha_star * k
    assert F.speedup_per_step(tau, k, b, b_star, c, h) == pytest.approx(1.0, abs=1e-9)


@FAST
@given(alpha=st.floats(0.0, 1.0), b_star=ridges, c=costs, h=overheads, k=draft_lengths)
def test_crossover_is_where_the_speedup_crosses_one_as_batch_varies(alpha, b_star, c, h, k) -> None:
    bx = E.crossover_concurrency(alpha, b_star, c, h, 1 / k)
    tau = 1 + alpha * k

    def s(b: float) -> float:
        return F.speedup_per_step(tau, k, b, b_star, c, h)

    if bx is None:  # never pays: a tax at every batch (and at the smallest, B = 1)
        assert s(1.0) <= 1.0 + 1e-9
        return
    assume(2.0 <= bx < 1e6)  # batch is floored at one request
    assert s(bx) == pytest.approx(1.0, abs=1e-9)
    assert s(bx * 0.9) > 1.0 > s(bx * 1.1)


@FAST
@given(
    b1=batches,
    ratio=st.floats(1.01, 100.0),
    b_star=ridges,
    c=costs,
    h=st.floats(0.0, 8.0),
    k=draft_lengths,
    alpha=st.floats(0.0, 1.0),
)
def test_speedup_falls_with_batch_iff_k_exceeds_h(b1, ratio, b_star, c, h, k, alpha) -> None:
    """S = tau*(r + 1)/(r*(1 + h + cK) + 1 + K + cK) rises with r = B*/B iff its
    denominator's constant beats its slope: 1 + K + cK > 1 + h + cK, i.e. K > h."""
    assume(abs(k - h) > 1e-3)
    tau = 1 + alpha * k
    s1 = F.speedup_per_step(tau, k, b1, b_star, c, h)
    s2 = F.speedup_per_step(tau, k, b1 * ratio, b_star, c, h)
    assume(abs(s1 - s2) > 1e-12 * s1)
    assert (s2 < s1) == (k > h)


@FAST
@given(
    b=batches,
    b_star=ridges,
    c=costs,
    a=st.integers(0, 10_000),
    extra=st.integers(1, 10_000),
    dt_extra=st.integers(0, 10_000),
    alpha=st.floats(0.01, 0.99),
    q=st.floats(0.05, 2.0),
)
def test_h_zero_is_section_3_exactly(b, b_star, c, a, extra, dt_extra, alpha, q) -> None:
    g, dt = float(a + extra), float(max(a + dt_extra, 1))
    r = b_star / b
    section3 = g * (r + 1) / ((g - a) * r + (g - a + dt) + c * dt * (r + 1))
    assert E.modelled_speedup(g, a, dt, b, b_star, c, 0.0) == pytest.approx(section3, rel=1e-12)
    assert E.modelled_speedup(g, a, dt, b, b_star, c, 0.0) == E.modelled_speedup(
        g, a, dt, b, b_star, c
    )
    # With h = 0 break-even and crossover do not depend on K (q): §3's closed forms.
    assert E.breakeven_acceptance(b, b_star, c, 0.0, q) == pytest.approx(
        c + b / (b + b_star), rel=1e-12
    )
    bx = E.crossover_concurrency(alpha, b_star, c, 0.0, q)
    if alpha - c <= 0:
        assert bx is None
    else:
        assert bx == pytest.approx(b_star * (alpha - c) / (1 - alpha + c), rel=1e-12)


@FAST
@given(b=batches, b_star=ridges, c=costs, h=overheads, g=st.integers(1, 100_000))
def test_a_window_without_drafts_pays_the_overhead(b, b_star, c, h, g) -> None:
    r = b_star / b
    expected = (r + 1) / (r * (1 + h) + 1)
    assert E.modelled_speedup(g, 0, 0, b, b_star, c, h) == pytest.approx(expected, rel=1e-12)
    # The sweep fitter prices a speculative run that proposed nothing the same way.
    assert row_speedup(SweepRow(b, 1.0, 1.0, 0.0), b_star, c, h) == pytest.approx(expected)


@settings(max_examples=15, deadline=None)
@given(b_star=st.floats(4.0, 512.0), h=st.floats(0.01, 3.0), tau=st.floats(1.5, 4.0))
def test_fit_sweep_recovers_noise_free_parameters(b_star, h, tau) -> None:
    """A sweep from 1 to 4096 requests spans every ridge in the box; K = 4 > h keeps the
    curve from being flat (at K = h, S does not depend on B and B* cannot be read). h from
    its floor (0.01, `MIN_STEP_OVERHEAD_RATIO`): the fit never goes under it."""
    rows = [
        SweepRow(b, F.speedup_per_step(tau, 4, b, b_star, 0.0, h), tau, 4)
        for b in (2**i for i in range(13))
    ]
    fit = fit_sweep(rows, fit_draft_cost=False)
    assert fit.ridge_batch == pytest.approx(b_star, rel=1e-3)
    assert fit.step_overhead_ratio == pytest.approx(h, abs=1e-3)
    assert fit.mean_abs_error_ratio < 1e-5
