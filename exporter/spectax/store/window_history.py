"""Closed windows and scrape cursors: writing them, and reading back at start-up where the
last run stopped, so that a restart neither loses nor double-counts."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncGenerator, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.engine import Dialect, Row
from sqlalchemy.sql import ColumnElement

from spectax.economics.calibration import PLAIN_POINT_FIELDS, SPECULATION_FIELDS, speculated
from spectax.engines.base import EngineSample
from spectax.observed import Resume
from spectax.pipeline.windows import Window
from spectax.store.cursor import decode_sample, encode_sample
from spectax.store.database import (
    WRITE_ERRORS,
    Database,
    DriverStatement,
    StoreDataError,
    StoreError,
    excluded,
    is_data_error,
    mark_due_statement,
    reason,
    upsert_statement,
)
from spectax.store.models import Cursor, WindowRow
from spectax.store.pending import PendingWrite
from spectax.store.rollup import period_start, window_out_of_range
from spectax.store.rows import (
    _DEFAULTS,
    columns_of,
    complete_row,
    stored_column,
    sum_usd,
    window_from_rows,
)
from spectax.units import from_timestamp

# One write of closed windows: the endpoint, its window rows, and the cursor that goes with them.
# The cursor's sample may come encoded already (a write read back from the spool: as stored).
WindowWrite = tuple[str, Sequence[dict[str, Any]], tuple[float, EngineSample | str] | None]


class WindowStatements:
    """save_many's three upserts, compiled once for the store's dialect (DriverStatement)."""

    def __init__(self, insert: Any, dialect: Dialect):
        # A window only grows (a partial one resumed after a restart): never let a replayed,
        # older version replace a newer one.
        self.windows = DriverStatement(
            upsert_statement(insert, WindowRow, only_if=WindowRow.seconds <= excluded("seconds")),
            dialect,
            list(_DEFAULTS),
        )
        self.due = DriverStatement(
            mark_due_statement(insert), dialect, ["granularity", "endpoint", "start", "version"]
        )
        # The cursor only moves forward, so replaying an old write is harmless.
        cursor = insert(Cursor)
        self.cursors = DriverStatement(
            cursor.on_conflict_do_update(
                index_elements=["endpoint"],
                set_={"observed_at": cursor.excluded.observed_at, "sample": cursor.excluded.sample},
                where=Cursor.observed_at < cursor.excluded.observed_at,
            ),
            dialect,
            ["endpoint", "observed_at", "sample"],
        )


class WindowHistory(Database):
    @functools.cached_property
    def _window_statements(self) -> WindowStatements:
        """Compiled at the first write, once: compiling at every write (every second at
        2,000 endpoints) was most of SQLAlchemy's part of it (issue 31)."""
        return WindowStatements(self._insert, self._engine.dialect)

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

        Raises StoreDataError when the database refuses a value of the rows (the writer
        then finds the row and sets it aside), StoreError when it cannot be reached.
        """
        windows = [complete_row(row) for _, rows, _ in writes for row in rows]
        for row in windows:  # refused as the database refuses a value: the writer sets it aside
            if (problem := window_out_of_range(row)) is not None:
                raise StoreDataError(f"cannot write a window of {row['endpoint']}: {problem}")
        due = sorted(
            {
                (endpoint, period_start(row["start"], "hour"))
                for endpoint, rows, _ in writes
                for row in rows
            }
        )
        cursors = [
            {"endpoint": endpoint, "observed_at": cursor[0], "sample": _encoded(cursor[1])}
            for endpoint, _, cursor in writes
            if cursor is not None
        ]
        statements = self._window_statements
        try:
            async with self._sessions.begin() as session:
                connection = await session.connection()
                if self.write_guard is not None:
                    await self.write_guard(connection)
                if windows:
                    await statements.windows.execute(connection, windows)
                if due:
                    await statements.due.execute(
                        connection,
                        [
                            {"granularity": "hour", "endpoint": e, "start": start, "version": 1}
                            for e, start in due
                        ],
                    )
                if cursors:
                    await statements.cursors.execute(connection, cursors)
        except WRITE_ERRORS as exc:
            names = sorted({endpoint for endpoint, _, _ in writes})
            more = f" and {len(names) - 3} more" if len(names) > 3 else ""
            error = StoreDataError if is_data_error(exc) else StoreError
            raise error(
                f"cannot write windows of {', '.join(names[:3])}{more}: {reason(exc)}"
            ) from None

    async def cursor(self, endpoint: str) -> tuple[float, EngineSample] | None:
        async with self._sessions() as session:
            row = await session.get(Cursor, endpoint)
        return (row.observed_at, decode_sample(row.sample)) if row else None

    async def cursor_times(self) -> dict[str, float]:
        """Where each endpoint's history reaches: fleet mode resumes its windows from there."""
        async with self._sessions() as session:
            rows = await session.execute(select(Cursor.endpoint, Cursor.observed_at))
        return {endpoint: float(at) for endpoint, at in rows}

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

    async def _closed_before(
        self,
        endpoint: str,
        count: int,
        before: datetime | None = None,
        excluding: datetime | None = None,
    ) -> list[Window]:
        """The windows without speculation among the endpoint's last `count` stored ones
        (starting before `before`; the one starting at `excluding` left out), oldest first,
        with only what the calibration reads of them (`restore`'s closed windows)."""
        opens = {endpoint: excluding} if excluding is not None else {}
        async with self._engine.connect() as connection:
            rows = await connection.execute(_closed_windows([endpoint], count, opens, before))
        windows = _by_window(rows).get(endpoint, {})
        return [_window(group, PLAIN_POINT_FIELDS) for group in windows.values()]

    async def restore(
        self,
        endpoint: str,
        window_seconds: float,
        history: int,
        pending: Iterable[PendingWrite] = (),
    ) -> Resume:
        """Everything a monitor needs to carry on where the last run stopped: what the store
        holds, overlaid with `pending`, the endpoint's writes still queued (WriteQueue.pending,
        in queue order), as if they had been written, so that a monitor restored while the
        spool still drains resumes from the latest cursor and counts nothing twice.

        The open window comes whole; the `history` latest closed ones before it with only
        what the calibration they feed reads (`PLAIN_POINT_FIELDS`): made whole, a day of
        them at 2,000 endpoints was ~40 s of the event loop."""
        writes = {endpoint: [w for w in pending if w.endpoint == endpoint]}  # before any await
        each = self.restore_each([endpoint], window_seconds, history, writes)
        async with contextlib.aclosing(each):
            async for _, resume in each:
                return resume
        raise AssertionError("restore_each yields one Resume per endpoint")

    async def restore_each(
        self,
        endpoints: Sequence[str],
        window_seconds: float,
        history: int,
        pending: Mapping[str, Sequence[PendingWrite]],
    ) -> AsyncGenerator[tuple[str, Resume], None]:
        """`restore` of each endpoint, in order, read RESTORE_BATCH endpoints at a time.

        A start-up restores every endpoint. One at a time, with four queries and a day of
        whole windows (ORM rows, every bucket decoded) each, that held the event loop ~116 s
        at 2,000 endpoints (bench/spool_startup.py --stored-only). A batch is read in four
        queries (the money totals, the cursors, the recent windows, the open ones) as plain
        rows, the closed windows only in what the calibration reads, and the loop turns
        between endpoints. An endpoint with writes still queued (`pending`: each one's, in
        queue order) is overlaid on its own."""
        queued = {endpoint: writes for endpoint, writes in pending.items() if writes}
        for first in range(0, len(endpoints), RESTORE_BATCH):
            batch = endpoints[first : first + RESTORE_BATCH]
            unqueued = [e for e in batch if e not in queued]
            stored = await self._stored(unqueued, window_seconds, history)
            for endpoint in batch:
                if endpoint in queued:
                    overlaid = self._overlaid(endpoint, window_seconds, history, queued[endpoint])
                    yield endpoint, await overlaid
                else:
                    yield endpoint, stored.resume(endpoint, history)
                    await asyncio.sleep(0)  # a turn of the loop between endpoints' windows

    async def _stored(
        self, endpoints: Sequence[str], window_seconds: float, history: int
    ) -> _StoredBatch:
        """What the store holds of endpoints that have no write queued, in four queries: their
        money totals, cursors, open windows, and the calibration's columns of their last
        `history` closed windows that did not speculate."""
        if not endpoints:
            return _StoredBatch({}, {}, {}, {}, {})
        async with self._engine.connect() as connection:  # Core: plain rows, no ORM loading
            totals = {
                row.endpoint: (row.spend or Decimal(0), row.cold or Decimal(0))
                for row in await connection.execute(
                    select(
                        WindowRow.endpoint,
                        func.sum(WindowRow.spend_usd).label("spend"),
                        func.sum(WindowRow.cold_start_usd).label("cold"),
                    )
                    .where(WindowRow.endpoint.in_(endpoints))
                    .group_by(WindowRow.endpoint)
                )
            }
            cursors = {
                row.endpoint: (row.observed_at, decode_sample(row.sample))
                for row in await connection.execute(
                    select(Cursor.endpoint, Cursor.observed_at, Cursor.sample).where(
                        Cursor.endpoint.in_(endpoints)
                    )
                )
            }
            opens = {
                endpoint: from_timestamp(_open_start(cursor[0], window_seconds))
                for endpoint, cursor in cursors.items()
            }
            closed = (
                _by_window(await connection.execute(_closed_windows(endpoints, history, opens)))
                if history > 0
                else {}
            )
            whole = _by_window(await connection.execute(_windows_at(opens))) if opens else {}
        return _StoredBatch(totals, cursors, opens, whole, closed)

    async def _overlaid(
        self, endpoint: str, window_seconds: float, history: int, writes: Sequence[PendingWrite]
    ) -> Resume:
        """`restore` of an endpoint with writes still queued, overlaid on what is stored."""
        spend, cold = await self.money_totals(endpoint)
        cursor = await self.cursor(endpoint)
        # as save_many: the cursor only moves forward (only the latest sample is decoded)
        latest = max(writes, key=lambda w: w.cursor_time or 0.0)
        at = latest.cursor_time
        if at is not None and (cursor is None or at > cursor[0]):
            cursor = latest.cursor
        open_start = (
            None if cursor is None else from_timestamp(_open_start(cursor[0], window_seconds))
        )
        pending_rows = [row for write in writes for row in write.rows]
        closed: list[Window] = []  # the last `history` closed windows, those without speculation
        missing, before = history, None  # how many closed windows are left to read, from when
        open_window = None
        if pending_rows:
            since = min(row["start"] for row in pending_rows)
            stored = {(r.model, r.start): r for r in await self.window_rows(endpoint, since)}
            final: dict[RowKey, Any] = dict(stored)
            for row in pending_rows:  # as save_many's upsert: a window only grows
                key = (row["model"], row["start"])
                if key not in final or final[key].seconds <= row["seconds"]:
                    final[key] = SimpleNamespace(**{**_UNSET, **row})  # not an ORM instance
            replaced = [key for key in final if final[key] is not stored.get(key)]
            spend += _delta("spend_usd", replaced, stored, final)
            cold += _delta("cold_start_usd", replaced, stored, final)
            by_start: dict[datetime, list[Any]] = {}
            for (_, begins), kept in sorted(final.items(), key=lambda item: item[0][1]):
                by_start.setdefault(begins, []).append(kept)
            if open_start in by_start:
                open_window = window_from_rows(by_start.pop(open_start))
            # only the windows a monitor keeps are rebuilt: the open one, the `history` latest
            newest = sorted(by_start, reverse=True)[:history]
            made = (window_from_rows(by_start[t], PLAIN_POINT_FIELDS) for t in newest)
            closed = [window for window in made if not speculated(window)]
            # the stored ones from `since` on are among them: only older ones may be missing
            missing, before = history - len(newest), since
        if missing > 0:
            closed += await self._closed_before(endpoint, missing, before, open_start)
        if open_window is None and open_start is not None:  # not among those read: read it
            rows = await self.window_rows(
                endpoint, since=open_start, until=open_start + timedelta(milliseconds=1)
            )
            open_window = window_from_rows(rows) if rows else None
        return _resume(spend, cold, cursor, open_window, closed, history)


