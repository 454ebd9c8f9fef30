"""Calibrating the plain curve from an endpoint's own windows without speculation (§3b).

Each history window in which nothing speculated gives one point: the tokens a
plain step carried (`plain_tokens_per_step`: running requests while the endpoint was
busy, plus the prompt tokens prefilled alongside) against the mean time per output
token (from `vllm:request_time_per_output_token_seconds` sum/count), which for plain
decoding is the step time. Both are the busy time's: a window idle for part of its
span ran its steps at the batch of its busy seconds, not at the time-average that
counts the idle ones (which, floored at one request, put a window of one request and
one of eight busy a third of the time at 3.0 and 4.2 tokens per step: a live control's
loads then did not spread enough to fit). A line `a + b*n` through them (Theil-Sen, so a few
odd windows cannot drag it: `fit_plain_curve`) is the counterfactual for a
speculative endpoint: this endpoint's own, before speculation was turned on
(`baseline`), or its control's (`control`). B* = a/b.

A speculating window gives no point: its step times are not what the same
output would have cost without speculation, which is why §3's calibration
from them overestimated n-gram by 30-65% (bench/README.md).

At fleet scale two costs matter: a day of points per endpoint is kept packed
(`StepHistory`, 16 bytes a point), and Theil-Sen over a day's 288 points takes
~12 ms (41,000 pairs), so an endpoint refits once an hour, not every window
(`PlainCalibration`).
"""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from typing import overload

from spectax.economics.step_model import PlainCurve, fit_or_refusal, plain_tokens_per_step
from spectax.pipeline.windows import Window

MIN_WINDOWS = 8
MIN_SPREAD = 1.5  # largest tokens/step at least 1.5x the smallest, for a sloped line
MIN_REQUESTS = 10  # finished requests a window needs for its time per token to count
REFIT_EVERY = 12  # new points (an hour of 5-minute windows) between two fits
# Below this many points a fit costs under ~0.1 ms (Theil-Sen is quadratic): a refused fit
# is retried at every window, so warm-up windows cannot hold a sound fit back an hour.
CHEAP_FIT_POINTS = 48


@dataclass(frozen=True, slots=True)
class StepPoint:
    tokens_per_step: float
    step_seconds: float  # mean time per output token: for plain decoding, the step time


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

    def pairs(self) -> list[tuple[float, float]]:
        xy = self._xy
        return [(xy[i], xy[i + 1]) for i in range(0, len(xy), 2)]


#: A model speculated in a window when any of these is counted (not None): SGLang and TGI
#: count drafts but no drafted tokens. A restart's query of the store leaves out the windows
#: this says speculated, and reads nothing of them (spectax.store's `restore`).
SPECULATION_FIELDS = ("draft_tokens", "drafts")


#: The fields of each model's Counts that `plain_point` reads (besides the window's busy
#: seconds): all a restart reads back of the day of windows it feeds the calibration, which
#: made whole were ~40 s of a 2,000-endpoint start-up (spectax.store's `restore`).
PLAIN_POINT_FIELDS = (
    *SPECULATION_FIELDS,
    "generation_tokens",
    "prompt_tokens",
    "running_seconds",
    "time_per_output_token",
)


def speculated(window: Window) -> bool:
    """Whether any model of the window speculated: then it gives no plain point."""
    return any(
        getattr(counts, field) is not None
        for counts in window.models.values()
        for field in SPECULATION_FIELDS
    )


def plain_point(window: Window, min_requests: int = MIN_REQUESTS) -> StepPoint | None:
    """The window's plain-decoding point, summed over models; None when any model
    speculated or too few requests finished for their time per token to mean much."""
    if speculated(window):
        return None
    output = prompt = running = tpot_sum = tpot_count = 0.0
    for model, counts in window.models.items():
        output += counts.generation_tokens
        prompt += counts.prompt_tokens
        running += window.busy_concurrency(model)
        if counts.time_per_output_token is not None:
            tpot_sum += counts.time_per_output_token.sum
            tpot_count += counts.time_per_output_token.count
    if output <= 0 or tpot_count < min_requests or tpot_sum <= 0:
        return None
    return StepPoint(plain_tokens_per_step(running, output, prompt), tpot_sum / tpot_count)


class PlainCalibration:
    """One endpoint's plain points and the schedule of their fits.

    Fits at every window until a fit holds, then hourly. A refused fit is
    retried hourly too once the history is large: 2,000 endpoints refitting a
    day of points at each window boundary would stall the event loop ~24 s. The
    hourly fits are staggered by endpoint name: windows close at the same
    instant everywhere.
    """

    def __init__(self, endpoint: str, capacity: int, min_windows: int = MIN_WINDOWS):
        self._steps = StepHistory(capacity)
        self._min_windows = min_windows
        self._phase = zlib.crc32(endpoint.encode()) % REFIT_EVERY
        self._points_since_fit = self._phase
        self._refused = False  # the last fit was computed and found unsound
        self.fit: PlainCurve | None = None
        self.refusal: str | None = None  # why the last fit, from enough windows, was refused
        self.fits = 0  # fits computed, sound or not: what the schedule costs

    def __len__(self) -> int:
        """The step points kept."""
        return len(self._steps)

    def add(self, windows: Iterable[Window]) -> bool:
        """Add the windows' plain points and fit if one is due; True when a fit was computed
        (`fit` is then its result: a sound fit, or None)."""
        points = [p for p in map(plain_point, windows) if p is not None]
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
        history = self._steps.pairs()
        fit = fit_or_refusal(history, self._min_windows, MIN_SPREAD)
        self.fit = fit if isinstance(fit, PlainCurve) else None
        self._refused = self.fit is None and len(history) >= self._min_windows
        self.refusal = fit if isinstance(fit, str) and self._refused else None
        self.fits += 1
        return True


def draft_cost_from_overhead(overhead: float | None, window: Window | None) -> float | None:
    """c measured by the engine (TensorRT-LLM's draft overhead d = draft time / step time).

    A step of K drafts costs K*c target forwards of drafting plus one of verifying, so
    d = K*c / (K*c + 1) and c = d / ((1 - d) * K), K the window's draft tokens per draft.
    None when the engine does not measure d or the window drafted nothing: the
    configured c stays in force.
    """
    if overhead is None or window is None or not 0.0 < overhead < 1.0:
        return None
    draft_tokens = sum(c.draft_tokens or 0.0 for c in window.models.values())
    drafts = sum(c.drafts or 0.0 for c in window.models.values())
    if draft_tokens <= 0 or drafts <= 0:
        return None
    return overhead / ((1.0 - overhead) * (draft_tokens / drafts))


@overload
def draft_cost_in_force(
    configured: float, overheads: Iterable[float | None], window: Window | None
) -> float: ...
@overload
def draft_cost_in_force(
    configured: None, overheads: Iterable[float | None], window: Window | None
) -> float | None: ...
def draft_cost_in_force(
    configured: float | None, overheads: Iterable[float | None], window: Window | None
) -> float | None:
    """The c a window is assessed with: the one the engine measured (TensorRT-LLM's draft
    overhead, the largest of its models'), which beats any configured one, else the
    configured c. One rule for the daemon and `spectax assess`."""
    measured = draft_cost_from_overhead(max((o for o in overheads if o), default=None), window)
    return measured if measured is not None else configured
