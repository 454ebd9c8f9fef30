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
from datetime import date
from decimal import Decimal
from typing import TYPE_CHECKING, Literal, Protocol

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


def spend_source_for(settings: Settings) -> SpendSource:
    """THE SEAM: where the report's spend comes from. Billing sources plug in here."""
    return EstimatedSpend()


def combined_basis(bases: set[str]) -> str:
    """One label for a sum of days: `estimated`, `billed`, or `mixed` when both occur."""
    if not bases:
        return "none"
    if len(bases) == 1:
        return next(iter(bases))
    return "mixed"
