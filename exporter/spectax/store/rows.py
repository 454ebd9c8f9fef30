"""The row codec: an assessed window as `windows` table rows (a monitor's `Observed` as the
store writer's `PendingWrite`), and a stored window back as a `Window`. The only place that
knows how a counter is spelled in the database: each declared counter
(spectax.engines.base.Counters) by the rule of its kind, in its declared column.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
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
    """The rows for one window: one per model, or one with model "" when the page had none."""
    window = closed.window
    models = window.models or {"": Counts()}
    rows = []
    for model, counts in models.items():
        assessment = closed.assessments.get(model)
        spend = closed.spend.get(model)
        rows.append(
            {
                "endpoint": endpoint,
                "model": model,
                "start": _utc(window.start),
                "end": _utc(window.end),
                "seconds": window.seconds,
                "busy_seconds": window.busy_seconds,
                "restarts": window.restarts,
                "unobserved_seconds": window.unobserved_seconds,
                **counter_columns(counts),
                "spend_usd": spend.spend_usd if spend else None,
                "busy_spend_usd": spend.busy_usd if spend else None,
                "cold_start_usd": spend.cold_start_usd if spend else None,
                "draft_load_usd": spend.draft_load_usd if spend else None,
                "concurrency_requests": window.concurrency(model),
                "acceptance_ratio": assessment.acceptance_ratio if assessment else None,
                "breakeven_acceptance_ratio": (
                    assessment.breakeven_acceptance_ratio if assessment else None
                ),
                "speedup_ratio": assessment.speedup_ratio if assessment else None,
                "ridge_batch_requests": closed.step_model.ridge_batch,
                "ridge_batch_source": closed.step_model.source,
                "draft_cost_ratio": closed.draft_cost_ratio,
                "speculation_savings_usd": (
                    assessment.speculation_savings_usd if assessment else None
                ),
                "verdict": assessment.verdict if assessment else "no_traffic",
                "speedup_low_ratio": assessment.speedup_low_ratio if assessment else None,
                "speedup_high_ratio": assessment.speedup_high_ratio if assessment else None,
                "step_overhead_ratio": assessment.step_overhead_ratio if assessment else None,
                "verdict_basis": assessment.verdict_basis if assessment else None,
                **assessed_sums(window.busy_seconds, assessment),
            }
        )
    return rows


def assessed_sums(busy_seconds: float, assessment: Assessment | None) -> dict[str, Any]:
    """The assessment's conclusions as columns that add up (store.models.Sums, 0009): the
    report divides their sums, so an hour's speedup is its windows' own, at the h and B*
    each was assessed with, never one recomputed from the hour's counters."""
    speedup = assessment.speedup_in_force if assessment else None
    return {
        "plain_busy_seconds": busy_seconds * speedup if speedup is not None else None,
        "assessed_busy_seconds": busy_seconds if speedup is not None else 0.0,
        "draft_compute_usd": assessment.draft_compute_usd if assessment else None,
        "rejected_usd": assessment.rejected_usd if assessment else None,
    }


def complete_row(row: dict[str, Any]) -> dict[str, Any]:
    """The row with every column of the windows table, the missing ones at their default.

    A row spooled before an upgrade lacks the columns the upgrade added, and one
    executemany takes its column list from its first row: mixed with newer rows,
    an old one would fail the batch ("a value is required") or make the newer
    rows' new columns silently drop. Completed, every row has the same columns.
    """
    if len(row) == len(_DEFAULTS) + 1:  # every column but the id: the common case, as is
        return row
    return {**_DEFAULTS, **row}


def window_from_rows(rows: Sequence[WindowRow]) -> Window:
    """Rebuild the in-memory window from its stored rows (the inverse of `window_rows`)."""
    first = rows[0]
    return Window(
        start=first.start.timestamp(),
        end=first.end.timestamp(),
        seconds=first.seconds,
        busy_seconds=first.busy_seconds,
        restarts=first.restarts,
        spend_usd=sum_usd(row.spend_usd for row in rows),
        cold_start_usd=sum_usd(row.cold_start_usd for row in rows),
        draft_load_usd=sum_usd(row.draft_load_usd for row in rows),
        models={row.model: counts_from_row(row) for row in rows if row.model},
        unobserved_seconds=first.unobserved_seconds or 0.0,
    )


