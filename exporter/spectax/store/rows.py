"""The row codec: an assessed window as `windows` table rows (a monitor's `Observed` as the
store writer's `PendingWrite`), and a stored window back as a `Window`. The only place that
knows how a counter is spelled in the database: each declared counter
(spectax.engines.base.Counters) by the rule of its kind, in its declared column.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from spectax.economics.assessment import AssessedWindow, Assessment
from spectax.engines.base import COUNTERS, Buckets, CounterKind, Histogram, PerBoundList
from spectax.observed import Observed
from spectax.pipeline.counts import GAUGES, Counts
from spectax.pipeline.windows import Window
from spectax.store.models import WindowRow
from spectax.store.pending import PendingWrite
from spectax.units import from_timestamp as _utc


def pending_write(observed: Observed) -> PendingWrite:
    """What the store must write of `observed`: its windows' rows (the closed ones, then the
    open one) and the cursor that goes with them."""
    endpoint = observed.endpoint
    rows = [row for w in observed.closed for row in window_rows(endpoint, w)]
    if observed.open_window is not None:
        rows += window_rows(endpoint, observed.open_window)
    return PendingWrite(endpoint, rows, observed.cursor)


def window_rows(endpoint: str, closed: AssessedWindow) -> list[dict[str, Any]]:
    """The rows for one window: one per model, or one with model "" when the page had none.
    Each row's values are listed in its columns' order (_ROW_COLUMNS) and zipped into its
    dict at once: the open window's rows are made at every scrape (issue 31)."""
    window = closed.window
    models = window.models or {"": Counts()}
    start, end = _utc(window.start), _utc(window.end)
    step = closed.step_model
    rows = []
    for model, counts in models.items():
        values: list[Any] = [
            endpoint,
            model,
            start,
            end,
            window.seconds,
            window.busy_seconds,
            window.restarts,
            window.unobserved_seconds,
        ]
        values += _counter_values(counts)
        spend = closed.spend.get(model)
        if spend:
            values += (spend.spend_usd, spend.busy_usd, spend.cold_start_usd, spend.draft_load_usd)
        else:
            values += (None, None, None, None)
        values.append(window.concurrency(model))
        assessment = closed.assessments.get(model)
        if assessment:
            values += (
                assessment.acceptance_ratio,
                assessment.breakeven_acceptance_ratio,
                assessment.speedup_ratio,
            )
        else:
            values += (None, None, None)
        values += (step.ridge_batch, step.source, closed.draft_cost_ratio)
        if assessment:
            values += (
                assessment.speculation_savings_usd,
                assessment.verdict,
                assessment.speedup_low_ratio,
                assessment.speedup_high_ratio,
                assessment.step_overhead_ratio,
                assessment.verdict_basis,
            )
        else:
            values += (None, "no_traffic", None, None, None, None)
        values += _assessed_values(window.busy_seconds, assessment)
        rows.append(dict(zip(_ROW_COLUMNS, values, strict=True)))
    return rows


def assessed_sums(busy_seconds: float, assessment: Assessment | None) -> dict[str, Any]:
    """The assessment's conclusions as columns that add up (store.models.Sums, 0009): the
    report divides their sums, so an hour's speedup is its windows' own, at the h and B*
    each was assessed with, never one recomputed from the hour's counters."""
    return dict(zip(_ASSESSED_COLUMNS, _assessed_values(busy_seconds, assessment), strict=True))


def _assessed_values(busy_seconds: float, assessment: Assessment | None) -> tuple[Any, ...]:
    speedup = assessment.speedup_in_force if assessment else None
    return (
        busy_seconds * speedup if speedup is not None else None,
        busy_seconds if speedup is not None else 0.0,
        assessment.draft_compute_usd if assessment else None,
        assessment.rejected_usd if assessment else None,
    )


_ASSESSED_COLUMNS = (
    "plain_busy_seconds",
    "assessed_busy_seconds",
    "draft_compute_usd",
    "rejected_usd",
)


