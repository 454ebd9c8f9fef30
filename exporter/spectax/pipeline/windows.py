"""Counter deltas, restart detection and window accumulation.

Scrapes arrive as cumulative `EngineSample`s. Between two consecutive
samples of one endpoint there is an `Interval`: per model, the counter deltas
with Prometheus `rate()` semantics, the mean number of running requests, and
whether the engine restarted in between. Intervals are the only thing that is
summed; everything else (the sliding window behind the live gauges, the
aligned windows kept in history) is a sum of intervals, so the two can never
disagree.

Restarts: a changed `process_start_time_seconds`, or any counter going down
(data-parallel pages carry no process metrics). Across a restart every
counter's delta is its new value: the new process counted from zero.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from decimal import Decimal

from spectax.engines.base import EngineSample, Histogram, ModelSample

_COUNTERS = ("generation_tokens", "prompt_tokens", "requests_finished")
_SPEC_COUNTERS = ("drafts", "draft_tokens", "accepted_tokens")
_HISTOGRAMS = ("iteration_tokens", "inter_token_latency", "time_per_output_token")
_NAN = math.nan


@dataclass(frozen=True, slots=True)
class Counts:
    """Counter deltas of one model over some span of time (an interval or a window).

    `running_seconds` is the integral of running requests over time, so the
    mean concurrency of any sum of spans is `running_seconds / seconds`.
    """

    generation_tokens: float = 0.0
    prompt_tokens: float = 0.0
    requests_finished: float = 0.0
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    accepted_per_position: tuple[float, ...] = ()
    iteration_tokens: Histogram | None = None
    inter_token_latency: Histogram | None = None
    time_per_output_token: Histogram | None = None
    running_seconds: float = 0.0

    def __sub__(self, other: Counts) -> Counts:
        """What remains when `other`, a part of this sum, is taken out of it."""
        return Counts(
            generation_tokens=self.generation_tokens - other.generation_tokens,
            prompt_tokens=self.prompt_tokens - other.prompt_tokens,
            requests_finished=self.requests_finished - other.requests_finished,
            drafts=_sub_optional(self.drafts, other.drafts),
            draft_tokens=_sub_optional(self.draft_tokens, other.draft_tokens),
            accepted_tokens=_sub_optional(self.accepted_tokens, other.accepted_tokens),
            accepted_per_position=tuple(
                x - y
                for x, y in _zip_padded(self.accepted_per_position, other.accepted_per_position)
            ),
            iteration_tokens=_sub_histograms(self.iteration_tokens, other.iteration_tokens),
            inter_token_latency=_sub_histograms(
                self.inter_token_latency, other.inter_token_latency
            ),
            time_per_output_token=_sub_histograms(
                self.time_per_output_token, other.time_per_output_token
            ),
            running_seconds=self.running_seconds - other.running_seconds,
        )

    def pack(self) -> bytes:
        """These numbers as packed doubles (None as NaN: counter deltas are finite), about a
        fifth of the memory of the object and its floats. Bytes rather than an array: the
        garbage collector does not track bytes, and the sliding windows hold ~40,000 of
        these at 2,000 endpoints (each tracked object lengthens every full collection)."""
        histograms = (self.iteration_tokens, self.inter_token_latency, self.time_per_output_token)
        return array(
            "d",
            (
                self.generation_tokens,
                self.prompt_tokens,
                self.requests_finished,
                _NAN if self.drafts is None else self.drafts,
                _NAN if self.draft_tokens is None else self.draft_tokens,
                _NAN if self.accepted_tokens is None else self.accepted_tokens,
                self.running_seconds,
                *(_NAN if h is None else h.sum for h in histograms),
                *(_NAN if h is None else h.count for h in histograms),
                *self.accepted_per_position,
            ),
        ).tobytes()

    @classmethod
    def unpack(cls, data: bytes) -> Counts:
        packed = array("d")
        packed.frombytes(data)

        def optional(value: float) -> float | None:
            return None if math.isnan(value) else value

        def histogram(i: int) -> Histogram | None:
            return None if math.isnan(packed[7 + i]) else Histogram(packed[7 + i], packed[10 + i])

        return Counts(
            generation_tokens=packed[0],
            prompt_tokens=packed[1],
            requests_finished=packed[2],
            drafts=optional(packed[3]),
            draft_tokens=optional(packed[4]),
            accepted_tokens=optional(packed[5]),
            running_seconds=packed[6],
            iteration_tokens=histogram(0),
            inter_token_latency=histogram(1),
            time_per_output_token=histogram(2),
            accepted_per_position=tuple(packed[13:]),
        )

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            generation_tokens=self.generation_tokens + other.generation_tokens,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            requests_finished=self.requests_finished + other.requests_finished,
            drafts=_add_optional(self.drafts, other.drafts),
            draft_tokens=_add_optional(self.draft_tokens, other.draft_tokens),
            accepted_tokens=_add_optional(self.accepted_tokens, other.accepted_tokens),
            accepted_per_position=_add_positions(
                self.accepted_per_position, other.accepted_per_position
            ),
            iteration_tokens=_add_histograms(self.iteration_tokens, other.iteration_tokens),
            inter_token_latency=_add_histograms(
                self.inter_token_latency, other.inter_token_latency
            ),
            time_per_output_token=_add_histograms(
                self.time_per_output_token, other.time_per_output_token
            ),
            running_seconds=self.running_seconds + other.running_seconds,
        )


@dataclass(frozen=True, slots=True)
class Interval:
    """What happened on one endpoint between two consecutive successful scrapes."""

    start: float
    end: float
    models: dict[str, Counts]
    restarted: bool
    busy: bool
    spend_usd: Decimal = Decimal(0)
    cold_start_usd: Decimal = Decimal(0)
    draft_load_usd: Decimal = Decimal(0)

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Window:
    """A sum of intervals for one endpoint: the unit the economics and the store see."""

    start: float
    end: float
    seconds: float = 0.0
    busy_seconds: float = 0.0
    restarts: int = 0
    spend_usd: Decimal = Decimal(0)
    cold_start_usd: Decimal = Decimal(0)
    draft_load_usd: Decimal = Decimal(0)
    models: dict[str, Counts] = field(default_factory=dict)

    def time_per_output_token(self, model: str) -> float | None:
        """Mean seconds per output token of the requests that finished in the window."""
        counts = self.models.get(model)
        tpot = counts.time_per_output_token if counts is not None else None
        if tpot is None or tpot.count <= 0:
            return None
        return tpot.sum / tpot.count

    def concurrency(self, model: str) -> float:
        """Time-average of running requests for `model` over the covered seconds."""
        counts = self.models.get(model)
        if counts is None or self.seconds <= 0:
            return 0.0
        return counts.running_seconds / self.seconds

    def remove(self, interval: Interval, presence: dict[str, int]) -> Window:
        """This window without `interval`; `presence` counts each model's intervals."""
        models = dict(self.models)
        for name, counts in interval.models.items():
            presence[name] -= 1
            if presence[name] <= 0:
                del presence[name]
                models.pop(name, None)
            elif name in models:
                models[name] = models[name] - counts
        return replace(
            self,
            seconds=self.seconds - interval.seconds,
            busy_seconds=self.busy_seconds - (interval.seconds if interval.busy else 0.0),
            restarts=self.restarts - int(interval.restarted),
            spend_usd=self.spend_usd - interval.spend_usd,
            cold_start_usd=self.cold_start_usd - interval.cold_start_usd,
            draft_load_usd=self.draft_load_usd - interval.draft_load_usd,
            models=models,
        )

    def add(self, interval: Interval) -> Window:
        models = dict(self.models)
        for name, counts in interval.models.items():
            models[name] = models[name] + counts if name in models else counts
        return replace(
            self,
            seconds=self.seconds + interval.seconds,
            busy_seconds=self.busy_seconds + (interval.seconds if interval.busy else 0.0),
            restarts=self.restarts + int(interval.restarted),
            spend_usd=self.spend_usd + interval.spend_usd,
            cold_start_usd=self.cold_start_usd + interval.cold_start_usd,
            draft_load_usd=self.draft_load_usd + interval.draft_load_usd,
            models=models,
        )


