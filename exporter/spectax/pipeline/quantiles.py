"""Latency quantiles from a window's histogram bucket deltas, as Prometheus computes them.

The on-call engineer's SLO is written in `histogram_quantile(0.99, ...)`; spectax's p99 must
be the same number, or its verdict argues with the dashboard the engineer is paged from. So
this is Prometheus' `bucketQuantile` (promql/quantile.go, classic histograms), rule for
rule: buckets sorted and merged by bound, float noise (1e-12) and non-monotonic counts
flattened, linear interpolation inside the bucket holding the rank, 0 as the lower bound of
a first bucket with a positive bound, and a rank in the +Inf bucket answered with the
largest finite bound. Where Prometheus answers NaN (no observations, no +Inf bucket, fewer
than two buckets) this answers None: no quantile, never a number that looks measured.
"""

from __future__ import annotations

import dataclasses
import math
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spectax.engines.base import Buckets, Histogram, PerBoundList

#: The quantiles spectax exports and stores, by their `percentile` label ("p99"; a gauge
#: may not carry a `quantile` label, Prometheus keeps that one for summaries).
QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))

#: The latency histograms spectax reads (spectax.engines.base.Counters), by the short name
#: of the `metric` label: the name an SLO, an alert or a dashboard row refers to them by.
LATENCY_METRICS: tuple[tuple[str, str], ...] = (
    ("tpot", "time_per_output_token"),
    ("itl", "inter_token_latency"),
    ("ttft", "time_to_first_token"),
    ("e2e", "e2e_request_latency"),
)

_PRECISION = 1e-12  # Prometheus' tolerance for float noise between adjacent buckets


def bucket_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """The q-quantile of cumulative `buckets` ((upper bound, count), any order), as
    Prometheus' histogram_quantile gives it; None where it gives NaN."""
    return _located(q, buckets)[0]


#: A bucket by its bounds (lower, upper]: the first bucket's lower bound is 0 (Prometheus'
#: rule, as for the interpolation), or -inf when its upper bound is not positive; the +Inf
#: bucket's upper bound is math.inf.
Bounds = tuple[float, float]


def _located(
    q: float, buckets: Iterable[tuple[float, float]]
) -> tuple[float | None, Bounds | None]:
    """The q-quantile and the bucket holding its rank (None: no bucket, as for q outside
    [0, 1]). The bucket is what the histogram knows: two quantiles in the same one cannot be
    told apart, whatever the interpolation makes of them."""
    return _locate(q, _prepared(buckets))


def _prepared(buckets: Iterable[tuple[float, float]]) -> tuple[list[float], list[float]] | None:
    """The buckets as Prometheus reads them before locating any rank: sorted and merged by
    bound, float noise and non-monotonic counts flattened; None when they hold no quantile
    (no +Inf bucket, fewer than two buckets, no observations). Done once per histogram for
    its three quantiles: it was three quarters of their cost (bench/README, issue 31)."""
    ordered: Sequence[tuple[float, float]] = (
        buckets if isinstance(buckets, (list, tuple)) else list(buckets)
    )
    if any(ordered[i][0] > ordered[i + 1][0] for i in range(len(ordered) - 1)):
        ordered = sorted(ordered, key=lambda b: b[0])  # engines print them in order
    if not ordered or ordered[-1][0] != math.inf:
        return None
    bounds, counts = _coalesced(ordered)
    _correct_precision(counts)
    _ensure_monotonic(counts)
    if len(bounds) < 2 or counts[-1] == 0:
        return None
    return bounds, counts


def _prepared_histogram(histogram: Histogram) -> tuple[list[float], list[float]] | None:
    """`_prepared` of a histogram's buckets, with no pairs built: its bounds are a list shared
    by every histogram with them (engines.base.shared_bounds), so whether they are ascending
    without repeats, when sorting and merging leave them as they are, is learnt once per
    list, and only the counts are flattened. The same numbers as `_prepared`, in a third of
    the time: a window's four histograms at every scrape (issue 31)."""
    bounds = histogram.bounds
    if not _ascending(bounds):
        return _prepared(histogram.buckets)
    if bounds[-1] != math.inf:
        return None
    counts = list(histogram.bucket_counts())
    if not _already_prepared(counts):
        _correct_precision(counts)
        _ensure_monotonic(counts)
    if len(bounds) < 2 or counts[-1] == 0:
        return None
    return list(bounds), counts


#: Whether a bound list is strictly ascending, learnt once per list.
_ascending = PerBoundList(lambda b: all(b[i] < b[i + 1] for i in range(len(b) - 1)))