def complete_row(row: dict[str, Any]) -> dict[str, Any]:
    """The row with every column of the windows table, the missing ones at their default.

    A row spooled before an upgrade lacks the columns the upgrade added, and one
    executemany takes its column list from its first row: mixed with newer rows,
    an old one would fail the batch ("a value is required") or make the newer
    rows' new columns silently drop. Completed, every row has the same columns.
    """
    if row.keys() == _DEFAULTS.keys():  # every column but the id: the common case, as is
        return row
    return {**_DEFAULTS, **row}


def window_from_rows(rows: Sequence[Any], only: Collection[str] | None = None) -> Window:
    """Rebuild the in-memory window from its stored rows (the inverse of `window_rows`):
    WindowRow instances, or anything with the table's columns as attributes.

    `only`: the Counts fields to read, from rows that may hold no more than
    `columns_of(only)`; the rest are left at their defaults (the histograms' buckets, and
    the window's money, restarts and unobserved time too): what a restart reads of the day
    of windows it feeds the calibration, ~40 s of a 2,000-endpoint start-up read whole."""
    first = rows[0]
    models = {row.model: counts_from_row(row, only) for row in rows if row.model}
    start, end = first.start.timestamp(), first.end.timestamp()
    if only is not None:
        return Window(start, end, first.seconds, first.busy_seconds, models=models)
    return Window(
        start=start,
        end=end,
        seconds=first.seconds,
        busy_seconds=first.busy_seconds,
        restarts=first.restarts,
        spend_usd=sum_usd(row.spend_usd for row in rows),
        cold_start_usd=sum_usd(row.cold_start_usd for row in rows),
        draft_load_usd=sum_usd(row.draft_load_usd for row in rows),
        models=models,
        unobserved_seconds=first.unobserved_seconds or 0.0,
    )


def stored_column(field: str) -> str:
    """The column a counter of one column (a plain or a speculation one) is stored in."""
    (column,) = _plan(frozenset({field})).columns
    return column


def columns_of(only: Collection[str]) -> tuple[str, ...]:
    """The windows table's columns `window_from_rows(rows, only)` reads."""
    read = _plan(frozenset(only)).columns
    return tuple(c for c in _TABLE_ORDER if c in read or c in _WINDOW_COLUMNS)


def counter_columns(counts: Counts) -> dict[str, Any]:
    """A model's counter deltas as the windows table spells them (counts rounded: they are
    whole numbers, summed from float-valued pages), in the table's column order: the order
    the spool's rows have always had."""
    return dict(zip(_COUNTER_ORDER, _counter_values(counts), strict=True))


def _counter_values(counts: Counts) -> list[Any]:
    """counter_columns' values, in its order: each declared counter by the rule of its kind
    (_ENCODE), each gauge as it is."""
    values: list[Any] = [None] * len(_COUNTER_ORDER)
    for name, slot in _GAUGE_SLOTS:
        values[slot] = getattr(counts, name)
    for encode, name, slots in _COUNTER_SLOTS:
        encode(values, slots, getattr(counts, name))
    return values


def counts_from_row(row: WindowRow, only: Collection[str] | None = None) -> Counts:
    plan = _WHOLE if only is None else _plan(frozenset(only))
    values = {name: decode(row, columns) for name, decode, columns in plan.counters}
    gauges = {name: getattr(row, column) for name, column in plan.gauges}
    return Counts(**values, **gauges)


def sum_usd(values: Iterable[Decimal | None]) -> Decimal:
    return sum((v or Decimal(0) for v in values), Decimal(0))


# ---------------------------------------------------------------- per kind: columns and back


def _number_column(values: list[Any], slots: tuple[int, ...], value: float) -> None:
    # Only vLLM's FLOP and byte estimates (Float columns) pass 2**53; rounded, they could
    # overflow a database integer, and a whole FLOP means nothing.
    values[slots[0]] = round(value) if value < 2**53 else value


