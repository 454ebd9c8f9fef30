"""The step model: what the same output would have cost without speculation (§3b).

A speculative endpoint sees its own time per output token; what it cannot see is the
time per output token it would have had without speculation. A `StepModel` carries what
stands in for it: B*, h, and a plain curve (`PlainCurve`) when its source had one, and
the source it came from (`Source`: control, baseline, profile, sweep, roofline,
configured). Which source is in force for an endpoint is one rule, in
spectax.counterfactual.in_force; a `Profile` is what a control or a sweep taught.

With a plain curve the speedup of a window is direct: the curve's time per token at the
window's tokens per step over the window's own time per token. Without one it is §3b's
formula, and its band spans the ranges the parameters could plausibly take
(`estimate_speedup`). Which basis a verdict had, and its band, go with it everywhere it
is shown.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from spectax.economics.formulas import (
    DEFAULT_RIDGE_BATCH,
    MIN_STEP_OVERHEAD_RATIO,
    implied_step_overhead,
    modelled_speedup,
    speedup_ceiling,
)
from spectax.pipeline.windows import Window

Source = Literal["control", "baseline", "profile", "sweep", "roofline", "configured"]
Basis = Literal["measured", "calibrated", "profile", "default"]
#: The bases, strongest first: what a verdict rests on, from a control's measurement down to
#: the defaults. A stored basis outside them (none written) is read as not recorded.
BASES: tuple[Basis, ...] = get_args(Basis)
SOURCES: tuple[Source, ...] = ("control", "baseline", "profile", "sweep", "roofline", "configured")
BASIS_OF_SOURCE: dict[Source, Basis] = {
    "control": "calibrated",
    "baseline": "calibrated",
    "profile": "profile",
    "sweep": "profile",
    "roofline": "default",
    "configured": "default",
}
#: Where the step overhead h may lie when nothing measured it: on live vLLM here the
#: implied h ran from 0.3 (n-gram on repetitive text) to 2.5 (n-gram on chat traffic,
#: which proposed nothing); bench/README.md, "Model check against measurement". The low
#: end is the method's floor h_min (`StepModel.step_overhead_floor`), never 0: the proposer
#: and the rejection sampler run on every step.
DEFAULT_STEP_OVERHEAD_HIGH = 3.0
#: The h assumed when nothing measured it. Not 0: that would call a window that proposed
#: nothing "no effect", when every one measured was a tax. Small: on a GPU the proposer and
#: the rejection sampler are a few percent of a step's weight reads. CPU vLLM here, where
#: the step is tiny, implied 0.3 to 1.05 for n-gram (bench/README.md): inside the band.
DEFAULT_STEP_OVERHEAD_RATIO = 0.1
#: B* is known within a factor of 4 either way when it is only configured.
DEFAULT_RIDGE_BATCH_FACTOR = 4.0
#: Within a factor of 2 when it is the roofline's: B* scales with the ratio of the two
#: datasheet peaks, and real kernels reach 60-90% of peak bandwidth and 50-80% of peak
#: FLOP/s, so that ratio is off by well under 2 either way; the bytes and FLOPs are the
#: engine's own count for this model at this load, where a configured B* is a guess.
ROOFLINE_RIDGE_BATCH_FACTOR = 2.0
#: A plain curve's own spread: the 10th and 90th percentiles of its points' relative
#: residuals bound the band of a speedup computed from it.
BAND_QUANTILES = (0.1, 0.9)
#: A flat curve (points without spread in tokens per step) is used this far from the
#: tokens per step it saw; a sloped one twice as far.
FLAT_REACH, SLOPED_REACH = 1.25, 2.0


@dataclass(frozen=True, slots=True)
class PlainCurve:
    """Time per output token of plain decoding against tokens per step: a + b*n (seconds).

    `residuals` are the 10th and 90th percentiles of (observed / fitted - 1)
    over the points it was fitted to; `tokens_range` the tokens per step they
    spanned (None: a curve from a profile, used at any load).
    """

    fixed_seconds: float
    per_token_seconds: float
    points: int = 0
    residuals: tuple[float, float] = (0.0, 0.0)
    tokens_range: tuple[float, float] | None = None

    @property
    def ridge_batch(self) -> float | None:
        """B* = a / b; None for a flat curve."""
        if self.per_token_seconds <= 0:
            return None
        return self.fixed_seconds / self.per_token_seconds

    def seconds_per_token(self, tokens_per_step: float) -> float:
        return self.fixed_seconds + self.per_token_seconds * tokens_per_step

    def covers(self, tokens_per_step: float) -> bool:
        """Whether the curve may be read at this load (a line is not extrapolated far)."""
        if self.tokens_range is None:
            return True
        reach = SLOPED_REACH if self.per_token_seconds > 0 else FLAT_REACH
        low, high = self.tokens_range
        return low / reach <= tokens_per_step <= high * reach


@dataclass(frozen=True, slots=True)
class Profile:
    """The step-time parameters of one (model, hardware, method), learned once and used by
    every endpoint of the same kind that names it (config `profile: NAME`).

    `source` is how it was learned: "control" (an endpoint that had a control),
    "sweep" (`spectax model fit` on a benchmark sweep) or "baseline" (an endpoint's own
    plain curve from before speculation, kept for that endpoint alone). `plain` is the
    plain curve in absolute time when the source had one.
    """

    name: str
    source: Literal["control", "sweep", "baseline"]
    learned_from: str
    ridge_batch: float
    step_overhead_ratio: float
    draft_cost_ratio: float | None = None
    plain: PlainCurve | None = None
    points: int = 0
    mean_abs_error_ratio: float | None = None
    #: The speculative method it was learned with (ngram, eagle, draft_model, ...); None
    #: when not recorded. h and c are the method's: another method takes only B* and the
    #: plain curve from it.
    method: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StepModel:
    """The counterfactual in force for an endpoint: B*, h, and where they came from."""

    ridge_batch: float = DEFAULT_RIDGE_BATCH
    step_overhead_ratio: float = DEFAULT_STEP_OVERHEAD_RATIO
    source: Source = "configured"
    curve: PlainCurve | None = None
    profile: str | None = None
    #: Relative half-width of §3b's speedup when it comes from a fitted profile (its
    #: mean |error| on the sweep it was fitted to); None: draw the band over ranges.
    relative_error: float | None = None
    #: h_min, the least h this endpoint's method allows (`formulas.step_overhead_floor`).
    step_overhead_floor: float = MIN_STEP_OVERHEAD_RATIO
    #: Whether h was measured for this method (a profile or sweep of the same method): its
    #: range is then its point. A profile of another method lends only B* and its curve.
    overhead_known: bool = False

    @property
    def step_overhead(self) -> float:
        """The h in force: the one given, never below the method's floor."""
        return max(self.step_overhead_ratio, self.step_overhead_floor)

    @property
    def basis(self) -> Basis:
        return BASIS_OF_SOURCE[self.source]

    def ridge_batch_range(self) -> tuple[float, float]:
        """Where B* may lie: known from any measured source, within x2 from the roofline,
        within x4 when configured."""
        if self.source == "roofline":
            f = ROOFLINE_RIDGE_BATCH_FACTOR
        elif self.source == "configured":
            f = DEFAULT_RIDGE_BATCH_FACTOR
        else:
            return (self.ridge_batch, self.ridge_batch)
        return (self.ridge_batch / f, self.ridge_batch * f)

    def step_overhead_range(self) -> tuple[float, float]:
        """Where h may lie: known from a profile or sweep of this method; otherwise from the
        method's floor to the plausible top (a plain curve alone says nothing of the
        speculative step's overhead)."""
        h = self.step_overhead
        if self.overhead_known:
            return (h, h)
        return (self.step_overhead_floor, max(DEFAULT_STEP_OVERHEAD_HIGH, h))


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeedupEstimate:
    """A speedup without a control, its band, and how it was reached."""

    speedup: float
    low: float
    high: float
    basis: Basis
    step_overhead_ratio: float | None  # the h it implies, or the h it assumed