def _locate(
    q: float, prepared: tuple[list[float], list[float]] | None
) -> tuple[float | None, Bounds | None]:
    if math.isnan(q):
        return None, None
    if q < 0:
        return -math.inf, None
    if q > 1:
        return math.inf, None
    if prepared is None:
        return None, None
    bounds, counts = prepared
    rank = q * counts[-1]
    b = bisect_left(counts, rank, 0, len(counts) - 1)  # the first bucket holding the rank
    lower = bounds[b - 1] if b > 0 else (0.0 if bounds[0] > 0 else -math.inf)
    if b == len(bounds) - 1:
        return bounds[-2], (lower, math.inf)
    if b == 0 and bounds[0] <= 0:
        return bounds[0], (lower, bounds[0])
    start, end, count = 0.0, bounds[b], counts[b]
    if b > 0:
        start = bounds[b - 1]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    return start + (end - start) * (rank / count), (lower, end)


@dataclass(frozen=True, slots=True)
class Quantiles:
    """p50, p95 and p99 of one histogram over one span; None where there is no quantile.

    `buckets` holds the bucket each one fell in, in the same order (empty when not known):
    a quantile in the +Inf bucket is its lower bound, no measurement of the value, and two
    quantiles in one bucket are no different as far as the histogram can tell."""

    p50: float | None
    p95: float | None
    p99: float | None
    buckets: tuple[Bounds | None, ...] = dataclasses.field(default=(), compare=False)

    def by_label(self) -> dict[str, float | None]:
        return {"p50": self.p50, "p95": self.p95, "p99": self.p99}

    def bucket(self, label: str) -> Bounds | None:
        """The bucket the `label` quantile ("p99") fell in; None when not known."""
        for (name, _), bounds in zip(QUANTILES, self.buckets, strict=False):
            if name == label:
                return bounds
        return None

    def beyond_finite(self, label: str) -> bool:
        """The quantile fell in the +Inf bucket: it is at least the largest finite bound."""
        bounds = self.bucket(label)
        return bounds is not None and bounds[1] == math.inf


def one_bucket(ours: Quantiles, theirs: Quantiles, label: str) -> Bounds | None:
    """The bucket both `label` quantiles fell in, when they fell in the same one (the same
    bounds on both sides); None when they did not, or that is not known."""
    mine = ours.bucket(label)
    return mine if mine is not None and mine == theirs.bucket(label) else None


def quantiles(histogram: Histogram | None) -> Quantiles | None:
    """The quantiles of a span's histogram deltas; None without buckets (an engine that gives
    none, rows stored before migration 0007) or without observations."""
    if histogram is None or not histogram.bounds or not histogram.count:
        return None
    prepared = _prepared_histogram(histogram)
    found = [_locate(q, prepared) for _, q in QUANTILES]
    (p50, b50), (p95, b95), (p99, b99) = found
    return Quantiles(p50, p95, p99, buckets=(b50, b95, b99))


def latency_quantiles(counts: object) -> dict[str, Quantiles]:
    """Every latency histogram of a span's counts (spectax.pipeline.counts.Counts, or an
    engine sample) that has quantiles, by its short metric name."""
    out = {}
    for metric, field in LATENCY_METRICS:
        found = quantiles(getattr(counts, field, None))
        if found is not None:
            out[metric] = found
    return out


def merged(parts: Iterable[Buckets]) -> Buckets:
    """Bucket counts added bound by bound (Prometheus' `sum by (le)`); () if the bounds of
    any part disagree, or none has buckets."""
    total: list[tuple[float, float]] = []
    for buckets in parts:
        if not buckets:
            continue
        if not total:
            total = list(buckets)
            continue
        if [le for le, _ in total] != [le for le, _ in buckets]:
            return ()
        total = [(le, n + m) for (le, n), (_, m) in zip(total, buckets, strict=True)]
    return tuple(total)


def _coalesced(ordered: Sequence[tuple[float, float]]) -> tuple[list[float], list[float]]:
    bounds: list[float] = []
    counts: list[float] = []
    for bound, count in ordered:
        if bounds and bounds[-1] == bound:
            counts[-1] += count
        else:
            bounds.append(bound)
            counts.append(count)
    return bounds, counts


def _already_prepared(counts: list[float]) -> bool:
    """Whether neither fix below would change `counts`, checked in C: counts that never fall,
    from 0 to under 1e11, all whole (what engines count, and their sums): two whole counts
    that differ do so by 1 or more, over 1e-11 of anything under 1e11. The counts of the
    live gauges' window, at every scrape, skip two loops in Python (issue 31)."""
    return (
        counts[0] >= 0
        and counts[-1] < _WHOLE_UNDER
        and counts == sorted(counts)
        and all(map(float.is_integer, counts))
    )


_WHOLE_UNDER = 1e11  # whole counts under it differ by over 1e-11 of each, far over _PRECISION


def _correct_precision(counts: list[float]) -> None:
    previous = counts[0]
    for i in range(1, len(counts)):
        current = counts[i]
        change = abs(current - previous)
        if change == 0:
            continue
        if current and change / current <= _PRECISION:
            counts[i] = previous
        else:
            previous = current


def _ensure_monotonic(counts: list[float]) -> None:
    highest = counts[0]
    for i in range(1, len(counts)):
        if counts[i] > highest:
            highest = counts[i]
        elif counts[i] < highest:
            counts[i] = highest
