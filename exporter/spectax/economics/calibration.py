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
~12 ms (41,000 pairs), so an endpoint refits once an hour, not every window
(`RidgeCalibration`).
"""

from __future__ import annotations

import statistics
import zlib
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spectax.pipeline.windows import Window

MIN_WINDOWS = 8
MIN_SPREAD = 1.5  # largest mean tokens/step at least 1.5x the smallest
# A B* outside this range means the slope is noise (step time flat in tokens), not a GPU.
PLAUSIBLE_RIDGE_BATCH = (1.0, 4096.0)
REFIT_EVERY = 12  # new points (an hour of 5-minute windows) between two fits
# Below this many points a fit costs under ~0.1 ms (Theil-Sen is quadratic): a refused fit
# is retried at every window, so warm-up windows cannot hold a sound fit back an hour.
CHEAP_FIT_POINTS = 48


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


class RidgeCalibration:
    """One endpoint's step points and the schedule of its fits.

    Fits at every window until a fit holds, then hourly. A refused fit (as on
    CPU vLLM's implausible B*) is retried hourly too once the history is
    large: 2,000 endpoints refitting a day of points at each window boundary
    would stall the event loop ~24 s. The hourly fits are staggered by
    endpoint name: windows close at the same instant everywhere.
    """

    def __init__(self, endpoint: str, capacity: int, min_windows: int = MIN_WINDOWS):
        self._steps = StepHistory(capacity)
        self._min_windows = min_windows
        self._phase = zlib.crc32(endpoint.encode()) % REFIT_EVERY
        self._points_since_fit = self._phase
        self._refused = False  # the last fit was computed and found unsound
        self.fit: RidgeFit | None = None
        self.fits = 0  # fits computed, sound or not: what the schedule costs

    def __len__(self) -> int:
        """The step points kept."""
        return len(self._steps)

    def add(self, windows: Iterable[Window]) -> bool:
        """Add the windows' step points and fit if one is due; True when a fit was computed
        (`fit` is then its result: a sound fit, or None)."""
        points = [p for p in map(step_point, windows) if p is not None]
        if not points:
            return False
        self._steps.extend(points)
        self._points_since_fit += len(points)
        refused = self._refused and len(self._steps) >= CHEAP_FIT_POINTS
        if self.fit is not None or refused:
            if self._points_since_fit < REFIT_EVERY:
                return False
            self._points_since_fit = 0
        else:
            # Until a fit is computed, at every window; the hourly cadence then starts at
            # this endpoint's phase (a restart restores every endpoint's day of points at
            # once: counted from there, all of them would refit at the same window).
            self._points_since_fit = self._phase
        history = self._steps.points()
        self.fit = fit_ridge_batch(history, self._min_windows)
        self._refused = self.fit is None and can_fit(history, self._min_windows)
        self.fits += 1
        return True
