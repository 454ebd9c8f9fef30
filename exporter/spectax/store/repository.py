"""Reading and writing history. The storage URL picks the backend; the queries are the same."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, delete, func, literal_column, select
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from spectax.economics import Assessment
from spectax.engines.base import EngineSample, Histogram, ModelSample
from spectax.store import rollups, schema
from spectax.store.models import Cursor, HourlyRow, RollupDue, Sums, WindowRow
from spectax.windows import Counts, Window


@dataclass(frozen=True, slots=True)
class Restored:
    """What the store hands back to a monitor at start-up."""

    spend_usd_total: Decimal = Decimal(0)
    cold_start_usd_total: Decimal = Decimal(0)
    cursor: tuple[float, EngineSample] | None = None
    open_window: Window | None = None
    recent_windows: tuple[Window, ...] = ()


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
        try:
            async with self._sessions.begin() as session:
                if rows:
                    # A window only grows (a partial one resumed after a restart): never let
                    # a replayed, older version replace a newer one.
                    await self._upsert(
                        session, WindowRow, rows, only_if=WindowRow.seconds <= _excluded("seconds")
                    )
                    hours = {rollups.period_start(row["start"], "hour") for row in rows}
                    await self._mark_due(session, "hour", endpoint, hours)
                if cursor is not None:
                    # The cursor only moves forward, so replaying an old write is harmless.
                    observed_at, sample = cursor
                    insert = _insert_for(self._engine.dialect.name)
                    values = {"endpoint": endpoint, "observed_at": observed_at}
                    statement = insert(Cursor).values(**values, sample=encode_sample(sample))
                    await session.execute(
                        statement.on_conflict_do_update(
                            index_elements=["endpoint"],
                            set_={
                                "observed_at": statement.excluded.observed_at,
                                "sample": statement.excluded.sample,
                            },
                            where=Cursor.observed_at < statement.excluded.observed_at,
                        )
                    )
        except (SQLAlchemyError, OSError) as exc:
            raise StoreError(f"cannot write windows of {endpoint}: {_reason(exc)}") from None

    async def _upsert(
        self,
        session: AsyncSession,
        table: type[Sums],
        rows: Sequence[dict[str, Any]],
        only_if: ColumnElement[bool] | None = None,
    ) -> None:
        insert = _insert_for(self._engine.dialect.name)
        statement = insert(table).values(list(rows))
        key = ("id", "endpoint", "model", "start")
        columns = sa_inspect(table).columns
        updatable = [c.name for c in columns if c.name not in key]
        statement = statement.on_conflict_do_update(
            index_elements=["endpoint", "model", "start"],
            set_={name: statement.excluded[name] for name in updatable},
            where=only_if,
        )
        await session.execute(statement)

    async def _mark_due(
        self, session: AsyncSession, granularity: str, endpoint: str, starts: Iterable[datetime]
    ) -> None:
        insert = _insert_for(self._engine.dialect.name)
        for start in sorted(starts):
            statement = insert(RollupDue).values(
                granularity=granularity, endpoint=endpoint, start=start, version=1
            )
            await session.execute(
                statement.on_conflict_do_update(
                    index_elements=["granularity", "endpoint", "start"],
                    set_={"version": RollupDue.version + 1},
                )
            )

    async def rollup(self) -> int:
        """Recompute every hour, then every day, marked as due. Returns the periods rolled.

        Idempotent and resumable: each period is recomputed whole from its
        source rows and replaces its rows, in the transaction that clears its
        mark, and only if no write re-marked it meanwhile.
        """
        done = 0
        for granularity, source in (("hour", WindowRow), ("day", HourlyRow)):
            async with self._sessions() as session:
                query = select(RollupDue).where(RollupDue.granularity == granularity)
                due = list((await session.scalars(query)).all())
            for mark in due:
                await self._roll(mark.endpoint, mark.start, mark.version, granularity, source)
                done += 1
        return done

    async def _roll(
        self, endpoint: str, marked: datetime, version: int, granularity: str, source: type[Sums]
    ) -> None:
        start = rollups.period_start(marked, granularity)
        end = start + rollups.PERIOD[granularity]
        table = rollups.TABLES[granularity]
        async with self._sessions.begin() as session:
            query = select(source).where(
                source.endpoint == endpoint, source.start >= start, source.start < end
            )
            rows = list((await session.scalars(query)).all())
            await session.execute(
                delete(table).where(table.endpoint == endpoint, table.start == start)
            )
            summed = rollups.rollup_rows(endpoint, start, granularity, rows)
            if summed:
                await self._upsert(session, table, summed)
            if granularity == "hour":
                await self._mark_due(session, "day", endpoint, [rollups.period_start(start, "day")])
            await session.execute(
                delete(RollupDue).where(
                    RollupDue.granularity == granularity,
                    RollupDue.endpoint == endpoint,
                    RollupDue.start == marked,
                    RollupDue.version == version,
                )
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


def window_rows(
    endpoint: str,
    window: Window,
    assessments: dict[str, Assessment],
    money: dict[str, tuple[Decimal, Decimal, Decimal, Decimal]],  # empty when unpriced
    ridge_batch: float,
    ridge_batch_source: str,
    draft_cost_ratio: float | None,
) -> list[dict[str, Any]]:
    """The rows for one window: one per model, or one with model "" when the page had none.

    `money` holds (spend, busy spend, draft-load spend, cold-start spend) per model.
    """
    models = window.models or {"": Counts()}
    rows = []
    for model, counts in models.items():
        assessment = assessments.get(model)
        spend_usd, busy_usd, draft_load_usd, cold_start_usd = money.get(
            model, (None, None, None, None)
        )
        rows.append(
            {
                "endpoint": endpoint,
                "model": model,
                "start": _utc(window.start),
                "end": _utc(window.end),
                "seconds": window.seconds,
                "busy_seconds": window.busy_seconds,
                "restarts": window.restarts,
                "output_tokens": round(counts.generation_tokens),
                "prompt_tokens": round(counts.prompt_tokens),
                "requests_finished": round(counts.requests_finished),
                "drafts": _round(counts.drafts),
                "draft_tokens": _round(counts.draft_tokens),
                "accepted_tokens": _round(counts.accepted_tokens),
                "accepted_per_position": json.dumps(
                    [round(a) for a in counts.accepted_per_position]
                ),
                "running_seconds": counts.running_seconds,
                **_histogram_columns("iteration_tokens", counts.iteration_tokens),
                **_histogram_columns("inter_token_latency", counts.inter_token_latency),
                **_histogram_columns("time_per_output_token", counts.time_per_output_token),
                "spend_usd": spend_usd,
                "busy_spend_usd": busy_usd,
                "cold_start_usd": cold_start_usd,
                "draft_load_usd": draft_load_usd,
                "concurrency_requests": window.concurrency(model),
                "acceptance_ratio": assessment.acceptance_ratio if assessment else None,
                "breakeven_acceptance_ratio": (
                    assessment.breakeven_acceptance_ratio if assessment else None
                ),
                "speedup_ratio": assessment.speedup_ratio if assessment else None,
                "ridge_batch_requests": ridge_batch,
                "ridge_batch_source": ridge_batch_source,
                "draft_cost_ratio": draft_cost_ratio,
                "speculation_savings_usd": (
                    assessment.speculation_savings_usd if assessment else None
                ),
                "verdict": assessment.verdict if assessment else "no_traffic",
            }
        )
    return rows


def window_from_rows(rows: Sequence[WindowRow]) -> Window:
    """Rebuild the in-memory window from its stored rows (the inverse of `window_rows`)."""
    first = rows[0]
    models = {
        row.model: Counts(
            generation_tokens=float(row.output_tokens),
            prompt_tokens=float(row.prompt_tokens),
            requests_finished=float(row.requests_finished),
            drafts=_float(row.drafts),
            draft_tokens=_float(row.draft_tokens),
            accepted_tokens=_float(row.accepted_tokens),
            accepted_per_position=tuple(float(a) for a in json.loads(row.accepted_per_position)),
            iteration_tokens=_histogram(row.iteration_tokens_sum, row.iteration_tokens_count),
            inter_token_latency=_histogram(
                row.inter_token_latency_sum, row.inter_token_latency_count
            ),
            time_per_output_token=_histogram(
                row.time_per_output_token_sum, row.time_per_output_token_count
            ),
            running_seconds=row.running_seconds,
        )
        for row in rows
        if row.model
    }
    return Window(
        start=first.start.timestamp(),
        end=first.end.timestamp(),
        seconds=first.seconds,
        busy_seconds=first.busy_seconds,
        restarts=first.restarts,
        spend_usd=_sum(row.spend_usd for row in rows),
        cold_start_usd=_sum(row.cold_start_usd for row in rows),
        draft_load_usd=_sum(row.draft_load_usd for row in rows),
        models=models,
    )


def encode_sample(sample: EngineSample) -> str:
    return json.dumps(asdict(sample))


def decode_sample(text: str) -> EngineSample:
    data = json.loads(text)
    models = {}
    for name, fields in data["models"].items():
        for key in ("iteration_tokens", "inter_token_latency", "time_per_output_token"):
            if fields.get(key) is not None:
                fields[key] = Histogram(**fields[key])
        fields["accepted_per_position"] = tuple(fields.get("accepted_per_position", ()))
        models[name] = ModelSample(**fields)
    return EngineSample(
        engine=data["engine"],
        models=models,
        process_start_time_seconds=data.get("process_start_time_seconds"),
    )


def _sum(values: Iterable[Decimal | None]) -> Decimal:
    return sum((v or Decimal(0) for v in values), Decimal(0))


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


def _round(value: float | None) -> int | None:
    return None if value is None else round(value)


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)


def _histogram(total: float | None, count: float | None) -> Histogram | None:
    return None if total is None or count is None else Histogram(sum=total, count=count)


def _histogram_columns(prefix: str, histogram: Histogram | None) -> dict[str, float | None]:
    return {
        f"{prefix}_sum": histogram.sum if histogram else None,
        f"{prefix}_count": histogram.count if histogram else None,
    }


def _backend(url: str) -> str:
    return url.split(":", 1)[0]


def _reason(exc: BaseException) -> str:
    """The database's reason, without the SQL or the URL (which may hold a password)."""
    original = getattr(exc, "orig", None) or exc
    text = str(original).splitlines()[0] if str(original) else type(original).__name__
    return f"{type(original).__name__}: {text}"[:300]
