"""Windows: sums of intervals, the unit the economics and the store see.

Intervals are the only thing that is summed; everything else (the sliding
window behind the live gauges, the aligned windows kept in history) is a sum
of intervals, so the two can never disagree.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from spectax.pipeline.counts import Counts
from spectax.pipeline.intervals import Interval
from spectax.pipeline.packing import (
    Deflater,
    IntervalFields,
    PackedInterval,
    add_packed,
    interval_fields,
    pack_interval_fields,
    pack_models,
    subtract_packed,
    unpack_interval_fields,
    unpack_models,
)


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
    unobserved_seconds: float = 0.0  # of its restarts: what no scrape could see (Interval)

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

    def busy_concurrency(self, model: str) -> float:
        """Mean running requests for `model` over the busy seconds only (0 when never
        busy): the batch its steps ran, where the time-average counts idle time too."""
        counts = self.models.get(model)
        if counts is None or self.busy_seconds <= 0:
            return 0.0
        return counts.running_seconds / self.busy_seconds

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
        # The constructor, not dataclasses.replace: replace() costs ~3x as much (it asks
        # every field's name and init flag), and windows are added and taken apart several
        # times a scrape (issue 31).
        return Window(
            start=self.start,
            end=self.end,
            seconds=self.seconds - interval.seconds,
            busy_seconds=self.busy_seconds - (interval.seconds if interval.busy else 0.0),
            restarts=self.restarts - int(interval.restarted),
            spend_usd=self.spend_usd - interval.spend_usd,
            cold_start_usd=self.cold_start_usd - interval.cold_start_usd,
            draft_load_usd=self.draft_load_usd - interval.draft_load_usd,
            models=models,
            unobserved_seconds=self.unobserved_seconds - interval.unobserved_seconds,
        )

    def add(self, interval: Interval) -> Window:
        models = dict(self.models)
        for name, counts in interval.models.items():
            models[name] = models[name] + counts if name in models else counts
        return Window(
            start=self.start,
            end=self.end,
            seconds=self.seconds + interval.seconds,
            busy_seconds=self.busy_seconds + (interval.seconds if interval.busy else 0.0),
            restarts=self.restarts + int(interval.restarted),
            spend_usd=self.spend_usd + interval.spend_usd,
            cold_start_usd=self.cold_start_usd + interval.cold_start_usd,
            draft_load_usd=self.draft_load_usd + interval.draft_load_usd,
            models=models,
            unobserved_seconds=self.unobserved_seconds + interval.unobserved_seconds,
        )


_WINDOWS = Deflater()

#: A window as `pack_window` marshals it: (start, end, seconds, busy_seconds, restarts,
#: spend_usd, cold_start_usd, draft_load_usd, models, unobserved_seconds), the money as the
#: Decimals' exact text, the models packed (spectax.pipeline.packing.PackedModels).
WindowFields = tuple[Any, ...]


def pack_window(window: Window) -> bytes:
    """A window as one bytes object (spectax.pipeline.packing): ~0.2 KB, not ~2.5 KB of
    objects, and nothing for the garbage collector to walk."""
    return _WINDOWS.pack(window_fields(window))


def unpack_window(packed: bytes) -> Window:
    return window_of(_WINDOWS.unpack(packed))


def window_fields(window: Window) -> WindowFields:
    return (
        window.start,
        window.end,
        window.seconds,
        window.busy_seconds,
        window.restarts,
        str(window.spend_usd),
        str(window.cold_start_usd),
        str(window.draft_load_usd),
        pack_models(window.models),
        window.unobserved_seconds,
    )


def window_of(fields: WindowFields) -> Window:
    start, end, seconds, busy, restarts, spend, cold_start, draft_load, models, unobserved = fields
    return Window(
        start=start,
        end=end,
        seconds=seconds,
        busy_seconds=busy,
        restarts=restarts,
        spend_usd=Decimal(spend),
        cold_start_usd=Decimal(cold_start),
        draft_load_usd=Decimal(draft_load),
        models=unpack_models(models),
        unobserved_seconds=unobserved,
    )


def interval_window(interval: Interval) -> Window:
    return Window(start=interval.start, end=interval.end).add(interval)


def sum_intervals(intervals: Iterable[Interval]) -> Window:
    items = list(intervals)
    window = Window(start=items[0].start, end=items[-1].end)
    for interval in items:
        window = window.add(interval)
    return window


# ---------------------------------------------------------------- sums, packed
#
# The windows below keep their sums packed between scrapes, and add and take out intervals
# packed too (spectax.pipeline.packing.add_packed): the same operations in the same order
# as Window.add and Window.remove, on the marshalled fields, so the same numbers; the
# objects are built once a scrape, for whoever reads the sum.


def _empty_fields(start: float, end: float) -> WindowFields:
    return (start, end, 0.0, 0.0, 0, "0", "0", "0", (), 0.0)


def _plus(window: WindowFields, interval: IntervalFields) -> WindowFields:
    """Window.add, packed."""
    start, end, seconds, busy, restarts, spend, cold, draft, models, unobserved = window
    i_start, i_end, i_restarted, i_busy, i_spend, i_cold, i_draft, i_models, i_unobserved = interval
    i_seconds = i_end - i_start
    summed = {name: (shape, data) for name, shape, data in models}
    for name, shape, data in i_models:
        kept = summed.get(name)
        summed[name] = (shape, data) if kept is None else add_packed(kept, (shape, data))
    return (
        start,
        end,
        seconds + i_seconds,
        busy + (i_seconds if i_busy else 0.0),
        restarts + int(i_restarted),
        str(Decimal(spend) + Decimal(i_spend)),
        str(Decimal(cold) + Decimal(i_cold)),
        str(Decimal(draft) + Decimal(i_draft)),
        tuple((name, *packed) for name, packed in summed.items()),
        unobserved + i_unobserved,
    )


def _minus(
    window: WindowFields, interval: IntervalFields, presence: dict[str, int]
) -> WindowFields:
    """Window.remove, packed."""
    start, end, seconds, busy, restarts, spend, cold, draft, models, unobserved = window
    i_start, i_end, i_restarted, i_busy, i_spend, i_cold, i_draft, i_models, i_unobserved = interval
    i_seconds = i_end - i_start
    summed = {name: (shape, data) for name, shape, data in models}
    for name, shape, data in i_models:
        presence[name] -= 1
        if presence[name] <= 0:
            del presence[name]
            summed.pop(name, None)
        elif (kept := summed.get(name)) is not None:
            summed[name] = subtract_packed(kept, (shape, data))
    return (
        start,
        end,
        seconds - i_seconds,
        busy - (i_seconds if i_busy else 0.0),
        restarts - int(i_restarted),
        str(Decimal(spend) - Decimal(i_spend)),
        str(Decimal(cold) - Decimal(i_cold)),
        str(Decimal(draft) - Decimal(i_draft)),
        tuple((name, *packed) for name, packed in summed.items()),
        unobserved - i_unobserved,
    )


class SlidingWindow:
    """The last `length` seconds of intervals, for the live gauges.

    The sum is kept up to date as intervals come and go (one addition and
    about one subtraction per scrape, instead of re-adding the whole window),
    and rebuilt from the intervals every `REBUILD_EVERY` changes so float
    sums cannot drift. A model leaves the sum with its last interval. The
    intervals wait packed, and so does the sum between two scrapes
    (spectax.pipeline.packing): unpacked, it was ~2.5 KB an endpoint, 5 MB at 2,000.
    """

    REBUILD_EVERY = 256

    def __init__(self, length: float):
        self.length = length
        self._intervals: deque[PackedInterval] = deque()
        # each kept interval's start and end, in the same order: when it leaves, unpacked
        self._starts = array("d")
        self._ends = array("d")
        self._total: bytes | None = None  # the sum, from the first start to the last end
        self._presence: dict[str, int] = {}
        self._changes = 0

    def add(self, interval: Interval, fields: IntervalFields | None = None) -> Window:
        """Take in the newest interval (`fields`: its `interval_fields`, if made already);
        returns the new sum (as `total()` would)."""
        fields = fields or interval_fields(interval)
        self._intervals.append(pack_interval_fields(fields))
        self._starts.append(interval.start)
        self._ends.append(interval.end)
        total = _plus(
            _empty_fields(interval.start, interval.end)
            if self._total is None
            else _WINDOWS.unpack(self._total),
            fields,
        )
        for model in interval.models:
            self._presence[model] = self._presence.get(model, 0) + 1
        horizon = interval.end - self.length
        while self._intervals and self._ends[0] <= horizon:
            leaving = unpack_interval_fields(self._intervals.popleft())
            del self._starts[0], self._ends[0]  # a window's few dozen: shifting them is cheap
            total = _minus(total, leaving, self._presence)
        self._changes += 1
        if self._changes >= self.REBUILD_EVERY:
            self._changes = 0
            total = _empty_fields(0.0, 0.0)
            for kept in self._intervals:
                total = _plus(total, unpack_interval_fields(kept))
        total = (self._starts[0], self._ends[-1], *total[2:])
        self._total = _WINDOWS.pack(total)
        return window_of(total)

    def total(self) -> Window | None:
        """The sum of the intervals in the window, unpacked anew at each call."""
        return unpack_window(self._total) if self._intervals and self._total else None


def aligned_start(t: float, length: float) -> float:
    """Start of the history window holding time `t`: windows are aligned to the epoch."""
    return (t // length) * length


class AlignedWindows:
    """History windows [k*L, (k+1)*L), each interval assigned to the window its end falls in.

    Whole intervals are never split across windows, so counter sums stay
    exact integers; an interval that spans a boundary (a scrape gap) lands in
    the later window. `add()` returns the windows it closed. The open window waits packed
    between scrapes, as the sliding window's sum does (~2.7 KB of objects an endpoint).
    """

    def __init__(self, length: float, open_window: Window | None = None):
        self.length = length
        self._open: bytes | None = None
        self._open_end = math.inf
        if open_window is not None:
            self._keep(open_window)

    @property
    def open(self) -> Window | None:
        """The open window, unpacked anew at each call."""
        return unpack_window(self._open) if self._open is not None else None

    def add(self, interval: Interval) -> list[Window]:
        """Add `interval`; returns the windows it closed."""
        return self.add_keeping(interval)[0]

    def add_keeping(
        self, interval: Interval, fields: IntervalFields | None = None
    ) -> tuple[list[Window], Window]:
        """Add `interval` (`fields`: its `interval_fields`, if made already); returns the
        windows it closed and the open window it is now in, as built (a scrape's flush
        reads it at once: unpacking it again cost ~20 µs)."""
        start = aligned_start(interval.end, self.length)
        if interval.end == start and interval.seconds > 0:
            start -= self.length  # an interval ending on the boundary belongs to the earlier window
        closed: list[Window] = []
        current = _WINDOWS.unpack(self._open) if self._open is not None else None
        if current is not None and current[0] != start:
            closed.append(window_of(current))
            current = None
        if current is None:
            current = _empty_fields(start, start + self.length)
        kept = _plus(current, fields or interval_fields(interval))
        self._open, self._open_end = _WINDOWS.pack(kept), kept[1]
        return closed, window_of(kept)

    def due(self, now: float) -> list[Window]:
        """Close the open window once its end has passed, even when no scrape arrives."""
        if self._open is not None and now >= self._open_end:
            closed = unpack_window(self._open)
            self._open, self._open_end = None, math.inf
            return [closed]
        return []

    def _keep(self, window: Window) -> None:
        self._open, self._open_end = pack_window(window), window.end
