"""B*, h and c fitted to a benchmark sweep (ECONOMICS.md §3b; `spectax model fit`).

A sweep is the same speculative server and its plain twin measured at several
concurrencies: each row gives the measured speedup, the acceptance length tau
and the draft tokens per step K. §3b's per-step speedup at batch B,

    S = tau*(r + 1) / (r*(1 + h) + 1 + K + c*K*(r + 1)),   r = B*/B,

divided by tau is `(B* + B) / (B*·(1 + h + c·K) + B·(1 + K + c·K))`: it tends
to `1/(1 + h + c·K)` at small batch and to `1/(1 + K + c·K)` at large batch, and
B* sets where it turns. So c is read off the large-batch end, h off the small-batch
end and B* off the turn: all three are identified only by a sweep that spans both
sides of the ridge.

The fit stays within physics: h >= h_min (the method's floor,
`formulas.step_overhead_floor`: the proposer runs on every step), B* >= 1, c >= 0.
It minimises the squared relative error `sum((modelled/measured - 1)^2)`: a 2%
miss weighs the same at S = 0.5 as at S = 2. No numerical library: a coarse grid
finds the basin (B* log-spaced, h and c linear), and Nelder-Mead within the box
refines it. Pure and deterministic.

Each fitted parameter gets a 95% interval by profile likelihood: the parameter is
held at a value, the others re-fitted, and the value is inside while the error
stays within `CHI2_95` times the rows' noise of the best fit's. Deterministic
(no resampling), and it says what a bootstrap over a handful of rows cannot:
whether the error stays flat all the way to a bound. A parameter whose estimate
sits on a bound, or whose interval reaches one, is not pinned by the sweep.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from spectax.economics.formulas import (
    MIN_STEP_OVERHEAD_RATIO,
    gpu_time_with_speculation,
    gpu_time_without_speculation,
    modelled_speedup,
)

#: The search box: B* from a memory-bound toy to a saturated accelerator (B* >= 1: below
#: one request every step is compute-bound), h from the method's floor to six times a
#: plain step's fixed cost, c from free (n-gram) to a draft model twice the target's
#: cost per token. Only the floors are physics; the tops are where the search stops.
RIDGE_BATCH_BOUNDS = (1.0, 4096.0)
STEP_OVERHEAD_MAX = 5.0
STEP_OVERHEAD_BOUNDS = (MIN_STEP_OVERHEAD_RATIO, STEP_OVERHEAD_MAX)
DRAFT_COST_BOUNDS = (0.0, 2.0)
GRID_POINTS = (37, 23, 21)  # B* (3 per octave), h (~0.22 apart), c (0.1 apart)
PARAMETERS = ("ridge_batch_requests", "step_overhead_ratio", "draft_cost_ratio")

#: The profile-likelihood interval: the 95% point of chi-squared with one degree of freedom.
CONFIDENCE = 0.95
CHI2_95 = 3.841
#: No sweep row is believed to better than 1%: a noise-free synthetic sweep would otherwise
#: get intervals of zero width, and live rows' own run-to-run spread is 3-10% (the `+-`
#: column of bench/README.md §3b, median 5.8%).
MIN_ROW_NOISE = 0.01
SNAP = 1e-4  # a coordinate this share of its range from a bound is tried on the bound
PROFILE_GRID = 7  # coarse points per free axis, to restart each profile point from
PROFILE_BISECTIONS = 12  # to 1/4096 of the box: B* to 0.2%, h to 0.001


class SweepError(ValueError):
    """A sweep that cannot be fitted; the message is one line for the user."""


@dataclass(frozen=True, slots=True)
class SweepRow:
    """One concurrency level of a sweep: measured speedup, tau and K (per request-step).

    `num_speculative_tokens` may be fractional (draft tokens per step, when not
    every step drafted) and 0 (a speculative server that proposed nothing: it
    still paid the overhead h). `draft_cost_ratio`: this row's c, when known.
    """

    concurrency: float
    speedup: float
    acceptance_length: float
    num_speculative_tokens: float
    draft_cost_ratio: float | None = None


@dataclass(frozen=True, slots=True)
class FittedRow:
    row: SweepRow
    modelled: float

    @property
    def measured(self) -> float:
        return self.row.speedup

    @property
    def error_ratio(self) -> float:
        """modelled / measured - 1: above 0 the model is optimistic."""
        return self.modelled / self.row.speedup - 1.0


@dataclass(frozen=True, slots=True)
class Interval:
    """One fitted parameter, its 95% profile-likelihood interval and its search range.

    `low_open` / `high_open`: the error stays within noise all the way to that end of
    the range, so the sweep does not bound the parameter on that side (the range does).
    """

    name: str
    value: float
    low: float
    high: float
    bounds: tuple[float, float]
    at_bound: bool
    low_open: bool
    high_open: bool

    @property
    def pinned(self) -> bool:
        """The sweep, not the search range, decides the value: no end reaches a bound."""
        return not (self.at_bound or self.low_open or self.high_open)


@dataclass(frozen=True, slots=True)
class SweepFit:
    ridge_batch: float
    step_overhead_ratio: float
    #: The fitted c; else the one c every row used (None when rows gave different ones).
    draft_cost_ratio: float | None
    draft_cost_fitted: bool
    rows: tuple[FittedRow, ...]
    #: Names of the parameters that ended on a bound of their range (a floor of physics, or
    #: the search's top): the sweep would take them past it. Not pinned, as `not_pinned`.
    bounded: tuple[str, ...] = ()
    #: Each fitted parameter's interval (B*, h, then c when fitted); () when not computed.
    intervals: tuple[Interval, ...] = ()
    #: The rows' relative noise the intervals assume (rms error, at least MIN_ROW_NOISE).
    row_noise: float = 0.0
    #: The floor h was fitted above (h_min of the method).
    step_overhead_floor: float = MIN_STEP_OVERHEAD_RATIO

    @property
    def mean_abs_error_ratio(self) -> float:
        return sum(abs(r.error_ratio) for r in self.rows) / len(self.rows)

    @property
    def not_pinned(self) -> tuple[str, ...]:
        """The parameters this sweep does not decide: at a bound, or flat to one."""
        return tuple(i.name for i in self.intervals if not i.pinned)


def row_speedup(row: SweepRow, ridge_batch: float, c: float, h: float) -> float:
    """§3b's per-step speedup for one row.

    This is `speedup_per_step` written as one request-step of `modelled_speedup`
    (G = tau, A = tau - 1, Dt = K), which stays §3b at K = 0: there
    `speedup_per_step` means "speculation off" (S = 1), whereas a sweep row at
    K = 0 is a speculative server that proposed nothing and still paid h.
    """
    s = modelled_speedup(
        row.acceptance_length,
        row.acceptance_length - 1.0,
        row.num_speculative_tokens,
        row.concurrency,
        ridge_batch,
        c,
        h,
    )
    assert s is not None  # acceptance_length >= 1 is checked by fit_sweep
    return s


def sum_squared_error(
    rows: Sequence[SweepRow], cs: Sequence[float]
) -> Callable[[float, float, float | None], float]:
    """`loss(B*, h, c)`: §3b's squared relative error over the rows, c None for each row's.

    `row_speedup` over one request-step, the rows' constants taken out of the loop: the
    fit and its intervals evaluate it ~40,000 times.
    """
    consts = [
        (r.acceptance_length, r.speedup, max(r.concurrency, 1.0), r.num_speculative_tokens, rc)
        for r, rc in zip(rows, cs, strict=True)
    ]

    def loss(ridge_batch: float, h: float, c: float | None) -> float:
        total = 0.0
        for tau, measured, b, k, row_c in consts:
            r = ridge_batch / b
            t_spec = gpu_time_with_speculation(tau, tau - 1.0, k, r, row_c if c is None else c, h)
            total += (gpu_time_without_speculation(tau, r) / t_spec / measured - 1.0) ** 2
        return total

    return loss


def fit_sweep(
    rows: Sequence[SweepRow],
    fit_draft_cost: bool,
    draft_cost_ratio: float = 0.0,
    step_overhead_floor: float = MIN_STEP_OVERHEAD_RATIO,
    intervals: bool = True,
    draft_cost_floor: float = 0.0,
) -> SweepFit:
    """Fit B*, h and, with `fit_draft_cost`, one c for every row, h >= `step_overhead_floor`.

    Without `fit_draft_cost` each row uses its own `draft_cost_ratio`, else
    `draft_cost_ratio` (the method's default). Fitting c over rows that give
    their own is refused: which one would be meant is ambiguous. `intervals`: also
    each parameter's profile-likelihood interval (~3x the fit's own time).
    """
    _check(rows, fit_draft_cost)
    cs = [r.draft_cost_ratio if r.draft_cost_ratio is not None else draft_cost_ratio for r in rows]
    loss = sum_squared_error(rows, cs)
    bounds = search_box(fit_draft_cost, step_overhead_floor, draft_cost_floor)

    def objective(x: Sequence[float]) -> float:
        return loss(math.exp(x[0]), x[1], x[2] if fit_draft_cost else None)

    start = min(_grid(bounds, GRID_POINTS), key=objective)
    best = _refine(objective, start, bounds)
    ridge_batch, h = math.exp(best[0]), best[1]
    c = best[2] if fit_draft_cost else None
    fitted = tuple(
        FittedRow(row, row_speedup(row, ridge_batch, row_c if c is None else c, h))
        for row, row_c in zip(rows, cs, strict=True)
    )
    bounded = tuple(
        name
        for name, value, (lo, hi) in zip(PARAMETERS, best, bounds, strict=False)
        if _on_edge(value, lo, hi)
    )
    common_c = c if c is not None else (cs[0] if len(set(cs)) == 1 else None)
    best_error = objective(best)
    noise = row_noise(best_error, len(rows), len(bounds))
    found: tuple[Interval, ...] = ()
    if intervals:
        threshold = best_error + CHI2_95 * noise**2
        found = tuple(_interval(objective, best, j, bounds, threshold) for j in range(len(bounds)))
    return SweepFit(
        ridge_batch,
        h,
        common_c,
        fit_draft_cost,
        fitted,
        bounded,
        found,
        noise,
        step_overhead_floor,
    )


def search_box(
    fit_draft_cost: bool, step_overhead_floor: float, draft_cost_floor: float = 0.0
) -> list[tuple[float, float]]:
    """The box the fit searches: log B*, h from its floor, and c when fitted, from its floor
    (a drafter of known size: its share of the target's weights, read on every pass)."""
    h_bounds = (step_overhead_floor, max(STEP_OVERHEAD_MAX, step_overhead_floor + 1.0))
    log_ridge = (math.log(RIDGE_BATCH_BOUNDS[0]), math.log(RIDGE_BATCH_BOUNDS[1]))
    low, high = DRAFT_COST_BOUNDS
    c_bounds = (max(low, draft_cost_floor), max(high, draft_cost_floor + 1.0))
    return [log_ridge, h_bounds, *([c_bounds] if fit_draft_cost else [])]


def row_noise(best_error: float, rows: int, parameters: int) -> float:
    """The rows' relative noise: the best fit's rms error over the degrees of freedom left
    (one, when the rows are no more than the parameters: their misfit is then all there
    is to go by), at least `MIN_ROW_NOISE`."""
    return max(MIN_ROW_NOISE, math.sqrt(best_error / max(rows - parameters, 1)))


def _on_edge(value: float, lo: float, hi: float) -> bool:
    return min(value - lo, hi - value) < 1e-6 * (hi - lo)


def _interval(
    objective: Callable[[Sequence[float]], float],
    best: Sequence[float],
    j: int,
    bounds: Sequence[tuple[float, float]],
    threshold: float,
) -> Interval:
    """Parameter j's profile-likelihood interval: from the estimate toward each bound, the
    farthest value at which the others, re-fitted, keep the error within `threshold`."""
    others = [b for i, b in enumerate(bounds) if i != j]
    starts = _grid(others, (PROFILE_GRID,) * len(others))
    known: dict[float, list[float]] = {best[j]: [v for i, v in enumerate(best) if i != j]}

    def profile(value: float) -> float:
        def sub(y: Sequence[float]) -> float:
            return objective([*y[:j], value, *y[j:]])

        nearest = known[min(known, key=lambda v: abs(v - value))]
        start = min([nearest, *starts], key=sub)
        y = _refine(sub, start, others, 400, 1e-10)
        known[value] = y
        return sub(y)

    lo, hi = bounds[j]
    low, low_open = _reach(profile, best[j], lo, threshold)
    high, high_open = _reach(profile, best[j], hi, threshold)
    box = RIDGE_BATCH_BOUNDS if j == 0 else (lo, hi)

    def scale(x: float) -> float:  # B* is searched as its log; its ends exactly as given
        return box[0] if x == lo else box[1] if x == hi else math.exp(x) if j == 0 else x

    return Interval(
        PARAMETERS[j],
        scale(best[j]),
        scale(low),
        scale(high),
        box,
        _on_edge(best[j], lo, hi),
        low_open,
        high_open,
    )


def _reach(
    profile: Callable[[float], float], start: float, edge: float, threshold: float
) -> tuple[float, bool]:
    """(how far toward `edge` the profile stays within `threshold`, whether to the edge).

    Bisection between the estimate (inside) and the edge: the first crossing found.
    """
    if abs(edge - start) < 1e-9 or profile(edge) <= threshold:
        return edge, True
    inside, outside = start, edge
    for _ in range(PROFILE_BISECTIONS):
        middle = (inside + outside) / 2
        if profile(middle) <= threshold:
            inside = middle
        else:
            outside = middle
    return (inside + outside) / 2, False


def _check(rows: Sequence[SweepRow], fit_draft_cost: bool) -> None:
    parameters = 3 if fit_draft_cost else 2
    if len(rows) < parameters:
        raise SweepError(
            f"{len(rows)} row(s) cannot fit {parameters} parameters: give at least {parameters}"
        )
    if len({r.concurrency for r in rows}) < 2:
        raise SweepError("every row is at one concurrency: B* needs at least two levels")
    for r in rows:
        if not (r.speedup > 0 and r.acceptance_length >= 1 and r.num_speculative_tokens >= 0):
            raise SweepError(
                f"row at concurrency {r.concurrency:g}: speedup must be > 0, "
                "acceptance_length >= 1 and num_speculative_tokens >= 0"
            )
        if r.concurrency <= 0:
            raise SweepError(f"concurrency {r.concurrency:g}: must be > 0")
    if fit_draft_cost and any(r.draft_cost_ratio is not None for r in rows):
        raise SweepError("the rows give draft_cost_ratio: fit it or give it, not both")


def _grid(bounds: Sequence[tuple[float, float]], counts: Sequence[int]) -> list[list[float]]:
    """Every point of an even grid over the box, `counts[i]` values along axis i."""
    axes = [
        [lo + (hi - lo) * i / (n - 1) for i in range(n)]
        for (lo, hi), n in zip(bounds, counts, strict=False)
    ]
    points: list[list[float]] = [[]]
    for axis in axes:
        points = [[*p, v] for p in points for v in axis]
    return points


def _refine(
    f: Callable[[Sequence[float]], float],
    start: Sequence[float],
    bounds: Sequence[tuple[float, float]],
    iterations: int = 2000,
    tolerance: float = 1e-14,
) -> list[float]:
    """Nelder-Mead in the box from `start`, then each coordinate that ended a hair from a
    bound put on it when that is no worse: the search approaches a bound, never lands."""
    x = _nelder_mead(f, start, bounds, [(hi - lo) / 20 for lo, hi in bounds], iterations, tolerance)
    value = f(x)
    for i, (lo, hi) in enumerate(bounds):
        for edge in (lo, hi):
            if 0 < abs(x[i] - edge) < SNAP * (hi - lo):
                snapped = [*x[:i], edge, *x[i + 1 :]]
                if (snapped_value := f(snapped)) <= value:
                    x, value = snapped, snapped_value
    return x


def _nelder_mead(
    f: Callable[[Sequence[float]], float],
    start: Sequence[float],
    bounds: Sequence[tuple[float, float]],
    steps: Sequence[float],
    iterations: int = 2000,
    tolerance: float = 1e-14,
) -> list[float]:
    """Minimise f in the box from `start` (the textbook reflect/expand/contract/shrink).

    A trial point outside the box counts as infinitely bad, so the simplex contracts back
    inside: clamped onto a bound instead, it collapsed flat against it, and a noise-free
    sweep of h = 0.0625 started at the floor stopped there (B* 388 for 420, 1% a row).
    """

    def value(x: Sequence[float]) -> float:
        inside = all(lo <= v <= hi for v, (lo, hi) in zip(x, bounds, strict=True))
        return f(x) if inside else math.inf

    first = [min(max(v, lo), hi) for v, (lo, hi) in zip(start, bounds, strict=True)]
    simplex = [first]
    for i, step in enumerate(steps):
        vertex = list(first)
        vertex[i] += step if vertex[i] + step <= bounds[i][1] else -step
        simplex.append(vertex)
    values = [value(x) for x in simplex]
    for _ in range(iterations):
        order = sorted(range(len(simplex)), key=values.__getitem__)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] <= tolerance * (1.0 + abs(values[0])):
            break
        centroid = [sum(col) / (len(simplex) - 1) for col in zip(*simplex[:-1], strict=True)]

        worst = simplex[-1]

        def toward(
            t: float, centroid: list[float] = centroid, worst: list[float] = worst
        ) -> list[float]:
            return [c + t * (w - c) for c, w in zip(centroid, worst, strict=True)]

        reflected = toward(-1.0)
        fr = value(reflected)
        if fr < values[0]:
            expanded = toward(-2.0)
            fe = value(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = toward(0.5 if fr >= values[-1] else -0.5)
            fc = value(contracted)
            if fc < min(fr, values[-1]):
                simplex[-1], values[-1] = contracted, fc
            else:
                best = simplex[0]
                simplex = [best] + [
                    [b + 0.5 * (v - b) for b, v in zip(best, x, strict=True)] for x in simplex[1:]
                ]
                values = [values[0]] + [value(x) for x in simplex[1:]]
    return simplex[min(range(len(simplex)), key=values.__getitem__)]