MIN_MEASURED_REQUESTS = 10


def speedup_against_control(
    window: Window, control: Window | None, model: str, min_requests: int = MIN_MEASURED_REQUESTS
) -> float | None:
    """Measured speedup: the control's time per output token / this endpoint's, same span.

    The control serves the same model without speculation. Its model is
    matched by name, or taken as it is when both serve exactly one model.
    Each side needs `min_requests` finished requests: a ratio of two or three
    requests' timings says more about those requests than about speculation.
    """
    if control is None:
        return None
    counterpart = model
    if model not in control.models and len(control.models) == 1 and len(window.models) == 1:
        counterpart = next(iter(control.models))
    ours, theirs = window.models.get(model), control.models.get(counterpart)
    for side in (ours, theirs):
        timing = side.time_per_output_token if side is not None else None
        if timing is None or timing.count < min_requests or timing.sum <= 0:
            return None
    assert ours is not None and theirs is not None
    ours_tpot = window.time_per_output_token(model)
    theirs_tpot = control.time_per_output_token(counterpart)
    assert ours_tpot is not None and theirs_tpot is not None
    return theirs_tpot / ours_tpot


def restarted(previous: EngineSample, current: EngineSample) -> bool:
    """A new process: a changed start time, or any counter that went down."""
    before, after = previous.process_start_time_seconds, current.process_start_time_seconds
    if before is not None and after is not None and before != after:
        return True
    for name, now in current.models.items():
        then = previous.models.get(name)
        if then is not None and _any_counter_down(then, now):
            return True
    return False