def estimate_speedup(
    model: StepModel,
    *,
    output_tokens: float,
    accepted: float,
    draft_tokens: float,
    prompt_tokens: float,
    concurrency: float,
    c: float,
    time_per_output_token: float | None,
) -> SpeedupEstimate | None:
    """The speedup of a speculative window that has no control over the same span.

    With a plain curve that covers the window's load and the window's own time
    per output token: S = curve(n) / tpot, n the tokens per step a plain engine
    would carry (`plain_tokens_per_step`); the band is the curve's residual
    spread, and h is what S implies (`implied_step_overhead`), so break-even
    and crossover computed with it agree with S. Otherwise §3b's formula with
    the model's B* and h, its band drawn over their ranges (or, from a fitted
    profile, its mean error either way). None without output.
    """
    if output_tokens <= 0:
        return None
    curve = model.curve
    n = plain_tokens_per_step(concurrency, output_tokens, prompt_tokens)
    if curve is not None and time_per_output_token and curve.covers(n):
        # A time per token is noisy; physics is not: no window's speedup passes its ceiling
        # (a zero-draft window measured "1.08" against a baseline curve live, beside a tax).
        ceiling = speedup_ceiling(output_tokens, accepted, model.step_overhead_floor)
        raw = curve.seconds_per_token(n) / time_per_output_token
        speedup = min(raw, ceiling)
        res_low, res_high = curve.residuals
        h = implied_step_overhead(
            output_tokens,
            accepted,
            draft_tokens,
            concurrency,
            curve.ridge_batch or model.ridge_batch,
            c,
            speedup,
        )
        low, high = min(raw * (1 + res_low), ceiling), min(raw * (1 + res_high), ceiling)
        return SpeedupEstimate(
            speedup=speedup, low=low, high=high, basis=model.basis, step_overhead_ratio=h
        )

    def s(ridge: float, h: float) -> float:
        value = modelled_speedup(output_tokens, accepted, draft_tokens, concurrency, ridge, c, h)
        assert value is not None
        return value

    h = model.step_overhead
    speedup = s(model.ridge_batch, h)
    basis: Basis = "profile" if model.source in ("profile", "sweep") else "default"
    if basis == "profile" and model.relative_error is not None and model.overhead_known:
        e = model.relative_error
        return SpeedupEstimate(
            speedup=speedup,
            low=speedup * (1 - e),
            high=speedup * (1 + e),
            basis=basis,
            step_overhead_ratio=h,
        )
    corners = [s(b, x) for b in model.ridge_batch_range() for x in model.step_overhead_range()]
    return SpeedupEstimate(
        speedup=speedup,
        low=min(*corners, speedup),
        high=max(*corners, speedup),
        basis=basis,
        step_overhead_ratio=h,
    )


