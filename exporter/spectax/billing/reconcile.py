"""Reconciliation, pure: estimated against billed spend per endpoint and period.

- A span is *billed* when the final periods of the endpoint's billing source cover
  it whole; its spend is then the sum of that source's lines over it (a line that
  straddles the span's edge counts pro rata by time; no line means nothing billed).
  Otherwise the span's spend is the price-table estimate its windows accrued.
- One source per endpoint: when lines of several sources exist (the configuration
  moved an endpoint from one to another), the source read most recently is the
  endpoint's, so no money is counted twice.
- Drift, `(estimated − billed) / billed`, is taken over the last final period that
  spectax watched whole (its windows cover at least MIN_COVERAGE of it).
- History rows get billed money by sharing each line over the rows it overlaps, in
  proportion to their estimated spend there (by time when nothing was estimated);
  each line's shares add up to it exactly, to the nano-dollar.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Literal, Protocol

from spectax.economics.pricing import split_exactly
from spectax.units import NANO

Basis = Literal["billed", "estimated"]
MIN_COVERAGE = 0.95
ZERO = Decimal(0)


class Spanned(Protocol):
    @property
    def start(self) -> datetime: ...

    @property
    def end(self) -> datetime: ...


class Line(Spanned, Protocol):
    @property
    def amount(self) -> Decimal: ...


@dataclass(frozen=True, slots=True)
class PeriodReconciliation:
    """One billing period of one endpoint: what the bill says and what spectax estimated."""

    endpoint: str
    source: str
    start: datetime
    end: datetime
    final: bool
    billed: Decimal
    estimated: Decimal | None  # None: spectax has no windows in the period
    coverage: float  # share of the period spectax's windows cover

    @property
    def drift_ratio(self) -> float | None:
        """(estimated − billed) / billed, when the period is final and watched whole."""
        if not self.final or self.estimated is None or self.coverage < MIN_COVERAGE:
            return None
        if self.billed == 0:
            return None
        return float((self.estimated - self.billed) / self.billed)


def seconds(delta: timedelta) -> Decimal:
    return Decimal(delta.days * 86400 + delta.seconds) + Decimal(delta.microseconds) / 10**6


def overlap(a: Spanned, start: datetime, end: datetime) -> timedelta:
    return max(timedelta(0), min(a.end, end) - max(a.start, start))


def covers(spans: Iterable[Spanned], start: datetime, end: datetime) -> bool:
    """Whether the union of `spans` covers [start, end) (an empty span is covered)."""
    reach = start
    for span in sorted(spans, key=lambda s: s.start):
        if span.start > reach:
            break
        reach = max(reach, span.end)
        if reach >= end:
            return True
    return reach >= end


def prorated(line: Line, start: datetime, end: datetime) -> Decimal:
    """The line's amount inside [start, end), pro rata by time."""
    length = line.end - line.start
    part = overlap(line, start, end)
    if part <= timedelta(0) or length <= timedelta(0):
        return ZERO
    if part == length:
        return line.amount
    return (line.amount * seconds(part) / seconds(length)).quantize(NANO)


def billed_in(lines: Iterable[Line], start: datetime, end: datetime) -> Decimal:
    return sum((prorated(line, start, end) for line in lines), ZERO)


@dataclass(frozen=True, slots=True)
class Row:
    """A history row as allocation sees it: its span and estimated spend."""

    key: int
    start: datetime
    end: datetime
    estimated: Decimal | None


def allocate(lines: Sequence[Line], rows: Sequence[Row]) -> dict[int, Decimal]:
    """Each line's amount shared over the rows it overlaps, by estimated spend there (by
    time when there is none), the last row taking the rounding: exact per line."""
    shares: dict[int, Decimal] = {row.key: ZERO for row in rows}
    for line in lines:
        touched = [r for r in rows if overlap(r, line.start, line.end) > timedelta(0)]
        if not touched:
            continue
        by_spend = [
            (r.estimated or ZERO)
            * seconds(overlap(r, line.start, line.end))
            / seconds(r.end - r.start)
            for r in touched
        ]
        weights = (
            by_spend
            if sum(by_spend, ZERO) > 0
            else [seconds(overlap(r, line.start, line.end)) for r in touched]
        )
        parts = split_exactly(_inside(line, touched), weights, sum(weights, ZERO))
        for row, part in zip(touched, parts, strict=True):
            shares[row.key] += part
    return shares


def _inside(line: Line, rows: Sequence[Row]) -> Decimal:
    """The part of the line's amount that falls inside the union of the rows' spans."""
    if covers(rows, line.start, line.end):
        return line.amount
    inside = timedelta(0)
    reach = line.start
    for row in sorted(rows, key=lambda r: r.start):
        start, end = max(row.start, reach), min(row.end, line.end)
        if end > start:
            inside += end - start
            reach = end
    return (line.amount * seconds(inside) / seconds(line.end - line.start)).quantize(NANO)
