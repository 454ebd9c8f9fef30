"""Reading a month (and the month before) of rollups from the store into a `Report`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal

from spectax.economics.load_curve import LoadSample
from spectax.report.capacity_figures import CapacityRow, capacity_rows
from spectax.report.endpoint_day import day_figures, estimated, scale_factor
from spectax.report.figures import EndpointInfo, Figures, HourPoint, total, with_bins
from spectax.report.latency_figures import LatencyFigures, month_latency
from spectax.report.period import Month
from spectax.report.progress import Progress
from spectax.report.read import Reader, store_reader
from spectax.report.recommend import Recommendation, recommend
from spectax.report.records import RollupRecord
from spectax.report.spend import DayKey, EstimatedSpend, Spend, SpendSource
from spectax.store import Store

# Hourly rows are read a week at a time, so the progress bar moves while they load.
CHUNK = timedelta(days=7)
#: The month's load bins by (endpoint, day), then (model, hour).
Bins = dict[DayKey, dict[tuple[str, datetime], list[LoadSample]]]


@dataclass(slots=True)
class EndpointReport:
    info: EndpointInfo
    month: Figures
    previous: Figures | None
    days: dict[date, Figures]
    hours: list[HourPoint]
    recommendations: list[Recommendation] = field(default_factory=list)
    first: datetime | None = None  # first hour with history in the month
    last: datetime | None = None  # end of the last hour with history in the month
    latency: LatencyFigures | None = None  # quantiles, with against without speculation


@dataclass(slots=True)
class Report:
    month: Month
    endpoints: list[EndpointReport]
    total: Figures
    previous_total: Figures | None
    first: datetime | None
    last: datetime | None
    without_history: list[str]
    previous_only: dict[str, Figures] = field(default_factory=dict)  # history last month only
    capacity: list[CapacityRow] = field(default_factory=list)  # the KV cache, per model

    @property
    def empty(self) -> bool:
        return not self.endpoints

    @property
    def recommendations(self) -> list[Recommendation]:
        return [r for e in self.endpoints for r in e.recommendations]

    def by_kind(self) -> list[tuple[str, Figures, Figures | None]]:
        """The month's and the month before's totals per kind, when the report has several.

        A kind is what speculation's savings are on an endpoint (`invoice`, `capacity`,
        `unknown`): the fleet's total never adds them, so each kind gets its own.
        """
        kinds = {e.info.semantics for e in self.endpoints}
        kinds |= {k for f in self.previous_only.values() for k in f.kinds}
        if len(kinds) < 2:
            return []
        rows = []
        for kind in sorted(kinds):
            of_kind = [e for e in self.endpoints if e.info.semantics == kind]
            before = [e.previous for e in of_kind if e.previous is not None]
            before += [f for f in self.previous_only.values() if kind in f.kinds]
            rows.append((kind, total(e.month for e in of_kind), total(before) if before else None))
        return rows


async def build_report(
    store: Store,
    month: Month,
    infos: dict[str, EndpointInfo],
    only: Sequence[str] | None = None,
    spend_source: SpendSource | None = None,
    progress: Progress | None = None,
    reader: Reader | None = None,
) -> Report:
    """Roll up what is due, read two months of daily and hourly rows, compute the figures.

    `reader` reads the rollup rows (default: through `Store.rows()`; see read.py).
    """
    progress = progress or Progress(1, enabled=False)
    spend_source = spend_source or EstimatedSpend()
    previous = month.previous()
    names = list(only) if only else None
    daily, hourly = await _read_rows(store, reader, month, names, progress)
    drafted = {r.endpoint for r in hourly if r.draft_tokens is not None and r.start >= month.start}
    bins = await _read_bins(store, month, sorted(drafted)) if drafted else {}

    daily_by: dict[DayKey, list[RollupRecord]] = defaultdict(list)
    for row in daily:
        daily_by[(row.endpoint, row.start.date())].append(row)
    hourly_by: dict[DayKey, list[RollupRecord]] = defaultdict(list)
    for row in hourly:
        hourly_by[(row.endpoint, row.start.date())].append(row)
    estimates: dict[DayKey, Decimal | None] = {
        key: estimated(rows) for key, rows in daily_by.items()
    }
    spends: dict[DayKey, Spend] = await spend_source.daily(store, estimates)

    seen = {key[0] for key in daily_by} | {key[0] for key in hourly_by}
    candidates = sorted(set(names) if names else seen | set(infos))
    progress.add_steps(len(candidates))
    month_days = set(month.dates())
    reports: list[EndpointReport] = []
    without: list[str] = []
    previous_only: dict[str, Figures] = {}
    for name in candidates:
        progress.advance(label=f"computing {name}")
        info = infos.get(name, EndpointInfo(name))
        this, days, hours = _sum_days(
            info, month_days, daily_by, hourly_by, spends, collect_hours=True, bins=bins
        )
        before, _, _ = _sum_days(
            info, set(previous.dates()), daily_by, hourly_by, spends, collect_hours=False
        )
        if this.empty:
            without.append(name)
            if not before.empty:
                previous_only[name] = before
            continue
        report = EndpointReport(
            info=info,
            month=this,
            previous=None if before.empty else before,
            days=days,
            hours=hours,
        )
        starts = [r.start for d in days for r in hourly_by[(name, d)]]
        ends = [r.end for d in days for r in hourly_by[(name, d)]]
        report.first = min(starts, default=None)
        report.last = max(ends, default=None)
        report.recommendations = recommend(info, this, hours)
        report.latency = month_latency(
            _rows_of(name, days, daily_by, hourly_by),
            _rows_of(info.control, days, daily_by, hourly_by) if info.control else None,
            info.control,
            this.speedup,
            this.speculating,
        )
        reports.append(report)
    reports.sort(key=lambda e: (-e.month.spend, e.info.name))
    previous_figures = [e.previous for e in reports if e.previous is not None]
    previous_figures += previous_only.values()
    firsts = [e.first for e in reports if e.first is not None]
    lasts = [e.last for e in reports if e.last is not None]
    return Report(
        month=month,
        endpoints=reports,
        total=total(e.month for e in reports),
        previous_total=total(previous_figures) if previous_figures else None,
        first=min(firsts, default=None),
        last=max(lasts, default=None),
        without_history=without,
        previous_only=previous_only,
        capacity=capacity_rows(
            (r for r in daily if month.start <= r.start < month.end),
            infos,
        ),
    )


async def _read_rows(
    store: Store,
    reader: Reader | None,
    month: Month,
    names: list[str] | None,
    progress: Progress,
) -> tuple[list[RollupRecord], list[RollupRecord]]:
    """The daily and hourly rows of the month and the one before, rolled up first; the
    hourly ones in chunks, so that progress moves while a year of history is read."""
    read = reader or store_reader(store)
    previous = month.previous()
    chunks = _chunks(previous.start, month.end)
    progress.add_steps(3 + len(chunks))
    progress.stage("rolling up the latest windows")
    await store.rollup()
    progress.advance(label="reading daily rows")
    daily = await read("day", previous.start, month.end, names)
    progress.advance(label="reading hourly rows")
    hourly: list[RollupRecord] = []
    for since, until in chunks:
        hourly += await read("hour", since, until, names)
        progress.advance(label=f"reading hourly rows ({until:%Y-%m-%d})")
    return daily, hourly


def _sum_days(
    info: EndpointInfo,
    days: set[date],
    daily_by: dict[DayKey, list[RollupRecord]],
    hourly_by: dict[DayKey, list[RollupRecord]],
    spends: dict[DayKey, Spend],
    collect_hours: bool,
    bins: Bins | None = None,
) -> tuple[Figures, dict[date, Figures], list[HourPoint]]:
    month = Figures()
    per_day: dict[date, Figures] = {}
    points: list[HourPoint] = []
    for day in sorted(days):
        key = (info.name, day)
        daily_rows, hourly_rows = daily_by.get(key, []), hourly_by.get(key, [])
        if not daily_rows and not hourly_rows:
            continue
        figures, hours = day_figures(
            info, daily_rows, hourly_rows, spends.get(key), positions=collect_hours
        )
        month.add(figures)
        per_day[day] = figures
        if collect_hours:
            found = (bins or {}).get(key)
            ratio = float(scale_factor(spends.get(key), estimated(daily_rows)))
            points += with_bins(hours, found, ratio) if found else hours
    return month, per_day, points


async def _read_bins(store: Store, month: Month, names: list[str]) -> Bins:
    """The month's hours' windows binned by load (`Store.load_bins`), of the endpoints that
    speculated (only their hours have a curve), by endpoint and day, then model and hour:
    the load curve window by window (`HourPoint.load_samples`). 22-32 µs a bin row (4,800
    rows on SQLite): a month of 100 endpoints at two loads an hour, 144,000 rows, ~4 s."""
    bins: Bins = defaultdict(dict)
    for endpoint, model, start, sample in await store.load_bins(month.start, month.end, names):
        bins[(endpoint, start.date())].setdefault((model, start), []).append(sample)
    return bins


def _rows_of(
    name: str,
    days: Iterable[date],
    daily_by: dict[DayKey, list[RollupRecord]],
    hourly_by: dict[DayKey, list[RollupRecord]],
) -> list[RollupRecord]:
    """An endpoint's rows of these days: the daily ones, or a day's hours not rolled yet."""
    return [r for d in days for r in daily_by.get((name, d)) or hourly_by.get((name, d), [])]


def _chunks(start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    spans = []
    t = start
    while t < end:
        spans.append((t, min(t + CHUNK, end)))
        t += CHUNK
    return spans