def _optional_column(values: list[Any], slots: tuple[int, ...], value: float | None) -> None:
    values[slots[0]] = None if value is None else round(value)


def _histogram_columns(values: list[Any], slots: tuple[int, ...], value: Histogram | None) -> None:
    """Its sum, count and buckets (None when unknown; left None in `values`)."""
    if value:
        total, count, buckets = slots
        values[total], values[count] = value.sum, value.count
        values[buckets] = _histogram_buckets(value) if value.bounds else None


def _histogram_buckets(histogram: Histogram) -> str:
    """`encode_buckets` of a histogram, the same text: its bounds' part of the JSON is a
    template made once per shared bound list, and only the counts are put in it (the open
    window's rows are encoded at every scrape; json.dumps of the pairs was ~8 us a
    histogram, issue 31)."""
    return _bucket_template(histogram.bounds) % tuple(map(round, histogram.bucket_counts()))


def _bucket_json(bounds: tuple[float, ...]) -> str:
    """A bound list's JSON with a %d per count: JSON's own spelling of each bound's string,
    so the template is what dumps writes."""
    texts = [_BOUND_TEXT.get(le) or _remembered_bound_text(le) for le in bounds]
    return ", ".join(f"[{json.dumps(text)}, %d]" for text in texts).join("[]")


_bucket_template = PerBoundList(_bucket_json)


def encode_buckets(buckets: Buckets) -> str:
    """Buckets as standard JSON: bounds as the exposition format spells them ("+Inf")."""
    return json.dumps(
        [[_BOUND_TEXT.get(le) or _remembered_bound_text(le), round(n)] for le, n in buckets]
    )


def decode_buckets(text: str | None) -> Buckets:
    return tuple((float(le), float(count)) for le, count in json.loads(text)) if text else ()


def _bound_text(le: float) -> str:
    return "+Inf" if le == math.inf else repr(le)


# The bounds seen so far as text (every window of every endpoint repeats vLLM's few lists):
# repr() of a float for each bucket of each histogram of each row was a quarter of encoding
# a window's rows (issue 31). Capped: a page inventing bounds is not cached.
_BOUND_TEXT: dict[float, str] = {}


def _remembered_bound_text(le: float) -> str:
    text = _bound_text(le)
    if len(_BOUND_TEXT) < 4096:
        _BOUND_TEXT[le] = text
    return text


def _positions_column(values: list[Any], slots: tuple[int, ...], value: tuple[float, ...]) -> None:
    values[slots[0]] = json.dumps([round(a) for a in value])


def _number_of(row: WindowRow, columns: tuple[str, ...]) -> float:
    return float(getattr(row, columns[0]))


def _optional_of(row: WindowRow, columns: tuple[str, ...]) -> float | None:
    value = getattr(row, columns[0])
    return None if value is None else float(value)


def _histogram_of(row: WindowRow, columns: tuple[str, ...]) -> Histogram | None:
    """Its sum, count and (when `columns` names a third, the buckets') the buckets."""
    total, count = getattr(row, columns[0]), getattr(row, columns[1])
    if total is None or count is None:
        return None
    buckets = getattr(row, columns[2], None) if len(columns) > 2 else None
    return Histogram(total, count, decode_buckets(buckets))


def _positions_of(row: WindowRow, columns: tuple[str, ...]) -> tuple[float, ...]:
    return tuple(float(a) for a in json.loads(getattr(row, columns[0])))


_TABLE_ORDER = {column.name: i for i, column in enumerate(WindowRow.__table__.columns)}
_DEFAULTS: dict[str, Any] = {
    column.name: column.default.arg if column.default is not None else None
    for column in WindowRow.__table__.columns
    if column.name != "id"
}
_ENCODE: dict[CounterKind, Callable[[list[Any], tuple[int, ...], Any], None]] = {
    "plain": _number_column,
    "speculation": _optional_column,
    "histogram": _histogram_columns,
    "per_position": _positions_column,
}
_DECODE: dict[CounterKind, Callable[[WindowRow, tuple[str, ...]], Any]] = {
    "plain": _number_of,
    "speculation": _optional_of,
    "histogram": _histogram_of,
    "per_position": _positions_of,
}

