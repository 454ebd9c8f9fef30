"""Counter deltas of one model over a span of time, and their arithmetic.

Every rule here is per counter kind, applied to the counters declared in
`spectax.engines.base.Counters`: a new counter is subtracted, summed and
checked for a restart without a line written here.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import attrgetter, call
from typing import Any

from spectax.engines.base import COUNTERS, Buckets, CounterKind, Counters, Histogram


@dataclass(frozen=True, slots=True)
class Counts(Counters):
    """Counter deltas of one model over some span of time (an interval or a window).

    `running_seconds` is the integral of running requests over time, so the
    mean concurrency of any sum of spans is `running_seconds / seconds`.
    """

    running_seconds: float = 0.0

    def __add__(self, other: Counts) -> Counts:
        return Counts(*map(call, _ADD, _values(self), _values(other)))

    def __sub__(self, other: Counts) -> Counts:
        """What remains when `other`, a part of this sum, is taken out of it."""
        return Counts(*map(call, _SUB, _values(self), _values(other)))


def delta(before: Counters, after: Counters, running_seconds: float) -> Counts:
    """The counters' growth from `before` to `after`, Prometheus `rate()` style: a counter
    the later page lacks has no delta, one the earlier page lacks counts from zero."""
    grown = [*map(call, _SUB, _counters(after), _counters(before)), running_seconds]
    return Counts(*grown)


def any_counter_down(before: Counters, after: Counters) -> bool:
    """Whether a counter both pages carry went down: the mark of a new process."""
    return any(map(call, _DOWN, _counters(before), _counters(after)))


# ---------------------------------------------------------------- the rules of each kind


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


def _number_down(before: float | None, after: float | None) -> bool:
    return before is not None and after is not None and after < before


def _add_histograms(a: Histogram | None, b: Histogram | None) -> Histogram | None:
    if a is None:
        return b
    if b is None:
        return a
    return Histogram(a.sum + b.sum, a.count + b.count, _combine(a, b, operator.add))


def _sub_histograms(a: Histogram | None, b: Histogram | None) -> Histogram | None:
    if a is None or b is None:
        return a
    return Histogram(a.sum - b.sum, a.count - b.count, _combine(a, b, operator.sub))


def _combine(a: Histogram, b: Histogram, op: Callable[[float, float], float]) -> Buckets:
    """Bucket by bucket, when both have the same bounds. A side without buckets that saw no
    observation is a zero (an interval before its first request); any other disagreement
    (buckets unknown on one side, bounds changed) gives unknown buckets, never a quantile
    over counts that do not belong together."""
    if not b.buckets and not b.count:
        return a.buckets
    if not a.buckets and not a.count and op is operator.add:
        return b.buckets
    if len(a.buckets) != len(b.buckets) or not a.buckets:
        return ()
    out = []
    for (bound, x), (other, y) in zip(a.buckets, b.buckets, strict=True):
        if bound != other:
            return ()
        out.append((bound, op(x, y)))
    return tuple(out)


def _histogram_down(before: Histogram | None, after: Histogram | None) -> bool:
    return before is not None and after is not None and after.count < before.count


def _add_positions(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(x + y for x, y in _zip_padded(a, b))


def _sub_positions(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(x - y for x, y in _zip_padded(a, b))


def _positions_down(before: tuple[float, ...], after: tuple[float, ...]) -> bool:
    return any(now < then for now, then in _zip_padded(after, before))


def _zip_padded(a: tuple[float, ...], b: tuple[float, ...]) -> Iterator[tuple[float, float]]:
    for i in range(max(len(a), len(b))):
        yield (a[i] if i < len(a) else 0.0, b[i] if i < len(b) else 0.0)


Rule = Callable[[Any, Any], Any]

#: (add, subtract, went down) of each kind. Subtracting is also the delta between two pages:
#: a later page without the counter gives None, an earlier one without it counts from zero.
_RULES: dict[CounterKind, tuple[Rule, Rule, Callable[[Any, Any], bool]]] = {
    "plain": (operator.add, operator.sub, _number_down),
    "speculation": (_add_optional, _sub_optional, _number_down),
    "histogram": (_add_histograms, _sub_histograms, _histogram_down),
    "per_position": (_add_positions, _sub_positions, _positions_down),
}

# Precomputed per field, in the fields' order (the counters, then running_seconds), and applied
# with map(call, rules, a, b): the sliding window adds and subtracts Counts at every scrape of
# every endpoint. Measured: 7.8 us an addition, 7.6 us a delta, against 6.9 for the former
# field-by-field code.
_counters = attrgetter(*(c.name for c in COUNTERS))
_values = attrgetter(*(c.name for c in COUNTERS), "running_seconds")
_ADD = (*(_RULES[c.kind][0] for c in COUNTERS), operator.add)
_SUB = (*(_RULES[c.kind][1] for c in COUNTERS), operator.sub)
_DOWN = tuple(_RULES[c.kind][2] for c in COUNTERS)