def counter_columns(counts: Counts) -> dict[str, Any]:
    """A model's counter deltas as the windows table spells them (counts rounded: they are
    whole numbers, summed from float-valued pages), in the table's column order: the order
    the spool's rows have always had."""
    columns = _unordered_columns(counts)
    return {name: columns[name] for name in _COUNTER_ORDER}


def _unordered_columns(counts: Counts) -> dict[str, Any]:
    columns: dict[str, Any] = {name: getattr(counts, name) for name, _ in GAUGES}
    for counter in COUNTERS:
        columns.update(_ENCODE[counter.kind](counter.column, getattr(counts, counter.name)))
    return columns


def counts_from_row(row: WindowRow) -> Counts:
    values = {c.name: _DECODE[c.kind](row, c.column) for c in COUNTERS}
    gauges = {name: getattr(row, name) for name, _ in GAUGES}
    return Counts(**values, **gauges)


def sum_usd(values: Iterable[Decimal | None]) -> Decimal:
    return sum((v or Decimal(0) for v in values), Decimal(0))


# ---------------------------------------------------------------- per kind: columns and back


def _number_column(column: str, value: float) -> dict[str, Any]:
    # Only vLLM's FLOP and byte estimates (Float columns) pass 2**53; rounded, they could
    # overflow a database integer, and a whole FLOP means nothing.
    return {column: round(value) if value < 2**53 else value}


def _optional_column(column: str, value: float | None) -> dict[str, Any]:
    return {column: None if value is None else round(value)}


def _histogram_columns(column: str, value: Histogram | None) -> dict[str, Any]:
    return {
        f"{column}_sum": value.sum if value else None,
        f"{column}_count": value.count if value else None,
        f"{column}_buckets": _histogram_buckets(value) if value and value.bounds else None,
    }


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


def _positions_column(column: str, value: tuple[float, ...]) -> dict[str, Any]:
    return {column: json.dumps([round(a) for a in value])}


def _number_of(row: WindowRow, column: str) -> float:
    return float(getattr(row, column))


def _optional_of(row: WindowRow, column: str) -> float | None:
    value = getattr(row, column)
    return None if value is None else float(value)


def _histogram_of(row: WindowRow, column: str) -> Histogram | None:
    total, count = getattr(row, f"{column}_sum"), getattr(row, f"{column}_count")
    if total is None or count is None:
        return None
    return Histogram(total, count, decode_buckets(getattr(row, f"{column}_buckets", None)))


def _positions_of(row: WindowRow, column: str) -> tuple[float, ...]:
    return tuple(float(a) for a in json.loads(getattr(row, column)))


_TABLE_ORDER = {column.name: i for i, column in enumerate(WindowRow.__table__.columns)}
_DEFAULTS: dict[str, Any] = {
    column.name: column.default.arg if column.default is not None else None
    for column in WindowRow.__table__.columns
    if column.name != "id"
}
_ENCODE: dict[CounterKind, Callable[[str, Any], dict[str, Any]]] = {
    "plain": _number_column,
    "speculation": _optional_column,
    "histogram": _histogram_columns,
    "per_position": _positions_column,
}
_DECODE: dict[CounterKind, Callable[[WindowRow, str], Any]] = {
    "plain": _number_of,
    "speculation": _optional_of,
    "histogram": _histogram_of,
    "per_position": _positions_of,
}

#: counter_columns' columns in the table's order: every call gives the same columns, so they
#: are sorted once here, not for every row (issue 31).
_COUNTER_ORDER = sorted(_unordered_columns(Counts()), key=_TABLE_ORDER.__getitem__)