def interval_between(
    previous: EngineSample, current: EngineSample, start: float, end: float
) -> Interval:
    """The deltas from `previous` (scraped at `start`) to `current` (scraped at `end`).

    A model seen for the first time in the same process has no delta yet (like
    a new series in Prometheus); after a restart every model counts from zero.
    """
    reset = restarted(previous, current)
    seconds = max(end - start, 0.0)
    models: dict[str, Counts] = {}
    for name, now in current.models.items():
        then = previous.models.get(name)
        if then is None and not reset:
            continue
        base = ModelSample() if reset or then is None else then
        running_before = then.requests_running if then is not None and not reset else 0.0
        models[name] = _delta(base, now, (running_before + now.requests_running) / 2 * seconds)
    busy = any(c.generation_tokens > 0 or c.running_seconds > 0 for c in models.values())
    return Interval(start=start, end=end, models=models, restarted=reset, busy=busy)


# An interval as the sliding window keeps it until it leaves, its counts packed: (start,
# end, restarted, busy, spend_usd, cold_start_usd, draft_load_usd, ((model, packed counts),
# ...)), the money as the Decimals' exact text. With 2,000 endpoints and 20 intervals each
# in the window, packing saves ~30 MB. A plain tuple of untracked values (numbers, str,
# bytes; Decimal objects are tracked from Python 3.13), not a class: the garbage collector
# stops tracking such tuples once it has seen them, so its full passes (a pause in
# scraping and in serving /metrics) skip the windows' ~40,000 intervals.
PackedInterval = tuple[float, float, bool, bool, str, str, str, tuple[tuple[str, bytes], ...]]


def pack_interval(interval: Interval) -> PackedInterval:
    return (
        interval.start,
        interval.end,
        interval.restarted,
        interval.busy,
        str(interval.spend_usd),
        str(interval.cold_start_usd),
        str(interval.draft_load_usd),
        tuple((name, counts.pack()) for name, counts in interval.models.items()),
    )


def unpack_interval(packed: PackedInterval) -> Interval:
    start, end, restarted, busy, spend_usd, cold_start_usd, draft_load_usd, models = packed
    return Interval(
        start=start,
        end=end,
        models={name: Counts.unpack(counts) for name, counts in models},
        restarted=restarted,
        busy=busy,
        spend_usd=Decimal(spend_usd),
        cold_start_usd=Decimal(cold_start_usd),
        draft_load_usd=Decimal(draft_load_usd),
    )


class SlidingWindow:
    """The last `length` seconds of intervals, for the live gauges.

    The sum is kept up to date as intervals come and go (one addition and
    about one subtraction per scrape, instead of re-adding the whole window),
    and rebuilt from the intervals every `REBUILD_EVERY` changes so float
    sums cannot drift. A model leaves the sum with its last interval.
    """

    REBUILD_EVERY = 256

    def __init__(self, length: float):
        self.length = length
        self._intervals: deque[PackedInterval] = deque()
        self._total: Window | None = None
        self._presence: dict[str, int] = {}
        self._changes = 0

    def add(self, interval: Interval) -> None:
        self._intervals.append(pack_interval(interval))
        self._total = (
            interval_window(interval) if self._total is None else self._total.add(interval)
        )
        self._count(interval, +1)
        horizon = interval.end - self.length
        while self._intervals and self._intervals[0][1] <= horizon:  # [1]: its end
            leaving = unpack_interval(self._intervals.popleft())
            self._total = self._total.remove(leaving, self._presence)
        self._changes += 1
        if self._changes >= self.REBUILD_EVERY:
            self._changes = 0
            self._total = sum_intervals(unpack_interval(kept) for kept in self._intervals)

    def total(self) -> Window | None:
        if not self._intervals or self._total is None:
            return None
        start, end = self._intervals[0][0], self._intervals[-1][1]  # first start, last end
        return replace(self._total, start=start, end=end)

    def _count(self, interval: Interval, sign: int) -> None:
        for model in interval.models:
            self._presence[model] = self._presence.get(model, 0) + sign


