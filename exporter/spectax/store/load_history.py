"""The stored history as the load curve reads it (`economics.load_curve`, issue 34): each
hour's windows binned by load (`rollup_load_bins`, written by the hourly rollup with
`store.rollup.load_bin_rows`), and the windows of the hours not rolled yet.

A day of 5-minute windows is 288 rows per endpoint and model, 576,000 at 2,000 endpoints.
Read row by row, 100 endpoints' day took 1.5 s of the event loop's CPU (52 µs a row); summed
by the database per bin at every refresh, it still read the whole day's windows every 5
minutes and held SQLite's read lock meanwhile. The hourly rollup now bins each hour's
windows once, as it sums them into the hour's row, and keeps the bins as long as the
hourly rows (`retention.hourly`, 400 days by default), past the windows' 14 days. A
refresh has the database sum the rolled hours' bins per bin, basis and drafted-or-not (a
few rows per endpoint and model, as before) and bins itself only the windows of the hours
still due for rollup and of the lookback's partial first hour. 100 endpoints' day of
5-minute windows at two loads an hour (28,800 windows, 4,800 bins): 0.14-0.19 s of the
event loop's CPU summed from the windows, 0.09-0.10 s from the bins (SQLite). Each sample
carries what the K schedule reads too: the per-position counts, B* and c.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, cast

from sqlalchemy import ColumnElement, and_, func, not_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute, aliased

from spectax.economics.load_curve import BIN_EDGES, LoadSample
from spectax.economics.step_model import BASES, Basis
from spectax.store.database import DATABASE_ERRORS, Database, StoreError, reason
from spectax.store.models import LoadBinRow, RollupDue, WindowRow
from spectax.store.rollup import PERIOD, load_bin_rows, period_start

W = WindowRow
B = LoadBinRow
HOUR = PERIOD["hour"]
#: What `load_bin_rows` reads of a window.
_WINDOW_COLUMNS = tuple(
    getattr(W, name)
    for name in (
        "endpoint",
        "model",
        "start",
        "end",
        "seconds",
        "concurrency_requests",
        "output_tokens",
        "drafts",
        "draft_tokens",
        "accepted_tokens",
        "accepted_per_position",
        "plain_busy_seconds",
        "assessed_busy_seconds",
        "speedup_low_ratio",
        "speedup_high_ratio",
        "verdict_basis",
        "speculation_savings_usd",
        "busy_spend_usd",
        "ridge_batch_requests",
        "draft_cost_ratio",
    )
)
_BIN_COLUMNS = tuple(c for c in B.__table__.columns if c.name != "id")

#: Endpoints read per query. One query over a day of 2,000 endpoints (576,000 windows) held
#: SQLite's read lock 4-8 s, while the writer's commits waited (rollback journal: a commit
#: needs every reader gone) and could pass the 5 s busy timeout. A batch's rows are then
#: made into samples on the event loop: 50 endpoints' held it up to ~90 ms, and a /metrics
#: read waited that long (bench/README.md, "Where a read waits"); 15 hold it ~25 ms.
ENDPOINTS_PER_READ = 15
#: Spans of due hours read per windows query (an OR of each endpoint's spans): far under
#: SQLite's expression depth (1,000) and its bound parameters.
SPANS_PER_READ = 200

Samples = dict[tuple[str, str], list[LoadSample]]
Due = tuple[str, datetime]  # an endpoint's hour marked for rollup
#: The bins' columns that add up, summed again over the lookback's hours.
_SUMMED = (
    "seconds",
    "running_seconds",
    "output_tokens",
    "drafts",
    "draft_tokens",
    "accepted_tokens",
    "plain_busy_seconds",
    "assessed_busy_seconds",
    "low_busy_seconds",
    "high_busy_seconds",
    "low_missing",
    "high_missing",
    "savings_usd",
    "busy_usd",
)


class LoadHistory(Database):
    async def load_samples(self, since: datetime, endpoints: Sequence[str]) -> Samples:
        """The `endpoints`' windows that started at or after `since`, summed per load bin, as
        load-curve samples by (endpoint, model): the rolled hours' bins summed by the
        database (`_rolled_bins`), and the windows of the hours still due for rollup and
        of the partial hour from `since` binned here, hour by hour, by the rollup's rule
        (`load_bin_rows`). A window without a model (a page that served none) is no point
        of a curve. Read ENDPOINTS_PER_READ endpoints at a time."""
        found: Samples = {}
        hours_from = period_start(since, "hour")
        if hours_from < since:
            hours_from += HOUR  # the first whole hour: the one before is read from windows
        names = sorted(endpoints)
        for first in range(0, len(names), ENDPOINTS_PER_READ):
            batch = names[first : first + ENDPOINTS_PER_READ]
            try:
                async with self._sessions() as session:
                    # Due marks first: an hour rolled after this read is read from its
                    # windows, which stay; one marked after it has bins without the newest
                    # window, read at the next refresh. Never an hour twice or not at all.
                    due_query = select(RollupDue.endpoint, RollupDue.start).where(
                        RollupDue.granularity == "hour",
                        RollupDue.endpoint.in_(batch),
                        RollupDue.start >= hours_from,
                    )
                    due = {(e, s) for e, s in await session.execute(due_query)}
                    bins = await _rolled_bins(session, batch, hours_from, due)
                    windows = []
                    for spans in _windows_wanted(due, hours_from):
                        query = select(*_WINDOW_COLUMNS).where(
                            W.endpoint.in_(batch), W.start >= since, spans
                        )
                        windows += list(await session.execute(query))
            except DATABASE_ERRORS as exc:
                raise StoreError(f"cannot read the windows' load: {reason(exc)}") from None
            for row in bins:
                sample = load_sample_of(row)
                found.setdefault((row["endpoint"], row["model"]), []).append(sample)
            for binned in windows_binned(windows):
                key = (binned["endpoint"], binned["model"])
                found.setdefault(key, []).append(load_sample_of(binned))
        return found

    async def load_bins(
        self, since: datetime, until: datetime, endpoints: Sequence[str] | None = None
    ) -> list[tuple[str, str, datetime, LoadSample]]:
        """The stored bins of the hours starting in [since, until), as (endpoint, model,
        hour, sample): the report's month curve, window by window (`spectax report`)."""
        query = select(*_BIN_COLUMNS).where(B.start >= since, B.start < until)
        if endpoints:
            query = query.where(B.endpoint.in_(list(endpoints)))
        try:
            async with self._sessions() as session:
                rows = list(await session.execute(query))
        except DATABASE_ERRORS as exc:
            raise StoreError(f"cannot read the load bins: {reason(exc)}") from None
        return [(r.endpoint, r.model, r.start, load_sample_of(r._mapping)) for r in rows]


