"""Rolling windows into hourly rows, hourly rows into daily rows, retention, and reading
the rows of any granularity back.

Sums are exact: token counts are integers and money is integer nano-dollars,
so an hour's row equals the sum of its windows to the last digit, whatever
the backend. Ratios are never rolled up; readers recompute them from sums.
Parameters (draft cost ratio, ridge batch) are not sums: a rollup keeps the
latest window's value. So are the counterfactual's source, band and step
overhead. What each window's assessment concluded is summed as numerators and
denominators (the busy time without speculation and the busy seconds it divides, the
draft overhead in dollars: `assessed_sums`), never recomputed. The daemon's verdicts
are not ratios but events: a rollup counts its
windows per verdict (pays, tax, uncertain) and per basis (measured, calibrated,
profile, default), so that a report on any past month says how the daemon
judged it rather than judging again from sums (models.VerdictCounts).

A sum must fit its column (BIGINT, or INTEGER for counts of windows and restarts).
A window may add at most a day's column range per second of its length
(`window_out_of_range`, checked as it is written): windows do not overlap, so
no day's sum can pass it. A period whose sums still do not fit (rows written
before that check) is refused alone, logged with the column: its rollup row is
removed rather than left wrong, its windows stay, and the other endpoints'
periods roll up as ever: one endpoint's values never stop the others' history.

The hourly rollup also bins each hour's windows by load (`load_bin_rows`, the table
`rollup_load_bins`): the load curve's sums per hour, bin, basis and drafted-or-not, written
and removed with the hour's rows (issue 34; store.load_history reads them).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, Integer, bindparam, delete, func, select
from sqlalchemy import inspect as sa_inspect

from spectax.economics.load_curve import bin_edge
from spectax.engines.base import COUNTERS, Buckets
from spectax.pipeline.counts import GAUGES
from spectax.store.database import (
    WRITE_ERRORS,
    Database,
    is_data_error,
    mark_due_statement,
    reason,
    upsert_statement,
)
from spectax.store.models import (
    TABLES,
    HourlyRow,
    LoadBinRow,
    Money,
    RollupDue,
    Sums,
    WindowRow,
)
from spectax.store.rows import decode_buckets, encode_buckets
from spectax.units import floor_time

PERIOD = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
#: Periods rolled per transaction. Its rows are made and summed on the event loop, which
#: scrapes and serves /metrics meanwhile: at 2,000 endpoints with a day stored, 100 periods
#: held the loop 70-90 ms (hours, 12 windows each) and 140-180 ms (days, 24 hours each)
#: at a time, and a /metrics read waited that long. These hold it ~25 ms, for more
#: (cheap) transactions: bench/README.md, "Where a read waits".
ROLLUP_BATCH_PERIODS = {"hour": 30, "day": 15}
# The columns a rollup sums: the window's own, then every declared counter's (by its kind:
# a plain counter is always there, a speculation counter or a histogram may be NULL; the
# per-position counts are JSON, added by `_add_positions`), then money.
_ADDED = (
    "seconds",
    "busy_seconds",
    "restarts",
    *(c.column for c in COUNTERS if c.kind == "plain"),
    *(name for name, kind in GAUGES if kind == "plain"),
)
_OPTIONAL_ADDED = (
    *(c.column for c in COUNTERS if c.kind == "speculation"),
    *(f"{c.column}_{part}" for c in COUNTERS if c.kind == "histogram" for part in ("sum", "count")),
    *(name for name, kind in GAUGES if kind == "speculation"),
    "spend_usd",
    "busy_spend_usd",
    "cold_start_usd",
    "draft_load_usd",
    "speculation_savings_usd",
    "unobserved_seconds",
)
# The assessment's conclusions (0009, models.Sums): summed like the optional columns, but
# a period with one source row that has none (written before 0009) has none at all: a day
# with one hour not recorded is not recorded, never a sum over part of it.
ASSESSED = ("plain_busy_seconds", "assessed_busy_seconds", "draft_compute_usd", "rejected_usd")
_POSITIONS = next(c.column for c in COUNTERS if c.kind == "per_position")
_BUCKETS = tuple(f"{c.column}_buckets" for c in COUNTERS if c.kind == "histogram")
VERDICT_COUNTS = ("pays", "tax", "uncertain")
BASIS_COUNTS = ("measured", "calibrated", "profile", "default")
VERDICT_COLUMNS = (
    *(f"windows_{v}" for v in VERDICT_COUNTS),
    *(f"windows_basis_{b}" for b in BASIS_COUNTS),
)
_LATEST = (
    "ridge_batch_source",
    "speedup_low_ratio",
    "speedup_high_ratio",
    "step_overhead_ratio",
    *(name for name, kind in GAUGES if kind == "setting"),
)

# The largest value each integer column of the rollup tables holds (Money: nano-dollars).
_LIMITS = {
    column.name: 2**63 - 1 if isinstance(column.type, (BigInteger, Money)) else 2**31 - 1
    for table in (WindowRow, *TABLES.values(), LoadBinRow)
    for column in sa_inspect(table).columns
    if isinstance(column.type, (Integer, Money)) and column.name != "id"
}
_DAY_SECONDS = PERIOD["day"].total_seconds()
# Per column, a magnitude under any window's bound (a window counts at least 1 s): rows are
# checked at every scrape, and nearly every value is far under it (issue 31). Money comes
# as Decimal dollars, stored as nano-dollars (`_stored`); other numbers as they are.
_SAFE_NUMBERS = {name: limit // int(_DAY_SECONDS) - 1 for name, limit in _LIMITS.items()}
_SAFE_DOLLARS = {name: Decimal(safe).scaleb(-9) for name, safe in _SAFE_NUMBERS.items()}
log = logging.getLogger(__name__)


class Rollups(Database):
    #: endpoints whose refused periods were logged in this run (once each: a target that
    #: keeps serving the values would log every hour)
    _refusals_logged: set[str] | None = None

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
            size = ROLLUP_BATCH_PERIODS[granularity]
            for i in range(0, len(due), size):
                batch = due[i : i + size]
                await self._roll_apart(batch, granularity, source)
                done += len(batch)
        return done

    async def _roll_apart(
        self, marks: Sequence[tuple[str, datetime, int]], granularity: str, source: type[Sums]
    ) -> None:
        """`_roll`; if the database refuses a value, halve and retry each half, down to the
        period it refuses, which is refused alone: a value the range check did not foresee
        stops one endpoint's period, never the batch. An outage propagates (retried later)."""
        try:
            await self._roll(marks, granularity, source)
        except WRITE_ERRORS as exc:
            if not is_data_error(exc):
                raise
            if len(marks) > 1:
                half = len(marks) // 2
                await self._roll_apart(marks[:half], granularity, source)
                await self._roll_apart(marks[half:], granularity, source)
                return
            [(endpoint, marked, version)] = marks
            start = period_start(marked, granularity)
            table = TABLES[granularity]
            async with self._sessions.begin() as session:
                for refused in (table, LoadBinRow) if granularity == "hour" else (table,):
                    await session.execute(
                        delete(refused).where(refused.endpoint == endpoint, refused.start == start)
                    )
                await session.execute(
                    delete(RollupDue).where(
                        RollupDue.granularity == granularity,
                        RollupDue.endpoint == endpoint,
                        RollupDue.start == marked,
                        RollupDue.version == version,
                    )
                )
            self._refused([(endpoint, start, reason(exc))], granularity)

    def _refused(self, refused: Sequence[tuple[str, datetime, str]], granularity: str) -> None:
        """Say which periods were refused, once per endpoint in this run."""
        if self._refusals_logged is None:
            self._refusals_logged = set()
        for endpoint, start, why in refused:
            if endpoint in self._refusals_logged:
                continue
            self._refusals_logged.add(endpoint)
            log.error(
                "store: endpoint %s: %s %s not rolled up: %s; it has no %s row (its windows"
                " are kept: spectax export --granularity window), the other endpoints roll up;"
                " later periods of this endpoint refused the same way are not logged again",
                endpoint,
                granularity,
                start.isoformat(),
                why,
                {"hour": "hourly", "day": "daily"}[granularity],
            )

    async def _roll(
        self, marks: Sequence[tuple[str, datetime, int]], granularity: str, source: type[Sums]
    ) -> None:
        """Roll the periods of `marks` (endpoint, marked start, version) in one transaction."""
        table = TABLES[granularity]
        by_period: dict[datetime, set[str]] = {}
        for endpoint, marked, _ in marks:
            by_period.setdefault(period_start(marked, granularity), set()).add(endpoint)
        insert = self._insert
        columns = [column for column in sa_inspect(source).columns if column.name != "id"]
        async with self._sessions.begin() as session:
            connection = await session.connection()
            summed: list[dict[str, Any]] = []
            binned: list[dict[str, Any]] = []  # the hours' windows by load (hour only)
            refused: list[tuple[str, datetime, str]] = []
            days: set[tuple[str, datetime]] = set()
            for start, endpoints in sorted(by_period.items()):
                end = start + PERIOD[granularity]
                names = sorted(endpoints)
                query = select(*columns).where(
                    source.endpoint.in_(names), source.start >= start, source.start < end
                )
                rows: dict[str, list[Any]] = {name: [] for name in names}
                for row in await connection.execute(query):
                    rows[row.endpoint].append(row)
                for replaced in (table, LoadBinRow) if granularity == "hour" else (table,):
                    await connection.execute(
                        delete(replaced).where(
                            replaced.endpoint.in_(names), replaced.start == start
                        )
                    )
                for name in names:
                    period = rollup_rows(name, start, granularity, rows[name])
                    bins = load_bin_rows(name, start, rows[name]) if granularity == "hour" else []
                    problem = next(filter(None, map(sums_out_of_range, [*period, *bins])), None)
                    if problem is None:
                        summed += period
                        binned += bins
                    else:
                        refused.append((name, start, problem))
                    days.add((name, period_start(start, "day")))
            if summed:
                await connection.execute(upsert_statement(insert, table), summed)
            if binned:
                await connection.execute(insert(LoadBinRow), binned)
            if granularity == "hour":
                await connection.execute(
                    mark_due_statement(insert),
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
        self._refused(refused, granularity)

    async def apply_retention(self, now: datetime, keep: dict[str, float | None]) -> int:
        """Delete rows older than their granularity's retention (seconds; None keeps forever),
        but never rows whose rollup is still due. Returns the rows deleted."""
        deleted = 0
        async with self._sessions.begin() as session:
            for granularity, seconds in keep.items():
                if seconds is None:
                    continue
                table = TABLES[granularity]
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
                    horizon = min(horizon, period_start(oldest_due, rolled_into))
                for kept in (table, LoadBinRow) if granularity == "hour" else (table,):
                    result = await session.execute(delete(kept).where(kept.start < horizon))
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
        table = TABLES[granularity]
        query = select(table).order_by(table.start, table.endpoint, table.model)
        if since is not None:
            query = query.where(table.start >= since)
        if until is not None:
            query = query.where(table.start < until)
        if endpoints:
            query = query.where(table.endpoint.in_(list(endpoints)))
        async with self._sessions() as session:
            return list((await session.scalars(query)).all())


def period_start(t: datetime, granularity: str) -> datetime:
    """The start of the UTC hour (granularity "hour") or day (any other) holding `t`."""
    return floor_time(t, PERIOD["hour" if granularity == "hour" else "day"])


def window_out_of_range(row: Mapping[str, Any]) -> str | None:
    """Why a window row may not be stored (None: it may): a value larger than a day's
    column range prorated to the window's length, so that no day's rollup can pass it.
    That is 1.07e14 tokens (or $106,751) a second: beyond any real engine, within reach
    of a target that restarts at every scrape with counters near 2**53."""
    length = max((row["end"] - row["start"]).total_seconds(), float(row.get("seconds") or 0))
    for name, limit in _LIMITS.items():
        value = row.get(name)
        if value is None:
            continue
        safe = _SAFE_DOLLARS[name] if isinstance(value, Decimal) else _SAFE_NUMBERS[name]
        if -safe <= value <= safe:
            continue  # every value but the absurd: no bound computed, no Decimal made
        bound = limit * max(length, 1.0) / _DAY_SECONDS
        if _stored(value) > bound:
            return (
                f"{name} {value} in a {length:g} s window is more than a day's rollup could"
                f" hold ({limit} = 2**{limit.bit_length()} - 1 a day, {bound:.4g} for this"
                " window); the target's counters are not believable (check its restarts)"
            )
    return None


def sums_out_of_range(row: Mapping[str, Any]) -> str | None:
    """Why a rollup row's sums do not fit their columns (None: they do)."""
    for name, limit in _LIMITS.items():
        value = row.get(name)
        if value is not None and _stored(value) > limit:
            return f"{name} sums to {value}, more than the column holds ({limit})"
    return None


def _stored(value: Any) -> Any:
    """The magnitude the column holds: nano-dollars for money."""
    return abs(Decimal(value).scaleb(9) if isinstance(value, Decimal) else value)


def rollup_rows(
    endpoint: str, start: datetime, granularity: str, rows: Sequence[Sums]
) -> list[dict[str, Any]]:
    """One summed row per model for the period starting at `start`. `rows` are the period's
    source rows: ORM instances or result rows, anything with the `Sums` columns as attributes."""
    by_model: dict[str, list[Sums]] = {}
    for row in rows:
        by_model.setdefault(row.model, []).append(row)
    result = []
    for model, group in sorted(by_model.items()):
        group.sort(key=lambda r: r.start)
        summed: dict[str, Any] = {
            "endpoint": endpoint,
            "model": model,
            "start": start,
            "end": start + PERIOD[granularity],
            "windows": sum(getattr(r, "windows", 1) for r in group),
            _POSITIONS: json.dumps(_add_positions(group)),
            "draft_cost_ratio": group[-1].draft_cost_ratio,
            "ridge_batch_requests": group[-1].ridge_batch_requests,
        }
        for name in _ADDED:
            summed[name] = sum(getattr(r, name) for r in group)
        for name in _OPTIONAL_ADDED:
            values = [getattr(r, name) for r in group if getattr(r, name) is not None]
            zero: Any = Decimal(0) if values and isinstance(values[0], Decimal) else 0
            summed[name] = sum(values, zero) if values else None
        summed.update({name: _add_buckets(group, name) for name in _BUCKETS})
        summed.update(assessed_sums(group))
        summed.update(verdict_counts(group))
        summed.update({name: getattr(group[-1], name, None) for name in _LATEST})
        result.append(summed)
    return result


def load_bin_rows(endpoint: str, start: datetime, windows: Sequence[Any]) -> list[dict[str, Any]]:
    """The hour's windows (starting at `start`) binned by load: one row per model, bin
    (`bin_edge` of the window's mean running requests), verdict basis and whether it counted
    drafted tokens, with the sums the load curve adds up (models.LoadBinRow). `windows` are
    window rows: ORM instances or result rows with the columns `load_history` reads."""
    groups: dict[tuple[str, int, str, bool], list[Any]] = {}
    for w in windows:
        if w.model:  # a page that served no model is no point of a curve
            key = (
                w.model,
                bin_edge(w.concurrency_requests),
                w.verdict_basis or "",
                w.draft_tokens is not None,
            )
            groups.setdefault(key, []).append(w)
    return [_load_bin(endpoint, start, group) for _, group in sorted(groups.items())]


def _load_bin(endpoint: str, start: datetime, group: Sequence[Any]) -> dict[str, Any]:
    """One bin's sums. Only the windows whose assessment concluded a speedup add their busy
    time and band (`load_curve.sample_of`'s condition); `*_missing` count those without an
    end of the band (then the bin has none). A sum of nothing known is NULL, as in SQL."""
    first, newest = group[0], max(group, key=lambda w: w.end)
    assessed = [
        w
        for w in group
        if w.plain_busy_seconds is not None
        and w.assessed_busy_seconds is not None
        and w.assessed_busy_seconds > 0
    ]
    return {
        "endpoint": endpoint,
        "model": first.model,
        "start": start,
        "edge": bin_edge(first.concurrency_requests),
        "verdict_basis": first.verdict_basis,
        "drafted": first.draft_tokens is not None,
        "windows": len(group),
        "end": newest.end,
        "seconds": sum(w.seconds for w in group),
        "running_seconds": sum(w.concurrency_requests * w.seconds for w in group),
        "output_tokens": sum(w.output_tokens for w in group),
        "drafts": _known_sum(w.drafts for w in group),
        "draft_tokens": _known_sum(w.draft_tokens for w in group),
        "accepted_tokens": _known_sum(w.accepted_tokens for w in group),
        _POSITIONS: json.dumps(_add_positions(group)),
        "plain_busy_seconds": _known_sum(w.plain_busy_seconds for w in assessed),
        "assessed_busy_seconds": _known_sum(w.assessed_busy_seconds for w in assessed),
        "low_busy_seconds": _known_sum(_band_busy(w, w.speedup_low_ratio) for w in assessed),
        "high_busy_seconds": _known_sum(_band_busy(w, w.speedup_high_ratio) for w in assessed),
        "low_missing": sum(w.speedup_low_ratio is None for w in assessed),
        "high_missing": sum(w.speedup_high_ratio is None for w in assessed),
        "savings_usd": _known_sum(w.speculation_savings_usd for w in group),
        "busy_usd": _known_sum(w.busy_spend_usd for w in group),
        "ridge_batch_requests": newest.ridge_batch_requests,
        "draft_cost_ratio": newest.draft_cost_ratio,
    }


def _band_busy(window: Any, end: float | None) -> float | None:
    return None if end is None else window.assessed_busy_seconds * end


def _known_sum(values: Iterable[Any]) -> Any:
    """The sum of the values that are known; None when none is (SQL's SUM)."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    return sum(known, Decimal(0) if isinstance(known[0], Decimal) else 0)


def verdict_counts(rows: Sequence[Any]) -> dict[str, int | None]:
    """Windows per verdict and per basis. A window row counts itself by its `verdict` and
    `verdict_basis` (NULL before migration 0004: its verdict counts, its basis does not);
    a rollup row adds its counts, and one that has none (rolled up before 0005) makes the
    sum unknown: a day with one hour not recorded is not recorded, never undercounted."""
    counts: dict[str, int | None] = dict.fromkeys(VERDICT_COLUMNS, 0)
    for row in rows:
        if hasattr(row, "verdict"):  # a window
            for key in (f"windows_{row.verdict}", f"windows_basis_{row.verdict_basis}"):
                if key in counts:
                    counts[key] = (counts[key] or 0) + 1
            continue
        for key in VERDICT_COLUMNS:
            value, total = getattr(row, key), counts[key]
            counts[key] = None if value is None or total is None else total + value
    return counts


def assessed_sums(rows: Sequence[Any]) -> dict[str, float | None]:
    """The period's sums of what its windows' assessments concluded; all None when a row
    was written before they were recorded (its assessed_busy_seconds NULL)."""
    if any(getattr(row, "assessed_busy_seconds", None) is None for row in rows):
        return dict.fromkeys(ASSESSED)
    summed: dict[str, float | None] = {}
    for name in ASSESSED:
        values = [getattr(row, name) for row in rows if getattr(row, name) is not None]
        summed[name] = sum(values) if values else None
    return summed


def _add_buckets(rows: Sequence[Sums], column: str) -> str | None:
    """The period's bucket counts, so its quantiles stay computable; unknown (NULL) when any
    row that saw observations has none or other bounds: never a quantile over part of it."""
    total: Buckets = ()
    for row in rows:
        buckets = decode_buckets(getattr(row, column, None))
        count = getattr(row, column.removesuffix("_buckets") + "_count")
        if not buckets:
            if count:
                return None
            continue
        if total and [le for le, _ in total] != [le for le, _ in buckets]:
            return None
        total = tuple(
            (le, n + (total[i][1] if total else 0.0)) for i, (le, n) in enumerate(buckets)
        )
    return encode_buckets(total) if total else None


def _add_positions(rows: Sequence[Sums]) -> list[int]:
    total: list[int] = []
    for row in rows:
        for i, accepted in enumerate(json.loads(getattr(row, _POSITIONS))):
            if i == len(total):
                total.append(0)
            total[i] += int(accepted)
    return total
