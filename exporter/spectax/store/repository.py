"""Reading and writing history. The storage URL picks the backend; the queries are the same."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import ColumnElement, bindparam, delete, func, literal_column, select
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from spectax.billing import reconcile as recon
from spectax.billing.types import BillingLine, Period
from spectax.engines.base import EngineSample
from spectax.pipeline.windows import Window
from spectax.store import rollups, schema
from spectax.store.cursor import decode_sample, encode_sample
from spectax.store.models import (
    BillingLineRow,
    BillingPeriodRow,
    BillingPollRow,
    Cursor,
    HourlyRow,
    RollupDue,
    Sums,
    WindowRow,
)
from spectax.store.rows import window_from_rows


@dataclass(frozen=True, slots=True)
class Restored:
    """What the store hands back to a monitor at start-up."""

    spend_usd_total: Decimal = Decimal(0)
    cold_start_usd_total: Decimal = Decimal(0)
    cursor: tuple[float, EngineSample] | None = None
    open_window: Window | None = None
    recent_windows: tuple[Window, ...] = ()


# One write of closed windows: the endpoint, its window rows, and the cursor that goes with them.
ROLLUP_BATCH_PERIODS = 100  # periods rolled per transaction (~30 ms of CPU on the loop)
WindowWrite = tuple[str, Sequence[dict[str, Any]], tuple[float, EngineSample] | None]


class StoreError(RuntimeError):
    """The database could not be reached or refused a write. The message never holds the URL."""


class Store:
    def __init__(self, engine: AsyncEngine):
        self._engine = engine
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)

    @classmethod
    async def open(cls, url: str, migrate: bool = False) -> Store:
        """Connect and check the schema: an empty database gets the current one.

        With `migrate`, an older schema is upgraded (`spectax db upgrade`);
        otherwise it raises SchemaMismatch saying what to run.
        """
        if url.startswith("sqlite") and ":///" in url:
            path = url.split(":///", 1)[1]
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(url, pool_pre_ping=True)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(schema.upgrade if migrate else schema.ensure_current)
        except (SQLAlchemyError, OSError) as exc:
            await engine.dispose()
            raise StoreError(f"cannot open the store ({_backend(url)}): {_reason(exc)}") from None
        except schema.SchemaMismatch:
            await engine.dispose()
            raise
        return cls(engine)

    @property
    def backend(self) -> str:
        return self._engine.dialect.name

    async def close(self) -> None:
        await self._engine.dispose()

    async def save(
        self,
        endpoint: str,
        rows: Sequence[dict[str, Any]],
        cursor: tuple[float, EngineSample] | None,
    ) -> None:
        """Upsert window rows, mark their hours for rollup, move the cursor: one transaction."""
        await self.save_many([(endpoint, rows, cursor)])

    async def save_many(self, writes: Sequence[WindowWrite]) -> None:
        """`save` for many writes (endpoint, rows, cursor) in one transaction.

        At fleet scale every endpoint closes its window at the same aligned
        instant; one transaction for all of them costs a fraction of one each
        (bench/store_ingest.py). The rows are executed one statement each
        (executemany), in order, so writes that repeat a window (a replay from
        the spool) or an endpoint end as they would one write at a time: the
        larger window and the later cursor win.
        """
        windows = [row for _, rows, _ in writes for row in rows]
        due = sorted(
            {
                (endpoint, rollups.period_start(row["start"], "hour"))
                for endpoint, rows, _ in writes
                for row in rows
            }
        )
        cursors = [
            {"endpoint": endpoint, "observed_at": cursor[0], "sample": encode_sample(cursor[1])}
            for endpoint, _, cursor in writes
            if cursor is not None
        ]
        insert = _insert_for(self._engine.dialect.name)
        try:
            async with self._sessions.begin() as session:
                connection = await session.connection()
                if windows:
                    # A window only grows (a partial one resumed after a restart): never let
                    # a replayed, older version replace a newer one.
                    await connection.execute(
                        _upsert_statement(
                            insert, WindowRow, only_if=WindowRow.seconds <= _excluded("seconds")
                        ),
                        windows,
                    )
                if due:
                    await connection.execute(
                        _mark_due_statement(insert),
                        [
                            {"granularity": "hour", "endpoint": e, "start": start, "version": 1}
                            for e, start in due
                        ],
                    )
                if cursors:
                    # The cursor only moves forward, so replaying an old write is harmless.
                    statement = insert(Cursor)
                    await connection.execute(
                        statement.on_conflict_do_update(
                            index_elements=["endpoint"],
                            set_={
                                "observed_at": statement.excluded.observed_at,
                                "sample": statement.excluded.sample,
                            },
                            where=Cursor.observed_at < statement.excluded.observed_at,
                        ),
                        cursors,
                    )
        except (SQLAlchemyError, OSError) as exc:
            names = sorted({endpoint for endpoint, _, _ in writes})
            more = f" and {len(names) - 3} more" if len(names) > 3 else ""
            raise StoreError(
                f"cannot write windows of {', '.join(names[:3])}{more}: {_reason(exc)}"
            ) from None

    async def _upsert(
        self,
        session: AsyncSession,
        table: type[Sums],
        rows: Sequence[dict[str, Any]],
    ) -> None:
        insert = _insert_for(self._engine.dialect.name)
        connection = await session.connection()
        await connection.execute(_upsert_statement(insert, table), list(rows))

    async def rollup(self) -> int:
        """Recompute every hour, then every day, marked as due. Returns the periods rolled.

        Idempotent and resumable: each period is recomputed whole from its
        source rows and replaces its rows, in the transaction that clears its
        mark, and only if no write re-marked it meanwhile. Periods are rolled
        in batches: at a window boundary every endpoint marks its hour at once,
        and one transaction per period costs ~10 ms each (bench/store_ingest.py).
        """
        done = 0
        for granularity, source in (("hour", WindowRow), ("day", HourlyRow)):
            async with self._sessions() as session:
                query = select(RollupDue.endpoint, RollupDue.start, RollupDue.version).where(
                    RollupDue.granularity == granularity
                )
                due = [(m.endpoint, m.start, m.version) for m in await session.execute(query)]
            for i in range(0, len(due), ROLLUP_BATCH_PERIODS):
                batch = due[i : i + ROLLUP_BATCH_PERIODS]
                await self._roll(batch, granularity, source)
                done += len(batch)
        return done

    async def _roll(
        self, marks: Sequence[tuple[str, datetime, int]], granularity: str, source: type[Sums]
    ) -> None:
        """Roll the periods of `marks` (endpoint, marked start, version) in one transaction."""
        table = rollups.TABLES[granularity]
        by_period: dict[datetime, set[str]] = {}
        for endpoint, marked, _ in marks:
            by_period.setdefault(rollups.period_start(marked, granularity), set()).add(endpoint)
        insert = _insert_for(self._engine.dialect.name)
        columns = [column for column in sa_inspect(source).columns if column.name != "id"]
        async with self._sessions.begin() as session:
            connection = await session.connection()
            summed: list[dict[str, Any]] = []
            days: set[tuple[str, datetime]] = set()
            for start, endpoints in sorted(by_period.items()):
                end = start + rollups.PERIOD[granularity]
                names = sorted(endpoints)
                query = select(*columns).where(
                    source.endpoint.in_(names), source.start >= start, source.start < end
                )
                rows: dict[str, list[Any]] = {name: [] for name in names}
                for row in await connection.execute(query):
                    rows[row.endpoint].append(row)
                await connection.execute(
                    delete(table).where(table.endpoint.in_(names), table.start == start)
                )
                for name in names:
                    summed += rollups.rollup_rows(name, start, granularity, rows[name])
                    days.add((name, rollups.period_start(start, "day")))
            if summed:
                await connection.execute(_upsert_statement(insert, table), summed)
            if granularity == "hour":
                await connection.execute(
                    _mark_due_statement(insert),
                    [
                        {"granularity": "day", "endpoint": e, "start": day, "version": 1}
                        for e, day in sorted(days)
                    ],
                )
            await connection.execute(
                delete(RollupDue).where(
                    RollupDue.granularity == granularity,
                    RollupDue.endpoint == bindparam("mark_endpoint"),
                    RollupDue.start == bindparam("mark_start"),
                    RollupDue.version == bindparam("mark_version"),
                ),
                [
                    {"mark_endpoint": e, "mark_start": marked, "mark_version": version}
                    for e, marked, version in marks
                ],
            )

    async def apply_retention(self, now: datetime, keep: dict[str, float | None]) -> int:
        """Delete rows older than their granularity's retention (seconds; None keeps forever),
        but never rows whose rollup is still due. Returns the rows deleted."""
        deleted = 0
        async with self._sessions.begin() as session:
            for granularity, seconds in keep.items():
                if seconds is None:
                    continue
                table = rollups.TABLES[granularity]
                horizon = now - timedelta(seconds=seconds)
                rolled_into = "hour" if granularity == "window" else "day"
                oldest_due = (
                    await session.execute(
                        select(func.min(RollupDue.start)).where(
                            RollupDue.granularity == rolled_into
                        )
                    )
                ).scalar()
                if oldest_due is not None:
                    horizon = min(horizon, rollups.period_start(oldest_due, rolled_into))
                result = await session.execute(delete(table).where(table.start < horizon))
                deleted += getattr(result, "rowcount", 0) or 0
        return deleted

    async def rows(
        self,
        granularity: str,
        since: datetime | None = None,
        until: datetime | None = None,
        endpoints: Sequence[str] | None = None,
    ) -> list[Sums]:
        """Stored rows of one granularity (window, hour, day), oldest first."""
        table = rollups.TABLES[granularity]
        query = select(table).order_by(table.start, table.endpoint, table.model)
        if since is not None:
            query = query.where(table.start >= since)
        if until is not None:
            query = query.where(table.start < until)
        if endpoints:
            query = query.where(table.endpoint.in_(list(endpoints)))
        async with self._sessions() as session:
            return list((await session.scalars(query)).all())

    async def cursor(self, endpoint: str) -> tuple[float, EngineSample] | None:
        async with self._sessions() as session:
            row = await session.get(Cursor, endpoint)
        return (row.observed_at, decode_sample(row.sample)) if row else None

    async def window_rows(
        self,
        endpoint: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[WindowRow]:
        query = select(WindowRow).order_by(WindowRow.start, WindowRow.endpoint, WindowRow.model)
        if endpoint is not None:
            query = query.where(WindowRow.endpoint == endpoint)
        if since is not None:
            query = query.where(WindowRow.start >= since)
        if until is not None:
            query = query.where(WindowRow.start < until)
        async with self._sessions() as session:
            return list((await session.scalars(query)).all())

    async def money_totals(self, endpoint: str) -> tuple[Decimal, Decimal]:
        """Accrued (spend, cold-start spend) of an endpoint over all stored windows."""
        query = select(func.sum(WindowRow.spend_usd), func.sum(WindowRow.cold_start_usd)).where(
            WindowRow.endpoint == endpoint
        )
        async with self._sessions() as session:
            spend, cold = (await session.execute(query)).one()
        # the sums keep the column's type, so they arrive as Decimals already
        return spend or Decimal(0), cold or Decimal(0)

    async def recent_windows(self, endpoint: str, count: int) -> list[Window]:
        """The endpoint's last `count` stored windows, oldest first."""
        starts = (
            select(WindowRow.start)
            .where(WindowRow.endpoint == endpoint)
            .group_by(WindowRow.start)
            .order_by(WindowRow.start.desc())
            .limit(count)
        )
        query = select(WindowRow).where(
            WindowRow.endpoint == endpoint, WindowRow.start.in_(starts.scalar_subquery())
        )
        async with self._sessions() as session:
            rows = list((await session.scalars(query.order_by(WindowRow.start))).all())
        by_start: dict[datetime, list[WindowRow]] = {}
        for row in rows:
            by_start.setdefault(row.start, []).append(row)
        return [window_from_rows(group) for group in by_start.values()]

    async def restore(self, endpoint: str, window_seconds: float, history: int) -> Restored:
        """Everything a monitor needs to carry on where the last run stopped."""
        spend, cold = await self.money_totals(endpoint)
        cursor = await self.cursor(endpoint)
        open_window = None
        if cursor is not None:
            start = (cursor[0] // window_seconds) * window_seconds
            rows = await self.window_rows(endpoint, since=_utc(start), until=_utc(start + 1e-3))
            open_window = window_from_rows(rows) if rows else None
        recent = await self.recent_windows(endpoint, history)
        if open_window is not None:
            recent = [w for w in recent if w.start != open_window.start]
        return Restored(spend, cold, cursor, open_window, tuple(recent))

    # ------------------------------------------------------------ billing

    async def save_billing(
        self,
        source: str,
        lines: Sequence[BillingLine],
        periods: Sequence[Period],
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
        except (SQLAlchemyError, OSError) as exc:
            raise StoreError(f"cannot write billing lines of {source}: {_reason(exc)}") from None
        return len(mapped)

    async def upsert_billing_lines(self, lines: Sequence[BillingLine]) -> int:
        """Upsert lines by (source, resource, start, end); a later fetch replaces an earlier."""
        try:
            async with self._sessions.begin() as session:
                await self._upsert_billing_lines(session, lines)
        except (SQLAlchemyError, OSError) as exc:
            raise StoreError(f"cannot write billing lines: {_reason(exc)}") from None
        return len(lines)

    async def _upsert_billing_lines(
        self, session: AsyncSession, lines: Sequence[BillingLine]
    ) -> None:
        unique = {line.key: line for line in lines}  # one row per key within a statement
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
        insert = _insert_for(self._engine.dialect.name)
        for i in range(0, len(rows), 500):
            statement = insert(BillingLineRow).values(rows[i : i + 500])
            await session.execute(
                statement.on_conflict_do_update(
                    index_elements=["source", "resource", "start", "end"],
                    set_={
                        name: statement.excluded[name]
                        for name in ("endpoint", "amount", "currency", "final", "fetched_at")
                    },
                    where=BillingLineRow.fetched_at <= _excluded("fetched_at"),
                )
            )

    async def _upsert_billing_periods(
        self,
        session: AsyncSession,
        source: str,
        periods: Sequence[Period],
        endpoints: Sequence[str],
    ) -> None:
        fetched_at = datetime.now(UTC)
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
        insert = _insert_for(self._engine.dialect.name)
        for i in range(0, len(rows), 500):
            statement = insert(BillingPeriodRow).values(rows[i : i + 500])
            await session.execute(
                statement.on_conflict_do_update(
                    index_elements=["source", "endpoint", "start", "end"],
                    set_={"final": statement.excluded.final, "fetched_at": fetched_at},
                )
            )

    async def _prune_billing_lines(
        self,
        session: AsyncSession,
        source: str,
        kept: Sequence[BillingLine],
        periods: Sequence[Period],
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
            if (resource, start, end) not in keys and recon.covers(periods, start, end)
        ]
        for i in range(0, len(stale), 500):
            await session.execute(
                delete(BillingLineRow).where(BillingLineRow.id.in_(stale[i : i + 500]))
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
        if since is not None:
            query = query.where(BillingLineRow.end > since)
        if until is not None:
            query = query.where(BillingLineRow.start < until)
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
        if since is not None:
            query = query.where(BillingPeriodRow.end > since)
        if until is not None:
            query = query.where(BillingPeriodRow.start < until)
        async with self._sessions() as session:
            return list((await session.scalars(query.order_by(BillingPeriodRow.start))).all())

    async def billing_source_of(self, endpoint: str) -> str | None:
        """The source that bills the endpoint: of those with periods of it, the one read
        last (one per endpoint, so that no money is counted twice)."""
        return (await self._billing_sources()).get(endpoint)

    async def _billing_sources(self) -> dict[str, str]:
        latest = func.max(BillingPeriodRow.fetched_at)
        query = select(BillingPeriodRow.endpoint, BillingPeriodRow.source, latest).group_by(
            BillingPeriodRow.endpoint, BillingPeriodRow.source
        )
        chosen: dict[str, tuple[datetime, str]] = {}
        async with self._sessions() as session:
            for endpoint, source, fetched_at in (await session.execute(query)).all():
                fetched = _as_utc(fetched_at)
                if endpoint not in chosen or (fetched, source) > chosen[endpoint]:
                    chosen[endpoint] = (fetched, source)
        return {endpoint: source for endpoint, (_, source) in chosen.items()}

    async def billing_polls(self) -> dict[str, BillingPollRow]:
        async with self._sessions() as session:
            rows = (await session.scalars(select(BillingPollRow))).all()
        return {row.source: row for row in rows}

    async def save_billing_poll(
        self, source: str, attempted_at: datetime, succeeded_at: datetime | None, ok: bool
    ) -> None:
        """Record a read of a billing source (`succeeded_at` None keeps the last success)."""
        insert = _insert_for(self._engine.dialect.name)
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
        except (SQLAlchemyError, OSError) as exc:
            raise StoreError(f"cannot record a read of {source}: {_reason(exc)}") from None

    async def spend_by_basis(
        self, endpoint: str, start: datetime, end: datetime
    ) -> tuple[Decimal, Literal["billed", "estimated"]]:
        """The endpoint's spend over [start, end) and its basis: "billed" when the final
        periods of its billing source cover the span whole (the sum of that source's lines,
        a line straddling an edge pro rata by time), else "estimated" (the price-table
        estimate its windows accrued; Decimal(0) when it has none). USD."""
        billed = await self._billed(endpoint, start, end)
        if billed is not None:
            return billed, "billed"
        estimated, _ = await self._estimate(endpoint, start, end)
        return estimated or Decimal(0), "estimated"

    async def _billed(self, endpoint: str, start: datetime, end: datetime) -> Decimal | None:
        """The billed spend over [start, end), or None when final periods do not cover it."""
        source = await self.billing_source_of(endpoint)
        if source is None:
            return None
        periods = await self.billing_periods(endpoint, source, start, end)
        if not recon.covers([p for p in periods if p.final], start, end):
            return None
        lines = await self.billing_lines(endpoint, source, start, end)
        if any(line.currency != "USD" for line in lines):
            return None  # spectax's money is USD; a bill in another currency stays apart
        return recon.billed_in(lines, start, end)

    async def _estimate(
        self, endpoint: str, start: datetime, end: datetime
    ) -> tuple[Decimal | None, float]:
        """The windows' estimated spend over [start, end) (hourly rollups for hours whose
        windows retention removed) and the share of the span they cover."""
        windows = select(WindowRow.start, WindowRow.seconds, WindowRow.spend_usd).where(
            WindowRow.endpoint == endpoint, WindowRow.start >= start, WindowRow.start < end
        )
        hours = select(HourlyRow.start, HourlyRow.seconds, HourlyRow.spend_usd).where(
            HourlyRow.endpoint == endpoint, HourlyRow.start >= start, HourlyRow.start < end
        )
        async with self._sessions() as session:
            window_rows = (await session.execute(windows)).all()
            hour_rows = (await session.execute(hours)).all()
        spend: Decimal | None = None
        covered: dict[datetime, float] = {}
        for row_start, row_seconds, row_spend in window_rows:
            covered[_as_utc(row_start)] = row_seconds
            if row_spend is not None:
                spend = (spend or Decimal(0)) + row_spend
        watched = {rollups.period_start(t, "hour") for t in covered}
        hourly: dict[datetime, float] = {}
        for row_start, row_seconds, row_spend in hour_rows:
            hour = _as_utc(row_start)
            if hour in watched:
                continue
            hourly[hour] = max(hourly.get(hour, 0.0), row_seconds)
            if row_spend is not None:
                spend = (spend or Decimal(0)) + row_spend
        total = sum(covered.values()) + sum(hourly.values())
        length = (end - start).total_seconds()
        return spend, (total / length if length > 0 else 0.0)

    async def reconcile(
        self, endpoint: str, since: datetime | None = None, until: datetime | None = None
    ) -> list[recon.PeriodReconciliation]:
        """Each billing period of the endpoint (of its billing source) overlapping
        [since, until): billed against estimated, with the share spectax watched."""
        source = await self.billing_source_of(endpoint)
        if source is None:
            return []
        periods = await self.billing_periods(endpoint, source, since, until)
        return [await self._reconcile_period(endpoint, source, p) for p in periods]

    async def _reconcile_period(
        self, endpoint: str, source: str, period: BillingPeriodRow
    ) -> recon.PeriodReconciliation:
        start, end = _as_utc(period.start), _as_utc(period.end)
        lines = [
            line
            for line in await self.billing_lines(endpoint, source, start, end)
            if line.currency == "USD"
        ]
        estimated, coverage = await self._estimate(endpoint, start, end)
        return recon.PeriodReconciliation(
            endpoint=endpoint,
            source=source,
            start=start,
            end=end,
            final=period.final,
            billed=recon.billed_in(lines, start, end),
            estimated=estimated,
            coverage=coverage,
        )

    async def last_drift(
        self, endpoint: str, now: datetime, candidates: int = 48
    ) -> recon.PeriodReconciliation | None:
        """The endpoint's last final period that spectax watched whole and that billed
        something: the one `spectax_billing_drift_ratio` reports."""
        source = await self.billing_source_of(endpoint)
        if source is None:
            return None
        query = (
            select(BillingPeriodRow)
            .where(
                BillingPeriodRow.endpoint == endpoint,
                BillingPeriodRow.source == source,
                BillingPeriodRow.final.is_(True),
                BillingPeriodRow.end <= now,
            )
            .order_by(BillingPeriodRow.end.desc(), BillingPeriodRow.start.desc())
            .limit(candidates)
        )
        async with self._sessions() as session:
            periods = list((await session.scalars(query)).all())
        for period in periods:
            result = await self._reconcile_period(endpoint, source, period)
            if result.drift_ratio is not None:
                return result
        return None

    async def last_source_drift(
        self, source: str, now: datetime, candidates: int = 48
    ) -> tuple[datetime, datetime, float] | None:
        """(start, end, drift) of the source's last final period that spectax watched whole
        on every endpoint the source bills: (Σ estimated − Σ billed) / Σ billed over them,
        the figure `spectax_billing_drift_ratio{source}` reports."""
        endpoints = [e for e, s in (await self._billing_sources()).items() if s == source]
        if not endpoints:
            return None
        spans = (
            select(BillingPeriodRow.start, BillingPeriodRow.end)
            .where(
                BillingPeriodRow.source == source,
                BillingPeriodRow.endpoint.in_(endpoints),
                BillingPeriodRow.final.is_(True),
                BillingPeriodRow.end <= now,
            )
            .group_by(BillingPeriodRow.start, BillingPeriodRow.end)
            .order_by(BillingPeriodRow.end.desc(), BillingPeriodRow.start.desc())
            .limit(candidates)
        )
        async with self._sessions() as session:
            candidates_found = (await session.execute(spans)).all()
        for start, end in candidates_found:
            period = BillingPeriodRow(start=_as_utc(start), end=_as_utc(end), final=True)
            parts = [await self._reconcile_period(e, source, period) for e in endpoints]
            if any(p.estimated is None or p.coverage < recon.MIN_COVERAGE for p in parts):
                continue
            billed = sum((p.billed for p in parts), Decimal(0))
            estimated = sum((p.estimated or Decimal(0) for p in parts), Decimal(0))
            if billed != 0:
                return _as_utc(start), _as_utc(end), float((estimated - billed) / billed)
        return None

    async def billed_totals(self) -> dict[str, tuple[str, Decimal]]:
        """Per endpoint, its billing source and the sum of its final USD lines."""
        sources = await self._billing_sources()
        query = (
            select(BillingLineRow.endpoint, BillingLineRow.source, func.sum(BillingLineRow.amount))
            .where(BillingLineRow.final.is_(True), BillingLineRow.currency == "USD")
            .group_by(BillingLineRow.endpoint, BillingLineRow.source)
        )
        totals = {endpoint: (source, Decimal(0)) for endpoint, source in sources.items()}
        async with self._sessions() as session:
            for endpoint, source, amount in (await session.execute(query)).all():
                if endpoint is not None and sources.get(endpoint) == source:
                    totals[endpoint] = (source, amount or Decimal(0))
        return totals

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
                key = (endpoint, rollups.period_start(_as_utc(start), "hour"))
                sums[key] = sums.get(key, Decimal(0)) + (spend or Decimal(0))
        return [(endpoint, hour, amount) for (endpoint, hour), amount in sorted(sums.items())]

    async def rows_with_basis(
        self,
        granularity: str,
        since: datetime | None = None,
        until: datetime | None = None,
        endpoints: Sequence[str] | None = None,
    ) -> list[tuple[Sums, Decimal | None, Literal["billed", "estimated"]]]:
        """History rows with the spend to show and its basis: a row whose span the final
        periods of its endpoint's billing source cover whole gets its share of the billed
        lines (shared by estimated spend; each line's shares add up to it exactly);
        any other row keeps its estimate."""
        rows = await self.rows(granularity, since, until, endpoints)
        sources = await self._billing_sources()
        by_endpoint: dict[str, list[Sums]] = {}
        for row in rows:
            by_endpoint.setdefault(row.endpoint, []).append(row)
        shares: dict[int, Decimal] = {}
        for endpoint, group in by_endpoint.items():
            source = sources.get(endpoint)
            if source is None:
                continue
            low, high = min(r.start for r in group), max(r.end for r in group)
            final = [p for p in await self.billing_periods(endpoint, source, low, high) if p.final]
            lines = await self.billing_lines(endpoint, source, low, high)
            foreign = [line for line in lines if line.currency != "USD"]
            billed = [
                recon.Row(id(r), r.start, r.end, r.spend_usd)
                for r in group
                if recon.covers(final, r.start, r.end)
                and not any(recon.overlap(f, r.start, r.end) for f in foreign)
            ]
            usd = [line for line in lines if line.currency == "USD"]
            shares.update(recon.allocate(usd, billed))
        return [
            (row, shares[id(row)], "billed")
            if id(row) in shares
            else (row, row.spend_usd, "estimated")
            for row in rows
        ]


def _upsert_statement(
    insert: Any, table: type[Sums], only_if: ColumnElement[bool] | None = None
) -> Any:
    """INSERT ... ON CONFLICT (endpoint, model, start) DO UPDATE every other column,
    executed with a list of rows (executemany: no bound-parameter limit)."""
    statement = insert(table)
    key = ("id", "endpoint", "model", "start")
    updatable = [c.name for c in sa_inspect(table).columns if c.name not in key]
    return statement.on_conflict_do_update(
        index_elements=["endpoint", "model", "start"],
        set_={name: statement.excluded[name] for name in updatable},
        where=only_if,
    )


def _mark_due_statement(insert: Any) -> Any:
    """Mark a period due for rollup; marking it again raises its version."""
    return insert(RollupDue).on_conflict_do_update(
        index_elements=["granularity", "endpoint", "start"],
        set_={"version": RollupDue.version + 1},
    )


def _excluded(column: str) -> ColumnElement[Any]:
    """The value an upsert tried to insert (`excluded.column`, same on SQLite and PostgreSQL)."""
    return literal_column(f"excluded.{column}")


def _insert_for(dialect: str) -> Any:
    if dialect == "postgresql":
        return postgresql.insert
    if dialect == "sqlite":
        return sqlite.insert
    raise StoreError(
        f"unsupported database {dialect!r}: use sqlite+aiosqlite or postgresql+asyncpg"
    )


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def _as_utc(value: datetime) -> datetime:
    """A datetime read back by a raw query (which skips the column type): aware, UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _backend(url: str) -> str:
    return url.split(":", 1)[0]


def _reason(exc: BaseException) -> str:
    """The database's reason, without the SQL or the URL (which may hold a password)."""
    original = getattr(exc, "orig", None) or exc
    text = str(original).splitlines()[0] if str(original) else type(original).__name__
    return f"{type(original).__name__}: {text}"[:300]