# Endpoints restored a batch of queries at a time at start-up: their day of windows (~300
# rows each) is made into objects on the event loop between two queries, so a batch's turn
# holds it ~10 ms an endpoint (bench/spool_startup.py).
RESTORE_BATCH = 20


@dataclass(frozen=True, slots=True)
class _StoredBatch:
    """A batch of endpoints' stored history as read (`WindowHistory._stored`), made into each
    one's Resume when it is its turn: rows grouped by endpoint, then window start."""

    totals: dict[str, tuple[Decimal, Decimal]]
    cursors: dict[str, tuple[float, EngineSample]]
    opens: dict[str, datetime]  # the open window's start, where there is a cursor
    whole: dict[str, dict[datetime, list[Row[Any]]]]  # the open windows' rows
    closed: dict[str, dict[datetime, list[Row[Any]]]]  # the latest windows' rows, in part

    def resume(self, endpoint: str, history: int) -> Resume:
        open_start = self.opens.get(endpoint)
        open_window = None
        if open_start is not None and (rows := self.whole.get(endpoint, {}).get(open_start)):
            open_window = _window(rows)
        closed = [
            _window(rows, PLAIN_POINT_FIELDS) for rows in self.closed.get(endpoint, {}).values()
        ]
        spend, cold = self.totals.get(endpoint, (Decimal(0), Decimal(0)))
        return _resume(spend, cold, self.cursors.get(endpoint), open_window, closed, history)


