"""Billing history: the lines and covered periods each read of a billing source found, when
each source was last read, and the rows reconciliation reads back.

The store only keeps and reads; which source bills an endpoint, what counts as billed
and how a bill is shared over history rows are rules of spectax.billing.reconcile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol, TypeVar

from sqlalchemy import ColumnElement, Select, delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from spectax.store.database import DATABASE_ERRORS, Database, StoreError, excluded, reason
from spectax.store.models import (
    BillingLineRow,
    BillingPeriodRow,
    BillingPollRow,
    HourlyRow,
    WindowRow,
)
from spectax.store.rollup import period_start
from spectax.units import Span, covers, now_utc, utc

Q = TypeVar("Q")
CHUNK_ROWS = 500  # rows per INSERT ... VALUES statement (its bound parameters stay few)


class PeriodData(Span, Protocol):
    """A span a billing source answered for completely (spectax.billing.types.Period)."""

    @property
    def final(self) -> bool: ...


class LineData(PeriodData, Protocol):
    """What the store keeps of a billing line (spectax.billing.types.BillingLine is one)."""

    @property
    def source(self) -> str: ...
    @property
    def resource(self) -> str: ...
    @property
    def endpoint(self) -> str | None: ...
    @property
    def amount(self) -> Decimal: ...
    @property
    def currency(self) -> str: ...
    @property
    def fetched_at(self) -> datetime: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendRow:
    """The estimated spend of one stored window or hour, and the seconds it watched."""

    start: datetime
    seconds: float
    spend_usd: Decimal | None


class BillingHistory(Database):
    async def save_billing(
        self,
        source: str,
        lines: Sequence[LineData],
        periods: Sequence[PeriodData],
        endpoints: Sequence[str],
    ) -> int:
        """One read of a billing source, in one transaction. Its lines of configured
        endpoints are upserted by (source, resource, start, end), so a revision replaces
        the earlier value; the periods it covered are recorded for each endpoint it bills;
        and a line it no longer reports inside those periods is removed. Returns the
        number of lines stored."""
        mapped = [line for line in lines if line.endpoint is not None]
        try:
            async with self._sessions.begin() as session:
                await self._upsert_billing_lines(session, mapped)
                await self._upsert_billing_periods(session, source, periods, endpoints)
                await self._prune_billing_lines(session, source, mapped, periods)
        except DATABASE_ERRORS as exc:
            raise StoreError(f"cannot write billing lines of {source}: {reason(exc)}") from None
        return len(mapped)

    async def upsert_billing_lines(self, lines: Sequence[LineData]) -> int:
        """Upsert lines by (source, resource, start, end); a later fetch replaces an earlier."""
        try:
            async with self._sessions.begin() as session:
                await self._upsert_billing_lines(session, lines)
        except DATABASE_ERRORS as exc:
            raise StoreError(f"cannot write billing lines: {reason(exc)}") from None
        return len(lines)

    async def _upsert_billing_lines(self, session: AsyncSession, lines: Sequence[LineData]) -> None:
        # one row per key within a statement
        unique = {(line.source, line.resource, line.start, line.end): line for line in lines}
        rows = [
            {
                "source": line.source,
                "resource": line.resource,
                "endpoint": line.endpoint,
                "start": line.start,
                "end": line.end,
                "amount": line.amount,
                "currency": line.currency,
                "final": line.final,
                "fetched_at": line.fetched_at,
            }
            for line in unique.values()
        ]
        await self._upsert_chunks(
            session,
            BillingLineRow,
            rows,
            ["source", "resource", "start", "end"],
            lambda statement: {
                name: statement.excluded[name]
                for name in ("endpoint", "amount", "currency", "final", "fetched_at")
            },
            where=BillingLineRow.fetched_at <= excluded("fetched_at"),
        )

    async def _upsert_billing_periods(
        self,
        session: AsyncSession,
        source: str,
        periods: Sequence[PeriodData],
        endpoints: Sequence[str],
    ) -> None:
        fetched_at = now_utc()
        rows = [
            {
                "source": source,
                "endpoint": endpoint,
                "start": period.start,
                "end": period.end,
                "final": period.final,
                "fetched_at": fetched_at,
            }
            for endpoint in dict.fromkeys(endpoints)
            for period in {(p.start, p.end): p for p in periods}.values()
        ]
        await self._upsert_chunks(
            session,
            BillingPeriodRow,
            rows,
            ["source", "endpoint", "start", "end"],
            lambda statement: {"final": statement.excluded.final, "fetched_at": fetched_at},
        )

    async def _upsert_chunks(
        self,
        session: AsyncSession,
        table: type[BillingLineRow | BillingPeriodRow],
        rows: Sequence[dict[str, Any]],
        key: list[str],
        updates: Callable[[Any], dict[str, Any]],
        where: ColumnElement[bool] | None = None,
    ) -> None:
        """INSERT ... VALUES, CHUNK_ROWS rows a statement, ON CONFLICT (`key`) DO UPDATE
        `updates(statement)` (the statement's `excluded` names the values it brought)."""
        insert = self._insert
        for i in range(0, len(rows), CHUNK_ROWS):
            statement = insert(table).values(rows[i : i + CHUNK_ROWS])
            await session.execute(
                statement.on_conflict_do_update(
                    index_elements=key, set_=updates(statement), where=where
                )
            )

    async def _prune_billing_lines(
        self,
        session: AsyncSession,
        source: str,
        kept: Sequence[LineData],
        periods: Sequence[PeriodData],
    ) -> None:
        if not periods:
            return
        low, high = min(p.start for p in periods), max(p.end for p in periods)
        keys = {(line.resource, line.start, line.end) for line in kept}
        query = select(
            BillingLineRow.id, BillingLineRow.resource, BillingLineRow.start, BillingLineRow.end
        ).where(
            BillingLineRow.source == source,
            BillingLineRow.start >= low,
            BillingLineRow.end <= high,
        )
        stale = [
            row_id
            for row_id, resource, start, end in (await session.execute(query)).all()
            if (resource, start, end) not in keys and covers(periods, start, end)
        ]
        for i in range(0, len(stale), CHUNK_ROWS):
            await session.execute(
                delete(BillingLineRow).where(BillingLineRow.id.in_(stale[i : i + CHUNK_ROWS]))
            )

    async def billing_lines(
        self,
        endpoint: str | None = None,
        source: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[BillingLineRow]:
        """Stored lines overlapping [since, until), oldest first."""
        query = select(BillingLineRow).order_by(
            BillingLineRow.start, BillingLineRow.source, BillingLineRow.resource
        )
        if endpoint is not None:
            query = query.where(BillingLineRow.endpoint == endpoint)
        if source is not None:
            query = query.where(BillingLineRow.source == source)
        query = _overlapping(query, BillingLineRow, since, until)
        async with self._sessions() as session:
            return list((await session.scalars(query)).all())

    async def billing_periods(
        self,
        endpoint: str,
        source: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[BillingPeriodRow]:
        query = select(BillingPeriodRow).where(BillingPeriodRow.endpoint == endpoint)
        if source is not None:
            query = query.where(BillingPeriodRow.source == source)
        query = _overlapping(query, BillingPeriodRow, since, until)
        async with self._sessions() as session:
            return list((await session.scalars(query.order_by(BillingPeriodRow.start))).all())

    async def billing_reads(self) -> list[tuple[str, str, datetime]]:
        """(endpoint, source, when that source last recorded periods of it), every pair."""
        latest = func.max(BillingPeriodRow.fetched_at)
        query = select(BillingPeriodRow.endpoint, BillingPeriodRow.source, latest).group_by(
            BillingPeriodRow.endpoint, BillingPeriodRow.source
        )
        async with self._sessions() as session:
            rows = (await session.execute(query)).all()
        return [(endpoint, source, utc(fetched_at)) for endpoint, source, fetched_at in rows]

    async def final_period_spans(
        self, source: str, endpoints: Sequence[str], until: datetime, limit: int
    ) -> list[tuple[datetime, datetime]]:
        """(start, end) of the source's final periods of any of `endpoints` ending by
        `until`, the latest first, at most `limit`."""
        query = (
            select(BillingPeriodRow.start, BillingPeriodRow.end)
            .where(
                BillingPeriodRow.source == source,
                BillingPeriodRow.endpoint.in_(list(endpoints)),
                BillingPeriodRow.final.is_(True),
                BillingPeriodRow.end <= until,
            )
            .group_by(BillingPeriodRow.start, BillingPeriodRow.end)
            .order_by(BillingPeriodRow.end.desc(), BillingPeriodRow.start.desc())
            .limit(limit)
        )
        async with self._sessions() as session:
            spans = (await session.execute(query)).all()
        return [(utc(start), utc(end)) for start, end in spans]

    async def final_line_totals(self, currency: str) -> list[tuple[str | None, str, Decimal]]:
        """(endpoint, source, sum of its final lines in `currency`), per endpoint and source."""
        query = (
            select(BillingLineRow.endpoint, BillingLineRow.source, func.sum(BillingLineRow.amount))
            .where(BillingLineRow.final.is_(True), BillingLineRow.currency == currency)
            .group_by(BillingLineRow.endpoint, BillingLineRow.source)
        )
        async with self._sessions() as session:
            rows = (await session.execute(query)).all()
        return [(endpoint, source, amount or Decimal(0)) for endpoint, source, amount in rows]

    async def spend_rows(
        self, endpoint: str, start: datetime, end: datetime
    ) -> tuple[list[SpendRow], list[SpendRow]]:
        """The endpoint's stored windows and hourly rollups starting in [start, end)."""
        windows = select(WindowRow.start, WindowRow.seconds, WindowRow.spend_usd).where(
            WindowRow.endpoint == endpoint, WindowRow.start >= start, WindowRow.start < end
        )
        hours = select(HourlyRow.start, HourlyRow.seconds, HourlyRow.spend_usd).where(
            HourlyRow.endpoint == endpoint, HourlyRow.start >= start, HourlyRow.start < end
        )
        async with self._sessions() as session:
            window_rows = (await session.execute(windows)).all()
            hour_rows = (await session.execute(hours)).all()
        return (
            [
                SpendRow(start=utc(t), seconds=seconds, spend_usd=spend)
                for t, seconds, spend in window_rows
            ],
            [
                SpendRow(start=utc(t), seconds=seconds, spend_usd=spend)
                for t, seconds, spend in hour_rows
            ],
        )

    async def estimated_spend_by_hour(
        self, since: datetime, until: datetime
    ) -> list[tuple[str, datetime, Decimal]]:
        """(endpoint, hour, estimated spend) from the windows starting in [since, until)."""
        query = select(WindowRow.endpoint, WindowRow.start, WindowRow.spend_usd).where(
            WindowRow.start >= since, WindowRow.start < until, WindowRow.spend_usd.is_not(None)
        )
        sums: dict[tuple[str, datetime], Decimal] = {}
        async with self._sessions() as session:
            for endpoint, start, spend in (await session.execute(query)).all():
                key = (endpoint, period_start(utc(start), "hour"))
                sums[key] = sums.get(key, Decimal(0)) + (spend or Decimal(0))
        return [(endpoint, hour, amount) for (endpoint, hour), amount in sorted(sums.items())]

    async def billing_polls(self) -> dict[str, BillingPollRow]:
        async with self._sessions() as session:
            rows = (await session.scalars(select(BillingPollRow))).all()
        return {row.source: row for row in rows}

    async def save_billing_poll(
        self, source: str, attempted_at: datetime, succeeded_at: datetime | None, ok: bool
    ) -> None:
        """Record a read of a billing source (`succeeded_at` None keeps the last success)."""
        insert = self._insert
        values: dict[str, Any] = {"source": source, "attempted_at": attempted_at, "ok": ok}
        updates: dict[str, Any] = {"attempted_at": attempted_at, "ok": ok}
        if succeeded_at is not None:
            values["succeeded_at"] = updates["succeeded_at"] = succeeded_at
        try:
            async with self._sessions.begin() as session:
                statement = insert(BillingPollRow).values(**values)
                await session.execute(
                    statement.on_conflict_do_update(index_elements=["source"], set_=updates)
                )
        except DATABASE_ERRORS as exc:
            raise StoreError(f"cannot record a read of {source}: {reason(exc)}") from None


def _overlapping(
    query: Select[Q],
    table: type[BillingLineRow | BillingPeriodRow],
    since: datetime | None,
    until: datetime | None,
) -> Select[Q]:
    """`query` narrowed to the rows of `table` overlapping [since, until) (open when None)."""
    if since is not None:
        query = query.where(table.end > since)
    if until is not None:
        query = query.where(table.start < until)
    return query
