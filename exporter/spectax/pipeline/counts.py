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
from typing import Any, Literal

from spectax.engines.base import COUNTERS, CounterKind, Counters, Histogram

#: How a field a span carries beside the counters adds up: a counter kind's rules, or
#: setting - a setting of the engine as of the span's end (the later span's wins).
SpanKind = CounterKind | Literal["setting"]


@dataclass(frozen=True, slots=True)
class Counts(Counters):
    """Counter deltas of one model over some span of time (an interval or a window).

    `running_seconds` is the integral of running requests over time, so the
    mean concurrency of any sum of spans is `running_seconds / seconds`; waiting
    requests and KV-cache usage (a 0-1 fraction; None when the engine lacks it) are
    integrated alike. The KV cache's blocks, block size and bytes are the engine's
    settings as of the span's end (`GAUGES`).
    """

    running_seconds: float = 0.0
    waiting_seconds: float = 0.0
    kv_usage_seconds: float | None = None
    kv_cache_blocks: float | None = None
    kv_block_size: float | None = None
    kv_cache_bytes: float | None = None

    def __add__(self, other: Counts) -> Counts:
        return Counts(*map(call, _ADD, _values(self), _values(other)))

    def __sub__(self, other: Counts) -> Counts:
        """What remains when `other`, a part of this sum, is taken out of it."""
        return Counts(*map(call, _SUB, _values(self), _values(other)))


def delta(before: Counters, after: Counters, gauges: tuple[Any, ...]) -> Counts:
    """The counters' growth from `before` to `after`, Prometheus `rate()` style: a counter
    the later page lacks has no delta, one the earlier page lacks counts from zero.
    `gauges` are the span's values of `GAUGES`, in their order."""
    return Counts(*map(call, _SUB[: len(COUNTERS)], _counters(after), _counters(before)), *gauges)


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


def _later(a: float | None, b: float | None) -> float | None:
    return a if b is None else b


def _kept(a: float | None, b: float | None) -> float | None:
    return a  # the remainder of a sum keeps its latest setting: the part taken out is older


def _never_down(before: Any, after: Any) -> bool:
    return False


def _number_down(before: float | None, after: float | None) -> bool:
    return before is not None and after is not None and after < before


def _add_histograms(a: Histogram | None, b: Histogram | None) -> Histogram | None:
    if a is None:
        return b
    if b is None:
        return a
    return _combine(a, b, operator.add)


def _sub_histograms(a: Histogram | None, b: Histogram | None) -> Histogram | None:
    if a is None or b is None:
        return a
    return _combine(a, b, operator.sub)


def _combine(a: Histogram, b: Histogram, op: Callable[[float, float], float]) -> Histogram:
    """Sum, count and bucket by bucket, when both have the same bounds. A side without
    buckets that saw no observation is a zero (an interval before its first request); any
    other disagreement (buckets unknown on one side, bounds changed) gives unknown buckets,
    never a quantile over counts that do not belong together."""
    total, count = op(a.sum, b.sum), op(a.count, b.count)
    if not b.bounds and not b.count:
        return Histogram.of(total, count, a.bounds, a.counts)
    if not a.bounds and not a.count and op is operator.add:
        return Histogram.of(total, count, b.bounds, b.counts)
    if not a.bounds or a.bounds != b.bounds:  # shared tuples: mostly an identity check
        return Histogram(total, count)
    return Histogram.of(total, count, a.bounds, map(op, a.bucket_counts(), b.bucket_counts()))


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
_RULES: dict[SpanKind, tuple[Rule, Rule, Callable[[Any, Any], bool]]] = {
    "plain": (operator.add, operator.sub, _number_down),
    "speculation": (_add_optional, _sub_optional, _number_down),
    "histogram": (_add_histograms, _sub_histograms, _histogram_down),
    "per_position": (_add_positions, _sub_positions, _positions_down),
    "setting": (_later, _kept, _never_down),
}

#: The fields of `Counts` after the counters, with how each adds up.
GAUGES: tuple[tuple[str, SpanKind], ...] = (
    ("running_seconds", "plain"),
    ("waiting_seconds", "plain"),
    ("kv_usage_seconds", "speculation"),  # None, not 0, when the engine lacks the gauge
    ("kv_cache_blocks", "setting"),
    ("kv_block_size", "setting"),
    ("kv_cache_bytes", "setting"),
)

# Precomputed per field, in the fields' order (the counters, then the gauges), and applied
# with map(call, rules, a, b): the sliding window adds and subtracts Counts at every scrape of
# every endpoint. Measured: 7.8 us an addition, 7.6 us a delta, against 6.9 for the former
# field-by-field code.
_counters = attrgetter(*(c.name for c in COUNTERS))
_values = attrgetter(*(c.name for c in COUNTERS), *(name for name, _ in GAUGES))
_ADD = (*(_RULES[c.kind][0] for c in COUNTERS), *(_RULES[kind][0] for _, kind in GAUGES))
_SUB = (*(_RULES[c.kind][1] for c in COUNTERS), *(_RULES[kind][1] for _, kind in GAUGES))
_DOWN = tuple(_RULES[c.kind][2] for c in COUNTERS)