_KIND_COLUMNS: dict[CounterKind, tuple[str, ...]] = {
    "plain": ("",),
    "speculation": ("",),
    "histogram": ("_sum", "_count", "_buckets"),
    "per_position": ("",),
}
#: counter_columns' columns in the table's order: every call gives the same columns, so they
#: are sorted once here, not for every row (issue 31).
_COUNTER_ORDER = sorted(
    [name for name, _ in GAUGES]
    + [c.column + suffix for c in COUNTERS for suffix in _KIND_COLUMNS[c.kind]],
    key=_TABLE_ORDER.__getitem__,
)
_GAUGE_SLOTS = tuple((name, _COUNTER_ORDER.index(name)) for name, _ in GAUGES)
_COUNTER_SLOTS = tuple(
    (
        _ENCODE[c.kind],
        c.name,
        tuple(_COUNTER_ORDER.index(c.column + suffix) for suffix in _KIND_COLUMNS[c.kind]),
    )
    for c in COUNTERS
)


@dataclass(frozen=True, slots=True)
class _DecodePlan:
    """counts_from_row's decoders, each with its counter's columns named once (a restart
    decodes a day of windows of each endpoint), and the gauges to read."""

    counters: tuple[tuple[str, Callable[[WindowRow, tuple[str, ...]], Any], tuple[str, ...]], ...]
    gauges: tuple[tuple[str, str], ...]  # (field, column): the same name

    @property
    def columns(self) -> frozenset[str]:
        """The columns the plan reads: its counters' and its gauges'."""
        read = {column for _, _, columns in self.counters for column in columns}
        return frozenset(read.union(column for _, column in self.gauges))


@functools.cache
def _plan(only: frozenset[str] | None) -> _DecodePlan:
    """The plan for the fields `only` (None: all of them, buckets included)."""
    unknown = (only or frozenset()) - {c.name for c in COUNTERS} - {n for n, _ in GAUGES}
    if unknown:
        raise ValueError(f"no such field of a window's counts: {', '.join(sorted(unknown))}")
    return _DecodePlan(
        tuple(
            (
                c.name,
                _DECODE[c.kind],
                tuple(
                    c.column + suffix
                    for suffix in _KIND_COLUMNS[c.kind]
                    if only is None or suffix != "_buckets"
                ),
            )
            for c in COUNTERS
            if only is None or c.name in only
        ),
        tuple((name, name) for name, _ in GAUGES if only is None or name in only),
    )


_WHOLE = _plan(None)
#: The window's own columns `window_from_rows(rows, only)` reads, whatever `only` is.
_WINDOW_COLUMNS = frozenset({"endpoint", "model", "start", "end", "seconds", "busy_seconds"})
#: window_rows' columns, in the order its rows have always had (the spool keeps them so).
_ROW_COLUMNS = (
    "endpoint",
    "model",
    "start",
    "end",
    "seconds",
    "busy_seconds",
    "restarts",
    "unobserved_seconds",
    *_COUNTER_ORDER,
    "spend_usd",
    "busy_spend_usd",
    "cold_start_usd",
    "draft_load_usd",
    "concurrency_requests",
    "acceptance_ratio",
    "breakeven_acceptance_ratio",
    "speedup_ratio",
    "ridge_batch_requests",
    "ridge_batch_source",
    "draft_cost_ratio",
    "speculation_savings_usd",
    "verdict",
    "speedup_low_ratio",
    "speedup_high_ratio",
    "step_overhead_ratio",
    "verdict_basis",
    *_ASSESSED_COLUMNS,
)
