"""The billing seam: what the report takes as an endpoint's spend for one day, and on what basis.

`spend_source_for(settings)` is the one place the report asks. Today it answers
with `EstimatedSpend`: every day on the estimated basis, the sum of the
windows' price-table estimates as stored. Billing sources plug in by returning
another `SpendSource` there: for each (endpoint, UTC day) it gives the amount
to use and its basis, `billed` once the bill for that day is final.

The report scales every other money figure of that endpoint-day (busy spend,
savings, cold-start and draft-load cost, draft overhead) by
`amount / estimated`, so they stay consistent with the spend shown beside
them; on the estimated basis the factor is exactly 1. A billed day of an
endpoint without a price (no estimate) shows the billed spend and its cost per
million tokens; its savings stay undefined (nothing to scale).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Literal, Protocol

from spectax.billing import ledger

if TYPE_CHECKING:
    from spectax.config import Settings
    from spectax.store import Store

Basis = Literal["estimated", "billed"]
DayKey = tuple[str, date]  # (endpoint, UTC day)


@dataclass(frozen=True, slots=True)
class Spend:
    """The spend of one endpoint over one UTC day, and where the number comes from."""

    amount: Decimal
    basis: Basis


class SpendSource(Protocol):
    async def daily(
        self, store: Store, estimated: Mapping[DayKey, Decimal | None]
    ) -> dict[DayKey, Spend]:
        """The spend to report for each (endpoint, UTC day) with stored history.

        `estimated` holds every endpoint-day the report covers, with the stored
        estimate of its spend (None: the endpoint has no price). Return an entry
        for the days whose spend is known; a day left out keeps its estimate.
        """
        ...


class EstimatedSpend:
    """The price-table estimate as stored in the windows: basis `estimated`."""

    async def daily(
        self, store: Store, estimated: Mapping[DayKey, Decimal | None]
    ) -> dict[DayKey, Spend]:
        return {
            key: Spend(amount, "estimated")
            for key, amount in estimated.items()
            if amount is not None
        }


class BilledSpend:
    """Billed money for the days the billing source's final periods cover whole.

    Each final bill is shared among the history rows it covers
    (`ledger.rows_with_basis`); a day is billed when all its rows are, and
    keeps its estimate otherwise.
    """

    async def daily(
        self, store: Store, estimated: Mapping[DayKey, Decimal | None]
    ) -> dict[DayKey, Spend]:
        if not estimated:
            return {}
        days = sorted({day for _, day in estimated})
        since = datetime.combine(days[0], time(), UTC)
        until = datetime.combine(days[-1] + timedelta(days=1), time(), UTC)
        endpoints = sorted({endpoint for endpoint, _ in estimated})
        totals: dict[DayKey, Decimal] = {}
        estimated_days: set[DayKey] = set()
        based = await ledger.rows_with_basis(store, "day", since, until, endpoints)
        for row, spend, basis in based:
            key = (row.endpoint, row.start.astimezone(UTC).date())
            if basis != "billed" or spend is None:
                estimated_days.add(key)
                continue
            totals[key] = totals.get(key, Decimal(0)) + spend
        return {
            key: Spend(amount, "billed")
            for key, amount in totals.items()
            if key not in estimated_days and key in estimated
        }


def spend_source_for(settings: Settings) -> SpendSource:
    """THE SEAM: where the report's spend comes from: billed once a bill is final."""
    invoiced = [spec for spec in settings.billing if spec.kind != "price_table"]
    return BilledSpend() if invoiced else EstimatedSpend()


def combined_basis(bases: set[str]) -> str:
    """One label for a sum of days: `estimated`, `billed`, or `mixed` when both occur."""
    if not bases:
        return "none"
    if len(bases) == 1:
        return next(iter(bases))
    return "mixed"
