"""The stored windows as the load curve reads them (`economics.load_curve`, issue 34), summed
by the database per endpoint, model and load bin over a lookback.

A day of 5-minute windows is 288 rows per endpoint and model, 576,000 at 2,000 endpoints.
Read row by row, 100 endpoints' day took 1.5 s of the event loop's CPU (52 µs a row: the
row objects, then one sample each, then binning them); summed by the database, which bins
them by the same edges (`BIN_EDGES`), the loop gets a few rows per endpoint and model: one
per bin, basis and whether the window counted drafted tokens, which is all the curve's
figures on /metrics need (the sums are the curve's own: `load_curve` sums them again). Not
summed: the per-position counts (JSON text) and the B* and c in force, which only the K
schedule reads, and the report makes its schedule from the hourly rollups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import ColumnElement, and_, case, func, select

from spectax.economics.load_curve import BIN_EDGES, LoadSample
from spectax.economics.step_model import Basis
from spectax.store.database import DATABASE_ERRORS, Database, StoreError, reason
from spectax.store.models import WindowRow

BASES: frozenset[str] = frozenset(("measured", "calibrated", "profile", "default"))

W = WindowRow
#: The bin's lower edge, as `load_curve.bin_edge` gives it: the largest edge at or below the
#: window's mean running requests, 1 below 2.
_EDGE = case(*[(W.concurrency_requests >= e, e) for e in reversed(BIN_EDGES[1:])], else_=1)
#: A window whose assessment concluded a speedup (`load_curve.sample_of`'s condition).
_ASSESSED = and_(W.plain_busy_seconds.is_not(None), W.assessed_busy_seconds > 0)
_DRAFTED = W.draft_tokens.is_not(None)


def _assessed_sum(value: Any) -> ColumnElement[Any]:
    return func.sum(case((_ASSESSED, value)))


def _missing(column: Any) -> ColumnElement[Any]:
    """How many assessed windows lack `column` (then the group has no band)."""
    return func.sum(case((and_(_ASSESSED, column.is_(None)), 1), else_=0))


_QUERY = select(
    W.endpoint,
    W.model,
    _EDGE.label("edge"),
    W.verdict_basis,
    _DRAFTED.label("drafted"),
    func.count().label("windows"),
    func.max(W.end).label("end"),
    func.sum(W.seconds).label("seconds"),
    func.sum(W.concurrency_requests * W.seconds).label("running_seconds"),
    func.sum(W.output_tokens).label("output_tokens"),
    func.sum(W.drafts).label("drafts"),
    func.sum(W.draft_tokens).label("draft_tokens"),
    func.sum(W.accepted_tokens).label("accepted_tokens"),
    _assessed_sum(W.plain_busy_seconds).label("plain_busy_seconds"),
    _assessed_sum(W.assessed_busy_seconds).label("assessed_busy_seconds"),
    _assessed_sum(W.assessed_busy_seconds * W.speedup_low_ratio).label("low_busy_seconds"),
    _assessed_sum(W.assessed_busy_seconds * W.speedup_high_ratio).label("high_busy_seconds"),
    _missing(W.speedup_low_ratio).label("low_missing"),
    _missing(W.speedup_high_ratio).label("high_missing"),
    func.sum(W.speculation_savings_usd).label("savings_usd"),
    func.sum(W.busy_spend_usd).label("busy_usd"),
).where(W.model != "")


#: Endpoints summed per query. One query over a day of 2,000 endpoints (576,000 windows) held
#: SQLite's read lock 4-8 s, while the writer's commits waited (rollback journal: a commit
#: needs every reader gone) and could pass the 5 s busy timeout; 50 endpoints' day is
#: ~14,000 windows, a read of a fraction of a second, and the writer gets in between.
ENDPOINTS_PER_READ = 50


class LoadHistory(Database):
    async def load_samples(
        self, since: datetime, endpoints: Sequence[str]
    ) -> dict[tuple[str, str], list[LoadSample]]:
        """The `endpoints`' windows that started at or after `since`, summed per load bin, as
        load-curve samples by (endpoint, model); a window without a model (a page that
        served none) is no point of a curve. Read ENDPOINTS_PER_READ endpoints at a time."""
        found: dict[tuple[str, str], list[LoadSample]] = {}
        names = sorted(endpoints)
        for first in range(0, len(names), ENDPOINTS_PER_READ):
            batch = names[first : first + ENDPOINTS_PER_READ]
            query = _QUERY.where(W.endpoint.in_(batch), W.start >= since).group_by(
                W.endpoint, W.model, _EDGE, W.verdict_basis, _DRAFTED
            )
            try:
                async with self._sessions() as session:
                    rows = (await session.execute(query)).all()
            except DATABASE_ERRORS as exc:
                raise StoreError(f"cannot read the windows' load: {reason(exc)}") from None
            for row in rows:
                found.setdefault((row.endpoint, row.model), []).append(load_sample_of(row))
        return found


def load_sample_of(row: Any) -> LoadSample:
    """One group of stored windows (one bin, basis and drafted-or-not of one model) as one
    sample of `windows` windows: the sums their assessments wrote (store.rows.assessed_sums),
    the band as busy time times each end, as `sample_of` makes them of a window in memory."""
    seconds = float(row.seconds or 0.0)
    busy = float(row.assessed_busy_seconds or 0.0)
    assessed = row.plain_busy_seconds is not None and busy > 0
    basis = row.verdict_basis if row.verdict_basis in BASES else None
    following = BIN_EDGES.index(row.edge) + 1
    floor = row.edge if row.edge > 1 else -math.inf  # bin 1 holds the idle windows too
    ceiling = BIN_EDGES[following] if following < len(BIN_EDGES) else math.inf
    mean = float(row.running_seconds or 0.0) / seconds if seconds > 0 else 0.0
    return LoadSample(
        end=row.end.timestamp(),
        seconds=seconds,
        # The group's mean stays in its bin however its sum rounds.
        concurrency=min(max(mean, floor), math.nextafter(ceiling, 0)),
        windows=row.windows,
        output_tokens=float(row.output_tokens or 0.0),
        drafts=_optional(row.drafts) if row.drafted else None,
        draft_tokens=_optional(row.draft_tokens) if row.drafted else None,
        accepted_tokens=_optional(row.accepted_tokens) if row.drafted else None,
        plain_busy_seconds=float(row.plain_busy_seconds) if assessed else None,
        assessed_busy_seconds=busy if assessed else 0.0,
        low_busy_seconds=_optional(row.low_busy_seconds) if not row.low_missing else None,
        high_busy_seconds=_optional(row.high_busy_seconds) if not row.high_missing else None,
        basis=cast(Basis, basis) if assessed else None,
        savings_usd=_optional(row.savings_usd),
        busy_usd=_optional(row.busy_usd),
    )


def _optional(value: Any) -> float | None:
    return None if value is None else float(value)
