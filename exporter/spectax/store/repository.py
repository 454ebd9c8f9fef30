"""Reading and writing history. The storage URL picks the backend; the queries are the same."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

from spectax.economics import Assessment
from spectax.engines.base import EngineSample, Histogram, ModelSample
from spectax.store.models import Base, Cursor, WindowRow
from spectax.windows import Counts, Window


@dataclass(frozen=True, slots=True)
class Restored:
    """What the store hands back to a monitor at start-up."""

    spend_usd_total: Decimal = Decimal(0)
    cold_start_usd_total: Decimal = Decimal(0)
    cursor: tuple[float, EngineSample] | None = None
    open_window: Window | None = None
    recent_windows: tuple[Window, ...] = ()


_UPDATABLE = [
    c.name
    for c in WindowRow.__table__.columns
    if c.name not in ("id", "endpoint", "model", "start")
]


class StoreError(RuntimeError):
    """The database could not be reached or refused a write. The message never holds the URL."""


class Store:
    def __init__(self, engine: AsyncEngine):
        self._engine = engine
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)

    @classmethod
    async def open(cls, url: str) -> Store:
        """Connect and create the tables that are missing."""
        if url.startswith("sqlite") and ":///" in url:
            path = url.split(":///", 1)[1]
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(url, pool_pre_ping=True)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(Base.metadata.create_all)
        except (SQLAlchemyError, OSError) as exc:
            await engine.dispose()
            raise StoreError(f"cannot open the store ({_backend(url)}): {_reason(exc)}") from None
        return cls(engine)

    async def close(self) -> None:
        await self._engine.dispose()

    async def save(
        self,
        endpoint: str,
        rows: Sequence[dict[str, Any]],
        cursor: tuple[float, EngineSample] | None,
    ) -> None:
        """Upsert window rows and move the cursor, in one transaction."""
        try:
            async with self._sessions.begin() as session:
                if rows:
                    insert = _insert_for(self._engine.dialect.name)
                    statement = insert(WindowRow).values(list(rows))
                    statement = statement.on_conflict_do_update(
                        index_elements=["endpoint", "model", "start"],
                        set_={name: statement.excluded[name] for name in _UPDATABLE},
                    )
                    await session.execute(statement)
                if cursor is not None:
                    observed_at, sample = cursor
                    await session.merge(
                        Cursor(
                            endpoint=endpoint, observed_at=observed_at, sample=encode_sample(sample)
                        )
                    )
        except (SQLAlchemyError, OSError) as exc:
            raise StoreError(f"cannot write windows of {endpoint}: {_reason(exc)}") from None

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
