"""B*, h and c fitted to a benchmark sweep (ECONOMICS.md §3b; `spectax model fit`).

A sweep is the same speculative server and its plain twin measured at several
concurrencies: each row gives the measured speedup, the acceptance length tau
and the draft tokens per step K. §3b's per-step speedup at batch B,

    S = tau*(r + 1) / (r*(1 + h) + 1 + K + c*K*(r + 1)),   r = B*/B,

divided by tau is `(B* + B) / (B*·(1 + h + c·K) + B·(1 + K + c·K))`: it tends
to `1/(1 + h + c·K)` at small batch and to `1/(1 + K + c·K)` at large batch, and
B* sets where it turns. So c is read off the large-batch end, h off the small-batch
end and B* off the turn: all three are identified only by a sweep that spans both
sides of the ridge. A fit that ends on a bound of its search box says so in `bounded`.

The fit minimises the squared relative error `sum((modelled/measured - 1)^2)`:
a 2% miss weighs the same at S = 0.5 as at S = 2. No numerical library: a
coarse grid finds the basin (B* log-spaced, h and c linear), and Nelder-Mead
within the box refines it. Pure and deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from spectax.economics.formulas import modelled_speedup

#: The search box: B* from a memory-bound toy to a saturated accelerator, h from a
#: speculative step cheaper than a plain one (fused kernels) to six times its fixed
#: cost, c from free (n-gram) to a draft model twice the target's cost per token.
RIDGE_BATCH_BOUNDS = (1.0, 4096.0)
STEP_OVERHEAD_BOUNDS = (-0.5, 5.0)
DRAFT_COST_BOUNDS = (0.0, 2.0)
GRID_POINTS = (37, 23, 21)  # B* (3 per octave), h (0.25 apart), c (0.1 apart)


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
class SweepFit:
    ridge_batch: float
    step_overhead_ratio: float
    #: The fitted c; else the one c every row used (None when rows gave different ones).
    draft_cost_ratio: float | None
    draft_cost_fitted: bool
    rows: tuple[FittedRow, ...]
    #: Names of the parameters that ended on a bound of the search box: not identified.
    bounded: tuple[str, ...] = ()

    @property
    def mean_abs_error_ratio(self) -> float:
        return sum(abs(r.error_ratio) for r in self.rows) / len(self.rows)


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


def fit_sweep(
    rows: Sequence[SweepRow], fit_draft_cost: bool, draft_cost_ratio: float = 0.0
) -> SweepFit:
    """Fit B*, h and, with `fit_draft_cost`, one c for every row.

    Without `fit_draft_cost` each row uses its own `draft_cost_ratio`, else
    `draft_cost_ratio` (the method's default). Fitting c over rows that give
    their own is refused: which one would be meant is ambiguous.
    """
    _check(rows, fit_draft_cost)
    cs = [r.draft_cost_ratio if r.draft_cost_ratio is not None else draft_cost_ratio for r in rows]

    def loss(ridge_batch: float, h: float, c: float | None) -> float:
        total = 0.0
        for row, row_c in zip(rows, cs, strict=True):
            modelled = row_speedup(row, ridge_batch, row_c if c is None else c, h)
            total += (modelled / row.speedup - 1.0) ** 2
        return total

    log_ridge = (math.log(RIDGE_BATCH_BOUNDS[0]), math.log(RIDGE_BATCH_BOUNDS[1]))
    bounds = [log_ridge, STEP_OVERHEAD_BOUNDS]
    if fit_draft_cost:
        bounds.append(DRAFT_COST_BOUNDS)

    def objective(x: Sequence[float]) -> float:
        return loss(math.exp(x[0]), x[1], x[2] if fit_draft_cost else None)

    start = min(_grid(bounds), key=objective)
    best = _nelder_mead(objective, start, bounds, [(hi - lo) / 20 for lo, hi in bounds])
    ridge_batch, h = math.exp(best[0]), best[1]
    c = best[2] if fit_draft_cost else None
    fitted = tuple(
        FittedRow(row, row_speedup(row, ridge_batch, row_c if c is None else c, h))
        for row, row_c in zip(rows, cs, strict=True)
    )
    names = ("ridge_batch_requests", "step_overhead_ratio", "draft_cost_ratio")
    bounded = tuple(
        name
        for name, value, (lo, hi) in zip(names, best, bounds, strict=False)
        if min(value - lo, hi - value) < 1e-6 * (hi - lo)
    )
    common_c = c if c is not None else (cs[0] if len(set(cs)) == 1 else None)
    return SweepFit(ridge_batch, h, common_c, fit_draft_cost, fitted, bounded)


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


def _grid(bounds: Sequence[tuple[float, float]]) -> list[list[float]]:
    axes = [
        [lo + (hi - lo) * i / (n - 1) for i in range(n)]
        for (lo, hi), n in zip(bounds, GRID_POINTS, strict=False)
    ]
    points: list[list[float]] = [[]]
    for axis in axes:
        points = [[*p, v] for p in points for v in axis]
    return points


def _nelder_mead(
    f: Callable[[Sequence[float]], float],
    start: Sequence[float],
    bounds: Sequence[tuple[float, float]],
    steps: Sequence[float],
    iterations: int = 2000,
    tolerance: float = 1e-14,
) -> list[float]:
    """Minimise f in the box from `start` (the textbook reflect/expand/contract/shrink;
    every trial point is clamped into the box, so the search never leaves it)."""

    def clamp(x: Sequence[float]) -> list[float]:
        return [min(max(v, lo), hi) for v, (lo, hi) in zip(x, bounds, strict=True)]

    simplex = [clamp(start)]
    for i, step in enumerate(steps):
        vertex = list(start)
        vertex[i] += step if vertex[i] + step <= bounds[i][1] else -step
        simplex.append(clamp(vertex))
    values = [f(x) for x in simplex]
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
            return clamp([c + t * (w - c) for c, w in zip(centroid, worst, strict=True)])

        reflected = toward(-1.0)
        fr = f(reflected)
        if fr < values[0]:
            expanded = toward(-2.0)
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = toward(0.5 if fr >= values[-1] else -0.5)
            fc = f(contracted)
            if fc < min(fr, values[-1]):
                simplex[-1], values[-1] = contracted, fc
            else:
                best = simplex[0]
                simplex = [best] + [
                    clamp([b + 0.5 * (v - b) for b, v in zip(best, x, strict=True)])
                    for x in simplex[1:]
                ]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    return simplex[min(range(len(simplex)), key=values.__getitem__)]