async def _rolled_bins(
    session: AsyncSession, batch: Sequence[str], hours_from: datetime, due: set[Due]
) -> list[Mapping[Any, Any]]:
    """The bins of the batch's rolled hours from `hours_from`, the `due` hours left out:
    summed by the database per endpoint, model, bin, basis and drafted-or-not (their
    per-position counts joined as text, each group's newest row's B* and c beside), as
    one hour's bins were summed from its windows; while more than SPANS_PER_READ spans of
    hours are due (after migration 0012, until the rollup has binned them), row by row."""
    spans = _spans(due, B.endpoint, B.start)
    where = [B.endpoint.in_(batch), B.start >= hours_from]
    if len(spans) > SPANS_PER_READ:
        rows = await session.execute(select(*_BIN_COLUMNS).where(*where))
        return [row._mapping for row in rows if (row.endpoint, row.start) not in due]
    if spans:
        where.append(not_(or_(*spans)))
    keys = (B.endpoint, B.model, B.edge, B.verdict_basis, B.drafted)
    summed = (
        select(
            *keys,
            func.sum(B.windows).label("windows"),
            func.max(B.end).label("end"),
            *(func.sum(getattr(B, name)).label(name) for name in _SUMMED),
            func.aggregate_strings(B.accepted_per_position, ",").label("accepted_per_position"),
        )
        .where(*where)
        .group_by(*keys)
        .subquery()
    )
    newest = aliased(B)
    query = select(summed, newest.ridge_batch_requests, newest.draft_cost_ratio).join(
        newest,
        and_(
            newest.endpoint == summed.c.endpoint,
            newest.model == summed.c.model,
            newest.edge == summed.c.edge,
            newest.verdict_basis.is_not_distinct_from(summed.c.verdict_basis),
            newest.drafted == summed.c.drafted,
            newest.end == summed.c.end,
        ),
    )
    groups: dict[tuple[Any, ...], Mapping[Any, Any]] = {}
    for row in await session.execute(query):  # two rows of one group ending alike: one
        groups.setdefault(tuple(row[:5]), row._mapping)
    return list(groups.values())


