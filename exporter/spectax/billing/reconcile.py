"""Reconciliation, pure: estimated against billed spend per endpoint and period.

- A span is *billed* when the final periods of the endpoint's billing source cover
  it whole; its spend is then the sum of that source's lines over it (a line that
  straddles the span's edge counts pro rata by time; no line means nothing billed).
  Otherwise the span's spend is the price-table estimate its windows accrued.
- One source per endpoint: when lines of several sources exist (the configuration
  moved an endpoint from one to another), the source read most recently is the
  endpoint's, so no money is counted twice.
- spectax's money is USD: a bill in another currency stays apart (never billed).
- Drift, `(estimated − billed) / billed`, is taken over the last final period that
  spectax watched whole (its windows cover at least MIN_COVERAGE of it).
- History rows get billed money by sharing each line over the rows it overlaps, in
  proportion to their estimated spend there (by time when nothing was estimated);
  each line's shares add up to it exactly, to the nano-dollar.

Every function here takes what the store read and returns figures; none does I/O
(spectax.billing.ledger does the reading).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Literal, Protocol, TypeVar

from spectax.economics.pricing import split_exactly
from spectax.units import NANO, Span, covers, floor_time, overlap

Basis = Literal["billed", "estimated"]
MIN_COVERAGE = 0.95
USD = "USD"
ZERO = Decimal(0)
HOUR = timedelta(hours=1)


class Line(Span, Protocol):
    @property
    def amount(self) -> Decimal: ...


class CurrencyLine(Line, Protocol):
    @property
    def currency(self) -> str: ...


class FinalSpan(Span, Protocol):
    @property
    def final(self) -> bool: ...


class EstimatedRow(Span, Protocol):
    """A history row: its span and the spend spectax estimated for it (None: no price)."""

    @property
    def spend_usd(self) -> Decimal | None: ...


class Watched(Protocol):
    """A stored window or hour as the estimate sees it (spectax.store.billing_history.SpendRow)."""

    @property
    def start(self) -> datetime: ...
    @property
    def seconds(self) -> float: ...
    @property
    def spend_usd(self) -> Decimal | None: ...


R = TypeVar("R", bound=EstimatedRow)


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


def source_of_each(reads: Iterable[tuple[str, str, datetime]]) -> dict[str, str]:
    """The source that bills each endpoint, from (endpoint, source, last read of it): the
    one read last (one per endpoint, so that no money is counted twice)."""
    chosen: dict[str, tuple[datetime, str]] = {}
    for endpoint, source, fetched_at in reads:
        if endpoint not in chosen or (fetched_at, source) > chosen[endpoint]:
            chosen[endpoint] = (fetched_at, source)
    return {endpoint: source for endpoint, (_, source) in chosen.items()}


def billed(
    periods: Iterable[FinalSpan], lines: Sequence[CurrencyLine], start: datetime, end: datetime
) -> Decimal | None:
    """The billed spend over [start, end), or None when the final periods do not cover it
    whole or a line is not in USD."""
    if not covers([p for p in periods if p.final], start, end):
        return None
    if any(line.currency != USD for line in lines):
        return None
    return billed_in(lines, start, end)


def estimate(
    windows: Iterable[Watched], hours: Iterable[Watched], start: datetime, end: datetime
) -> tuple[Decimal | None, float]:
    """The windows' estimated spend over [start, end) (hourly rollups for hours whose
    windows retention removed) and the share of the span they cover."""
    spend: Decimal | None = None
    covered: dict[datetime, float] = {}
    for window in windows:
        covered[window.start] = window.seconds
        if window.spend_usd is not None:
            spend = (spend or ZERO) + window.spend_usd
    watched = {floor_time(t, HOUR) for t in covered}
    hourly: dict[datetime, float] = {}
    for hour in hours:
        if hour.start in watched:
            continue
        hourly[hour.start] = max(hourly.get(hour.start, 0.0), hour.seconds)
        if hour.spend_usd is not None:
            spend = (spend or ZERO) + hour.spend_usd
    total = sum(covered.values()) + sum(hourly.values())
    length = (end - start).total_seconds()
    return spend, (total / length if length > 0 else 0.0)


def compare_period(
    endpoint: str,
    source: str,
    period: FinalSpan,
    lines: Iterable[CurrencyLine],
    windows: Iterable[Watched],
    hours: Iterable[Watched],
) -> PeriodReconciliation:
    """One billing period: its USD lines against the estimate of the windows in it."""
    estimated, coverage = estimate(windows, hours, period.start, period.end)
    usd = [line for line in lines if line.currency == USD]
    return PeriodReconciliation(
        endpoint=endpoint,
        source=source,
        start=period.start,
        end=period.end,
        final=period.final,
        billed=billed_in(usd, period.start, period.end),
        estimated=estimated,
        coverage=coverage,
    )


def combined_drift(parts: Sequence[PeriodReconciliation]) -> float | None:
    """(Σ estimated − Σ billed) / Σ billed over one period of every endpoint a source
    bills, or None unless spectax watched it whole on each and something was billed."""
    if any(p.estimated is None or p.coverage < MIN_COVERAGE for p in parts):
        return None
    total_billed = sum((p.billed for p in parts), ZERO)
    total_estimated = sum((p.estimated or ZERO for p in parts), ZERO)
    if total_billed == 0:
        return None
    return float((total_estimated - total_billed) / total_billed)


def billed_totals(
    sources: dict[str, str], sums: Iterable[tuple[str | None, str, Decimal]]
) -> dict[str, tuple[str, Decimal]]:
    """Per endpoint, its billing source and the sum of that source's final USD lines, from
    (endpoint, source, sum of its final USD lines) of every pair."""
    totals = {endpoint: (source, ZERO) for endpoint, source in sources.items()}
    for endpoint, source, amount in sums:
        if endpoint is not None and sources.get(endpoint) == source:
            totals[endpoint] = (source, amount)
    return totals


def billed_shares(
    rows: Iterable[EstimatedRow], periods: Iterable[FinalSpan], lines: Sequence[CurrencyLine]
) -> dict[int, Decimal]:
    """The billed money of each history row of one endpoint, by `id(row)`: a row whose span
    the final `periods` of its billing source cover whole (and no foreign-currency line
    overlaps) gets its share of the USD `lines`. A row left out keeps its estimate."""
    final = [p for p in periods if p.final]
    foreign = [line for line in lines if line.currency != USD]
    covered = [
        Row(id(r), r.start, r.end, r.spend_usd)
        for r in rows
        if covers(final, r.start, r.end) and not any(overlap(f, r.start, r.end) for f in foreign)
    ]
    return allocate([line for line in lines if line.currency == USD], covered)


def with_basis(
    rows: Iterable[R], shares: dict[int, Decimal]
) -> list[tuple[R, Decimal | None, Basis]]:
    """Each row with the spend to show and its basis: its billed share, else its estimate."""
    return [
        (row, shares[id(row)], "billed") if id(row) in shares else (row, row.spend_usd, "estimated")
        for row in rows
    ]


def seconds(delta: timedelta) -> Decimal:
    return Decimal(delta.days * 86400 + delta.seconds) + Decimal(delta.microseconds) / 10**6


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