def interval_window(interval: Interval) -> Window:
    return Window(start=interval.start, end=interval.end).add(interval)


def sum_intervals(intervals: Iterable[Interval]) -> Window:
    items = list(intervals)
    window = Window(start=items[0].start, end=items[-1].end)
    for interval in items:
        window = window.add(interval)
    return window


def aligned_start(t: float, length: float) -> float:
    """Start of the history window holding time `t`: windows are aligned to the epoch."""
    return (t // length) * length


class AlignedWindows:
    """History windows [k*L, (k+1)*L), each interval assigned to the window its end falls in.

    Whole intervals are never split across windows, so counter sums stay
    exact integers; an interval that spans a boundary (a scrape gap) lands in
    the later window. `add()` returns the windows it closed.
    """

    def __init__(self, length: float, open_window: Window | None = None):
        self.length = length
        self.open: Window | None = open_window

    def add(self, interval: Interval) -> list[Window]:
        start = aligned_start(interval.end, self.length)
        if interval.end == start and interval.seconds > 0:
            start -= self.length  # an interval ending on the boundary belongs to the earlier window
        closed: list[Window] = []
        if self.open is not None and self.open.start != start:
            closed.append(self.open)
            self.open = None
        if self.open is None:
            self.open = Window(start=start, end=start + self.length)
        self.open = self.open.add(interval)
        return closed

    def due(self, now: float) -> list[Window]:
        """Close the open window once its end has passed, even when no scrape arrives."""
        if self.open is not None and now >= self.open.end:
            closed, self.open = self.open, None
            return [closed]
        return []


def _delta(before: ModelSample, after: ModelSample, running_seconds: float) -> Counts:
    return Counts(
        generation_tokens=after.generation_tokens - before.generation_tokens,
        prompt_tokens=after.prompt_tokens - before.prompt_tokens,
        requests_finished=after.requests_finished - before.requests_finished,
        accepted_per_position=tuple(
            now - then
            for now, then in _zip_padded(after.accepted_per_position, before.accepted_per_position)
        ),
        running_seconds=running_seconds,
        drafts=_delta_optional(before.drafts, after.drafts),
        draft_tokens=_delta_optional(before.draft_tokens, after.draft_tokens),
        accepted_tokens=_delta_optional(before.accepted_tokens, after.accepted_tokens),
        iteration_tokens=_delta_histogram(before.iteration_tokens, after.iteration_tokens),
        inter_token_latency=_delta_histogram(before.inter_token_latency, after.inter_token_latency),
        time_per_output_token=_delta_histogram(
            before.time_per_output_token, after.time_per_output_token
        ),
    )


def _any_counter_down(before: ModelSample, after: ModelSample) -> bool:
    for name in (*_COUNTERS, *_SPEC_COUNTERS):
        then, now = getattr(before, name), getattr(after, name)
        if then is not None and now is not None and now < then:
            return True
    for name in _HISTOGRAMS:
        then, now = getattr(before, name), getattr(after, name)
        if then is not None and now is not None and now.count < then.count:
            return True
    return any(
        now < then
        for now, then in _zip_padded(after.accepted_per_position, before.accepted_per_position)
    )


def _delta_optional(before: float | None, after: float | None) -> float | None:
    if after is None:
        return None
    return after - (before or 0.0)


def _delta_histogram(before: Histogram | None, after: Histogram | None) -> Histogram | None:
    if after is None:
        return None
    if before is None:
        return after
    return Histogram(sum=after.sum - before.sum, count=after.count - before.count)


def _add_optional(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def _sub_optional(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return a
    return a - b


def _sub_histograms(a: Histogram | None, b: Histogram | None) -> Histogram | None:
    if a is None or b is None:
        return a
    return Histogram(sum=a.sum - b.sum, count=a.count - b.count)


def _add_histograms(a: Histogram | None, b: Histogram | None) -> Histogram | None:
    if a is None:
        return b
    if b is None:
        return a
    return Histogram(sum=a.sum + b.sum, count=a.count + b.count)


def _add_positions(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(x + y for x, y in _zip_padded(a, b))


def _zip_padded(a: tuple[float, ...], b: tuple[float, ...]) -> Iterator[tuple[float, float]]:
    for i in range(max(len(a), len(b))):
        yield (a[i] if i < len(a) else 0.0, b[i] if i < len(b) else 0.0)
