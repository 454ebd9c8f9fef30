"""The reconciled figures, read: each function reads what it needs from the store and applies
the rules of spectax.billing.reconcile to it. The daemon's billing gauges, the report and
`spectax export` ask here; the store itself knows no billing rule.

The reads are as narrow as the question: the drift looks at one candidate period at a time
(newest first) and usually stops at the first, so a fleet's refresh reads one period of
windows per endpoint, not the whole lookback.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal

from spectax.billing import reconcile
from spectax.billing.reconcile import Basis, FinalSpan, PeriodReconciliation
from spectax.billing.types import Period
from spectax.store import Store
from spectax.store.models import Sums


async def billing_sources(store: Store) -> dict[str, str]:
    """The source that bills each endpoint (the one read last)."""
    return reconcile.source_of_each(await store.billing_reads())


async def billing_source_of(store: Store, endpoint: str) -> str | None:
    return (await billing_sources(store)).get(endpoint)


async def spend_by_basis(
    store: Store, endpoint: str, start: datetime, end: datetime
) -> tuple[Decimal, Basis]:
    """The endpoint's spend over [start, end) and its basis: "billed" when the final
    periods of its billing source cover the span whole (the sum of that source's lines,
    a line straddling an edge pro rata by time), else "estimated" (the price-table
    estimate its windows accrued; Decimal(0) when it has none). USD."""
    source = await billing_source_of(store, endpoint)
    if source is not None:
        found = await store.billing_periods(endpoint, source, start, end)
        lines = await store.billing_lines(endpoint, source, start, end)
        billed = reconcile.billed(found, lines, start, end)
        if billed is not None:
            return billed, "billed"
    windows, hours = await store.spend_rows(endpoint, start, end)
    estimated, _ = reconcile.estimate(windows, hours, start, end)
    return estimated or Decimal(0), "estimated"


async def period_reconciliations(
    store: Store, endpoint: str, since: datetime | None = None, until: datetime | None = None
) -> list[PeriodReconciliation]:
    """Each billing period of the endpoint (of its billing source) overlapping
    [since, until): billed against estimated, with the share spectax watched."""
    source = await billing_source_of(store, endpoint)
    if source is None:
        return []
    found = await store.billing_periods(endpoint, source, since, until)
    return [await _compare(store, endpoint, source, period) for period in found]


async def last_drift(
    store: Store, endpoint: str, now: datetime, candidates: int = 48
) -> PeriodReconciliation | None:
    """The endpoint's last final period that spectax watched whole and that billed
    something: the one `spectax_billing_drift_ratio` reports."""
    source = await billing_source_of(store, endpoint)
    if source is None:
        return None
    for start, end in await store.final_period_spans(source, [endpoint], now, candidates):
        result = await _compare(store, endpoint, source, Period(start, end, final=True))
        if result.drift_ratio is not None:
            return result
    return None


async def last_source_drift(
    store: Store, source: str, now: datetime, candidates: int = 48
) -> tuple[datetime, datetime, float] | None:
    """(start, end, drift) of the source's last final period that spectax watched whole
    on every endpoint the source bills: (Σ estimated − Σ billed) / Σ billed over them,
    the figure `spectax_billing_drift_ratio{source}` reports."""
    endpoints = [e for e, s in (await billing_sources(store)).items() if s == source]
    if not endpoints:
        return None
    for start, end in await store.final_period_spans(source, endpoints, now, candidates):
        period = Period(start, end, final=True)
        parts = [await _compare(store, e, source, period) for e in endpoints]
        drift = reconcile.combined_drift(parts)
        if drift is not None:
            return start, end, drift
    return None


async def billed_totals(store: Store) -> dict[str, tuple[str, Decimal]]:
    """Per endpoint, its billing source and the sum of its final USD lines."""
    sources = await billing_sources(store)
    return reconcile.billed_totals(sources, await store.final_line_totals(reconcile.USD))


async def rows_with_basis(
    store: Store,
    granularity: str,
    since: datetime | None = None,
    until: datetime | None = None,
    endpoints: Sequence[str] | None = None,
) -> list[tuple[Sums, Decimal | None, Basis]]:
    """History rows with the spend to show and its basis: a row whose span the final
    periods of its endpoint's billing source cover whole gets its share of the billed
    lines (shared by estimated spend; each line's shares add up to it exactly);
    any other row keeps its estimate."""
    rows = await store.rows(granularity, since, until, endpoints)
    sources = await billing_sources(store)
    by_endpoint: dict[str, list[Sums]] = {}
    for row in rows:
        by_endpoint.setdefault(row.endpoint, []).append(row)
    shares: dict[int, Decimal] = {}
    for endpoint, group in by_endpoint.items():
        source = sources.get(endpoint)
        if source is None:
            continue
        low, high = min(r.start for r in group), max(r.end for r in group)
        found = await store.billing_periods(endpoint, source, low, high)
        lines = await store.billing_lines(endpoint, source, low, high)
        shares.update(reconcile.billed_shares(group, found, lines))
    return reconcile.with_basis(rows, shares)


async def _compare(
    store: Store, endpoint: str, source: str, period: FinalSpan
) -> PeriodReconciliation:
    lines = await store.billing_lines(endpoint, source, period.start, period.end)
    windows, hours = await store.spend_rows(endpoint, period.start, period.end)
    return reconcile.compare_period(endpoint, source, period, lines, windows, hours)
