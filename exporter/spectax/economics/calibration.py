"""Calibrating the ridge batch B* = a/b from an endpoint's own step times (ECONOMICS.md §3).

Each history window gives one point: mean tokens per engine step (from
`vllm:iteration_tokens_total` sum/count) against mean step time (from
`vllm:inter_token_latency_seconds` sum/count). A straight line
`step = a + b*tokens` through them gives the fixed per-step cost `a` and the
cost per token `b`. The fit is Theil-Sen (the median of pairwise slopes), so a
few odd windows (a compile pause, a preemption storm) cannot drag it.

A fit is used only when it is sound: enough windows, real spread in tokens
per step (otherwise the slope is noise), a positive intercept and slope, and
a plausible B* (1 to 4096 requests).
Otherwise the configured B* stays in force.

At fleet scale two costs matter: a day of points per endpoint is kept packed
(`StepHistory`, 16 bytes a point), and Theil-Sen over a day's 288 points takes
~12 ms (41,000 pairs), so a monitor refits once an hour, not every window.
"""

from __future__ import annotations

import statistics
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spectax.pipeline.windows import Window

MIN_WINDOWS = 8
MIN_SPREAD = 1.5  # largest mean tokens/step at least 1.5x the smallest
# A B* outside this range means the slope is noise (step time flat in tokens), not a GPU.
PLAUSIBLE_RIDGE_BATCH = (1.0, 4096.0)


@dataclass(frozen=True, slots=True)
class StepPoint:
    tokens_per_step: float
    step_seconds: float


@dataclass(frozen=True, slots=True)
class RidgeFit:
    a_seconds: float
    b_seconds_per_token: float
    points: int

    @property
    def ridge_batch(self) -> float:
        return self.a_seconds / self.b_seconds_per_token


class StepHistory:
    """The last `capacity` step points, packed as pairs of doubles: for 2,000 endpoints a
    day of 5-minute windows is 9 MB this way, 46 MB as point objects."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._xy = array("d")

    def __len__(self) -> int:
        return len(self._xy) // 2

    def extend(self, points: Iterable[StepPoint]) -> None:
        for point in points:
            self._xy.extend((point.tokens_per_step, point.step_seconds))
        excess = len(self._xy) - 2 * self.capacity
        if excess > 0:
            del self._xy[:excess]

    def points(self) -> list[StepPoint]:
        xy = self._xy
        return [StepPoint(xy[i], xy[i + 1]) for i in range(0, len(xy), 2)]


def step_point(window: Window) -> StepPoint | None:
    """The window's mean tokens per step and mean step time, summed over models.

    vLLM's `iteration_tokens_total` counts prompt tokens plus *emitted*
    tokens, but a speculating step computes every verified token, rejected
    drafts included: `Dt - A` more than it emitted. They are added back, so
    the fit sees the tokens the GPU actually processed.
    """
    tokens = steps = latency = latency_count = 0.0
    for counts in window.models.values():
        if counts.iteration_tokens is not None:
            rejected = (counts.draft_tokens or 0.0) - (counts.accepted_tokens or 0.0)
            tokens += counts.iteration_tokens.sum + max(rejected, 0.0)
            steps += counts.iteration_tokens.count
        if counts.inter_token_latency is not None:
            latency += counts.inter_token_latency.sum
            latency_count += counts.inter_token_latency.count
    if steps <= 0 or latency_count <= 0 or tokens <= 0:
        return None
    return StepPoint(tokens / steps, latency / latency_count)


def theil_sen(points: Sequence[StepPoint]) -> tuple[float, float] | None:
    """(intercept, slope): the median pairwise slope, and the median intercept at that slope."""
    slopes = [
        (q.step_seconds - p.step_seconds) / (q.tokens_per_step - p.tokens_per_step)
        for i, p in enumerate(points)
        for q in points[i + 1 :]
        if q.tokens_per_step != p.tokens_per_step
    ]
    if not slopes:
        return None
    slope = statistics.median(slopes)
    intercept = statistics.median(p.step_seconds - slope * p.tokens_per_step for p in points)
    return intercept, slope


def can_fit(
    points: Sequence[StepPoint], min_windows: int = MIN_WINDOWS, min_spread: float = MIN_SPREAD
) -> bool:
    """Enough windows, spread enough in tokens per step, for a fit to be worth computing
    (cheap; the fit itself is ~12 ms over a day of points)."""
    if len(points) < min_windows:
        return False
    xs = [p.tokens_per_step for p in points]
    return min(xs) > 0 and max(xs) >= min_spread * min(xs)


def fit_ridge_batch(
    points: Sequence[StepPoint], min_windows: int = MIN_WINDOWS, min_spread: float = MIN_SPREAD
) -> RidgeFit | None:
    """A sound fit of step = a + b*tokens, or None when the data cannot support one."""
    if not can_fit(points, min_windows, min_spread):
        return None
    fit = theil_sen(points)
    if fit is None:
        return None
    a, b = fit
    if a <= 0 or b <= 0:
        return None
    result = RidgeFit(a_seconds=a, b_seconds_per_token=b, points=len(points))
    low, high = PLAUSIBLE_RIDGE_BATCH
    return result if low <= result.ridge_batch <= high else None