def _open_start(cursor_time: float, window_seconds: float) -> float:
    """The start of the window a cursor's scrape fell in: the one a restart goes on with."""
    return (cursor_time // window_seconds) * window_seconds


def _closed_windows(
    endpoints: Sequence[str],
    count: int,
    opens: Mapping[str, datetime],
    before: datetime | None = None,
) -> Any:
    """Each endpoint's rows of the windows without speculation among its `count` latest
    closed ones (starting before `before`; its open one, `opens`, left out), in the
    calibration's columns. A window that speculated (a SPECULATION_FIELDS column counted in
    one of its rows) gives the calibration nothing: the database leaves it out, so that a
    speculating endpoint's day of windows costs a restart nothing but the query.

    The windows are chosen from their (endpoint, start) pairs alone, which the unique index
    holds: only the chosen ones' rows are read, not the whole retention's (14 days by
    default) to rank them."""
    where: list[ColumnElement[bool]] = [WindowRow.endpoint.in_(endpoints)]
    if before is not None:
        where.append(WindowRow.start < before)
    if opens:
        where.append(~_starting(opens))
    latest = func.row_number().over(
        partition_by=WindowRow.endpoint, order_by=WindowRow.start.desc()
    )
    chosen = (
        select(WindowRow.endpoint, WindowRow.start, latest.label("rank"))
        .where(*where)
        .group_by(WindowRow.endpoint, WindowRow.start)
        .subquery()
    )
    speculating = or_(
        *(WindowRow.__table__.c[stored_column(f)].isnot(None) for f in SPECULATION_FIELDS)
    )
    window = (WindowRow.endpoint, WindowRow.start)
    speculated = func.max(case((speculating, 1), else_=0)).over(partition_by=window)
    rows = (
        select(*_CALIBRATION_COLUMNS, speculated.label("speculated"))
        .join(chosen, and_(*(column == chosen.c[column.name] for column in window)))
        .where(chosen.c.rank <= count)
        .subquery()
    )
    return (
        select(*(rows.c[column.name] for column in _CALIBRATION_COLUMNS))
        .where(rows.c.speculated == 0)
        .order_by(rows.c.endpoint, rows.c.start)
    )


def _starting(starts: Mapping[str, datetime]) -> Any:
    """Rows of each endpoint's window starting at its start in `starts`."""
    return or_(
        *(
            and_(WindowRow.endpoint == endpoint, WindowRow.start == start)
            for endpoint, start in starts.items()
        )
    )


def _windows_at(starts: Mapping[str, datetime]) -> Any:
    """The rows of each endpoint's window starting at its start in `starts`, whole."""
    return select(WindowRow.__table__).where(_starting(starts))


def _by_window(rows: Iterable[Row[Any]]) -> dict[str, dict[datetime, list[Row[Any]]]]:
    """Rows grouped by endpoint, then by window start, in their order."""
    grouped: dict[str, dict[datetime, list[Row[Any]]]] = {}
    for row in rows:
        grouped.setdefault(row.endpoint, {}).setdefault(row.start, []).append(row)
    return grouped


def _window(rows: list[Row[Any]], only: Collection[str] | None = None) -> Window:
    """`window_from_rows` of plain rows, made namespaces first: it reads each column by
    name, and a Row's attributes cost ~6x a namespace's."""
    return window_from_rows([SimpleNamespace(**row._asdict()) for row in rows], only)


#: What a restart reads of the closed windows: what the calibration reads of them.
_CALIBRATION_COLUMNS = tuple(WindowRow.__table__.c[c] for c in columns_of(PLAIN_POINT_FIELDS))


def _resume(
    spend: Decimal,
    cold: Decimal,
    cursor: tuple[float, EngineSample] | None,
    open_window: Window | None,
    closed: Iterable[Window],
    history: int,
) -> Resume:
    recent = sorted(closed, key=lambda w: w.start)
    return Resume(
        spend_usd_total=spend,
        cold_start_usd_total=cold,
        cursor=cursor,
        open_window=open_window,
        recent_windows=tuple(recent[-history:] if history else ()),
    )


RowKey = tuple[str, datetime]
# A pending row read as a stored one: every column, None where the row has none (WindowRow(**row)
# gives the same, at ten times the cost: 13 s for a 50,000-row spool, bench/spool_startup.py)
_UNSET = {column.key: None for column in WindowRow.__table__.columns}


def _encoded(sample: EngineSample | str) -> str:
    return sample if isinstance(sample, str) else encode_sample(sample)


def _delta(
    column: str, keys: list[RowKey], stored: dict[RowKey, WindowRow], final: dict[RowKey, Any]
) -> Decimal:
    """What writing the final rows of `keys` over the stored ones adds to a money column."""
    added = sum_usd(getattr(final[key], column) for key in keys)
    return added - sum_usd(getattr(stored[key], column) for key in keys if key in stored)