def roofline_estimates(window: Window) -> tuple[float, float, float, float] | None:
    """(FLOPs, bytes read, tokens, steps) per GPU over the window, for
    `roofline_ridge_batch`: from the models whose engine estimated FLOPs (vLLM with
    --enable-mfu-metrics; 0 without) and counted its steps. None when none did."""
    flops = read = tokens = steps = 0.0
    for counts in window.models.values():
        if counts.iteration_tokens is not None and counts.estimated_flops > 0:
            flops += counts.estimated_flops
            read += counts.estimated_read_bytes
            tokens += counts.iteration_tokens.sum
            steps += counts.iteration_tokens.count
    return (flops, read, tokens, steps) if flops > 0 and steps > 0 else None


#: How far from 1 a band's end must be to decide: rounding, not physics (a window that
#: proposed nothing under h = 0 once came out 0.9999999999999999 and flipped to tax).
VERDICT_TOLERANCE = 1e-9


def verdict_of_band(low: float, high: float) -> Literal["pays", "tax", "uncertain"]:
    """pays when even the low end is above 1, tax when even the high end is below."""
    if low > 1.0 + VERDICT_TOLERANCE:
        return "pays"
    if high < 1.0 - VERDICT_TOLERANCE:
        return "tax"
    return "uncertain"


def plain_tokens_per_step(concurrency: float, output_tokens: float, prompt_tokens: float) -> float:
    """Tokens a plain engine step would carry at this load: one decode token for each of the
    B running requests, plus the prompt tokens prefilled alongside, B*P/G per step (plain
    decoding takes G/B steps for G output tokens). Batch floored at 1, as everywhere."""
    if output_tokens <= 0:
        return max(concurrency, 1.0)
    return max(concurrency, 1.0) * (1.0 + prompt_tokens / output_tokens)


def fit_plain_curve(
    points: Sequence[tuple[float, float]], min_points: int, min_spread: float
) -> PlainCurve | None:
    """A plain curve through (tokens per step, seconds per output token) points, or None
    (`fit_or_refusal` says why)."""
    fit = fit_or_refusal(points, min_points, min_spread)
    return fit if isinstance(fit, PlainCurve) else None


def fit_or_refusal(
    points: Sequence[tuple[float, float]], min_points: int, min_spread: float
) -> PlainCurve | str:
    """A plain curve through (tokens per step, seconds per output token) points, or why not.

    Theil-Sen (median pairwise slope), so a few odd windows cannot drag it. Refused, with
    the reason, rather than stored as a source: fewer points than `min_points`; loads that
    do not spread by `min_spread` (a flat line has B* = inf: it says nothing of how a step
    grows with its batch); a negative intercept or a slope not above 0 (noise, or a
    machine so loaded that a step's fixed cost drowns in it).
    """
    if len(points) < min_points:
        return f"{len(points)} windows, {min_points} needed"
    xs = [x for x, _ in points]
    low, high = min(xs), max(xs)
    if low <= 0:
        return "a window without tokens per step"
    if high < min_spread * low:
        return (
            f"the windows' loads did not spread ({low:.1f}-{high:.1f} tokens per step, "
            f"{min_spread:g}x needed): a flat line cannot tell B*"
        )
    slopes = [
        (q[1] - p[1]) / (q[0] - p[0])
        for i, p in enumerate(points)
        for q in points[i + 1 :]
        if q[0] != p[0]
    ]
    b = statistics.median(slopes)
    a = statistics.median(y - b * x for x, y in points)
    if a <= 0 or b <= 0:
        return (
            f"a = {a * 1e3:.3f} ms, b = {b * 1e3:.4f} ms/token from {len(points)} windows "
            f"({low:.1f}-{high:.1f} tokens per step): a step's fixed cost and its cost "
            "per token must both be positive"
        )
    relative = sorted(y / (a + b * x) - 1.0 for x, y in points)
    q_low, q_high = BAND_QUANTILES
    residuals = (_quantile(relative, q_low), _quantile(relative, q_high))
    return PlainCurve(a, b, len(points), residuals, (low, high))


def _quantile(ordered: Sequence[float], q: float) -> float:
    position = q * (len(ordered) - 1)
    i = int(position)
    j = min(i + 1, len(ordered) - 1)
    return ordered[i] + (ordered[j] - ordered[i]) * (position - i)
