"""The report's latency section: each endpoint's quantiles over the month, with against
without speculation, and the basis of every figure.

The rollups keep each histogram's bucket counts (migration 0007), so a month's p99 is the
quantile of the month's summed buckets, computed as Prometheus' histogram_quantile does
(spectax.pipeline.quantiles): not an average of daily p99s, which is no quantile at all.
"Without speculation" is measured when the endpoint has a control (the control's buckets
over the same days), else modelled for TPOT only: 1 / the month's speedup, its windows'
own summed (a ratio of sums), a tail modelled from means. Days stored before 0007 have no buckets
and count for nothing here; the coverage says how many days the figures rest on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date

from spectax.economics.latency import effect_words
from spectax.engines.base import Buckets, Histogram
from spectax.pipeline.quantiles import (
    LATENCY_METRICS,
    Bounds,
    Quantiles,
    merged,
    one_bucket,
    quantiles,
)
from spectax.report.records import RollupRecord
from spectax.store.rows import decode_buckets

DASH = "—"
#: The record column of each metric's buckets.
_COLUMN = {metric: f"{field_name}_buckets" for metric, field_name in LATENCY_METRICS}


@dataclass(slots=True)
class LatencyFigures:
    """One endpoint's month: quantiles per metric, the same without speculation, the basis."""

    quantiles: dict[str, Quantiles]
    without: dict[str, Quantiles] = field(default_factory=dict)  # measured: the control's
    modeled_speedup: float | None = None  # no control: the windows' speedup over the month
    control: str | None = None
    days_with_buckets: int = 0
    daily_p99_tpot: dict[date, float] = field(default_factory=dict)
    control_daily_p99_tpot: dict[date, float] = field(default_factory=dict)

    @property
    def basis(self) -> str | None:
        if self.without:
            return "measured"
        return "modeled" if self.modeled_speedup and "tpot" in self.quantiles else None

    def ratio(self, metric: str, label: str) -> float | None:
        """The quantile with speculation / without it, on `basis`; None when unknown."""
        ours = self.quantiles.get(metric)
        value = ours.by_label()[label] if ours else None
        if value is None:
            return None
        if self.without:
            theirs = self.without.get(metric)
            plain = theirs.by_label()[label] if theirs else None
            return value / plain if plain else None
        if metric == "tpot" and self.modeled_speedup:
            return 1.0 / self.modeled_speedup
        return None

    def one_bucket(self, metric: str, label: str) -> Bounds | None:
        """The bucket both quantiles (with and without speculation, measured) fell in, when
        it is one bucket: the histogram cannot tell them apart. None when modelled."""
        ours, theirs = self.quantiles.get(metric), self.without.get(metric)
        return one_bucket(ours, theirs, label) if ours and theirs else None


def month_latency(
    rows: Sequence[RollupRecord],
    control_rows: Sequence[RollupRecord] | None,
    control: str | None,
    speedup: float | None,
    speculating: bool,
) -> LatencyFigures | None:
    """An endpoint's latency over the month's daily `rows` (all its models summed: the
    endpoint's latency), against `control_rows`, the control's over the same days."""
    found = _quantiles(rows)
    if not found:
        return None
    figures = LatencyFigures(found, control=control)
    figures.days_with_buckets = len(
        {r.start.date() for r in rows if r.time_per_output_token_buckets}
    )
    figures.daily_p99_tpot = _daily_p99(rows)
    if speculating and control_rows:
        figures.without = _quantiles(control_rows)
        figures.control_daily_p99_tpot = _daily_p99(control_rows)
    elif speculating:
        figures.modeled_speedup = speedup or None  # the windows' own, never a mean of hours
    return figures


def latency_verdict_text(f: LatencyFigures) -> str:
    """The month's latency verdict on p99 TPOT, in the daemon's words, with its basis."""
    ratio = f.ratio("tpot", "p99")
    if ratio is None:
        return DASH
    effect = effect_words("p99 TPOT", ratio, f.one_bucket("tpot", "p99"))
    basis = (
        f"measured against {f.control}"
        if f.basis == "measured"
        else "modelled: 1 / the windows' speedup"
    )
    return f"{effect} ({basis})"


def _quantiles(rows: Sequence[RollupRecord]) -> dict[str, Quantiles]:
    out = {}
    for metric, column in _COLUMN.items():
        buckets = _summed(getattr(r, column) for r in rows)
        if buckets:
            found = quantiles(Histogram(0.0, buckets[-1][1], buckets))
            if found is not None:
                out[metric] = found
    return out


def _summed(texts: Iterable[str | None]) -> Buckets:
    return merged(decode_buckets(text) for text in texts)


def _daily_p99(rows: Sequence[RollupRecord]) -> dict[date, float]:
    by_day: dict[date, list[str | None]] = {}
    for r in rows:
        by_day.setdefault(r.start.date(), []).append(r.time_per_output_token_buckets)
    out = {}
    for day, texts in sorted(by_day.items()):
        buckets = _summed(texts)
        found = quantiles(Histogram(0.0, buckets[-1][1], buckets)) if buckets else None
        if found is not None and found.p99 is not None:
            out[day] = found.p99
    return out