def _spans(
    due: set[Due], endpoint: InstrumentedAttribute[str], start: InstrumentedAttribute[datetime]
) -> list[ColumnElement[bool]]:
    """Each endpoint's due hours as conditions on `endpoint` and `start`, consecutive hours
    merged into one span (after migration 0012 an endpoint's whole history is one)."""
    spans: list[ColumnElement[bool]] = []
    for name in sorted({e for e, _ in due}):
        hours = sorted(s for e, s in due if e == name)
        low = high = hours[0]
        for hour in [*hours[1:], None]:
            if hour is not None and hour == high + HOUR:
                high = hour
                continue
            spans.append(and_(endpoint == name, start >= low, start < high + HOUR))
            if hour is not None:
                low = high = hour
    return spans


def _windows_wanted(due: set[Due], hours_from: datetime) -> list[ColumnElement[bool]]:
    """The conditions, one per windows query, that pick the windows to bin here: the partial
    first hour's (before `hours_from`), then each endpoint's due hours (`_spans`),
    SPANS_PER_READ spans a query."""
    spans = _spans(due, W.endpoint, W.start)
    first = [W.start < hours_from, *spans[: SPANS_PER_READ - 1]]
    rest = spans[SPANS_PER_READ - 1 :]
    chunks = [rest[i : i + SPANS_PER_READ] for i in range(0, len(rest), SPANS_PER_READ)]
    return [or_(*first), *(or_(*chunk) for chunk in chunks)]


def windows_binned(windows: Sequence[Any]) -> list[dict[str, Any]]:
    """Windows (any rows with `load_bin_rows`' columns) binned per endpoint and hour."""
    by_hour: dict[tuple[str, datetime], list[Any]] = {}
    for window in windows:
        key = (window.endpoint, period_start(window.start, "hour"))
        by_hour.setdefault(key, []).append(window)
    return [
        row
        for (endpoint, hour), group in sorted(by_hour.items())
        for row in load_bin_rows(endpoint, hour, group)
    ]


def load_sample_of(row: Mapping[Any, Any]) -> LoadSample:
    """One bin of windows (one hour, bin, basis and drafted-or-not of one model, stored or
    binned from windows) as one sample of its windows: the sums their assessments wrote
    (store.rows.assessed_sums), the band as busy time times each end, as `sample_of` makes
    them of a window in memory, the per-position counts, and the B* and c of its newest."""
    seconds = float(row["seconds"] or 0.0)
    busy = float(row["assessed_busy_seconds"] or 0.0)
    assessed = row["plain_busy_seconds"] is not None and busy > 0
    basis = row["verdict_basis"] if row["verdict_basis"] in BASES else None
    edge, drafted = row["edge"], row["drafted"]
    following = BIN_EDGES.index(edge) + 1
    floor = edge if edge > 1 else -math.inf  # bin 1 holds the idle windows too
    ceiling = BIN_EDGES[following] if following < len(BIN_EDGES) else math.inf
    mean = float(row["running_seconds"] or 0.0) / seconds if seconds > 0 else 0.0
    return LoadSample(
        end=row["end"].timestamp(),
        seconds=seconds,
        # The group's mean stays in its bin however its sum rounds.
        concurrency=min(max(mean, floor), math.nextafter(ceiling, 0)),
        windows=row["windows"],
        output_tokens=float(row["output_tokens"] or 0.0),
        drafts=_optional(row["drafts"]) if drafted else None,
        draft_tokens=_optional(row["draft_tokens"]) if drafted else None,
        accepted_tokens=_optional(row["accepted_tokens"]) if drafted else None,
        accepted_per_position=_positions(row["accepted_per_position"]),
        plain_busy_seconds=float(row["plain_busy_seconds"]) if assessed else None,
        assessed_busy_seconds=busy if assessed else 0.0,
        low_busy_seconds=None if row["low_missing"] else _optional(row["low_busy_seconds"]),
        high_busy_seconds=None if row["high_missing"] else _optional(row["high_busy_seconds"]),
        basis=cast(Basis, basis) if assessed else None,
        savings_usd=_optional(row["savings_usd"]),
        busy_usd=_optional(row["busy_usd"]),
        ridge_batch=float(row["ridge_batch_requests"] or 0.0),
        draft_cost_ratio=float(row["draft_cost_ratio"] or 0.0),
    )


def _positions(text: str | None) -> tuple[float, ...]:
    """The per-position counts of one row's JSON list, or of several joined by commas
    (`_rolled_bins`), added position by position."""
    total: list[float] = []
    for counts in json.loads(f"[{text or ''}]"):
        for i, accepted in enumerate(counts):
            if i == len(total):
                total.append(0.0)
            total[i] += float(accepted)
    return tuple(total)


def _optional(value: float | Decimal | None) -> float | None:
    return None if value is None else float(value)
