"""The stored windows as the load curve reads them (`economics.load_curve`, issue 34): one
sample per window and model over a lookback, from the columns the curve sums and no other.

A day of 5-minute windows is 288 rows per endpoint and model; reading the ~20 columns the
curve needs rather than the windows table's ~60 keeps the daemon's periodic read of them
(`spectax.curve_book`) small.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import select

from spectax.economics.load_curve import LoadSample
from spectax.economics.step_model import Basis
from spectax.store.database import DATABASE_ERRORS, Database, StoreError, reason
from spectax.store.models import WindowRow

_COLUMNS = (
    WindowRow.endpoint,
    WindowRow.model,
    WindowRow.end,
    WindowRow.seconds,
    WindowRow.concurrency_requests,
    WindowRow.output_tokens,
    WindowRow.drafts,
    WindowRow.draft_tokens,
    WindowRow.accepted_tokens,
    WindowRow.accepted_per_position,
    WindowRow.plain_busy_seconds,
    WindowRow.assessed_busy_seconds,
    WindowRow.speedup_low_ratio,
    WindowRow.speedup_high_ratio,
    WindowRow.verdict_basis,
    WindowRow.speculation_savings_usd,
    WindowRow.busy_spend_usd,
    WindowRow.ridge_batch_requests,
    WindowRow.draft_cost_ratio,
)
BASES: frozenset[str] = frozenset(("measured", "calibrated", "profile", "default"))


class LoadHistory(Database):
    async def load_samples(
        self, since: datetime, endpoints: Sequence[str] | None = None
    ) -> dict[tuple[str, str], list[LoadSample]]:
        """The windows that started at or after `since`, as load-curve samples by (endpoint,
        model); a window without a model (a page that served none) is no point of a curve."""
        query = select(*_COLUMNS).where(WindowRow.start >= since, WindowRow.model != "")
        if endpoints is not None:
            query = query.where(WindowRow.endpoint.in_(list(endpoints)))
        try:
            async with self._sessions() as session:
                rows = (await session.execute(query)).all()
        except DATABASE_ERRORS as exc:
            raise StoreError(f"cannot read the windows' load: {reason(exc)}") from None
        found: dict[tuple[str, str], list[LoadSample]] = {}
        for row in rows:
            found.setdefault((row.endpoint, row.model), []).append(load_sample_of(row))
        return found


def load_sample_of(row: Any) -> LoadSample:
    """One stored window of one model as a curve sample: the sums its assessment wrote
    (store.rows.assessed_sums), its band as busy time times each end, as `sample_of` makes
    them of a window in memory."""
    busy = row.assessed_busy_seconds or 0.0
    plain = row.plain_busy_seconds
    low, high = row.speedup_low_ratio, row.speedup_high_ratio
    assessed = plain is not None and busy > 0
    basis = row.verdict_basis if row.verdict_basis in BASES else None
    return LoadSample(
        end=row.end.timestamp(),
        seconds=row.seconds,
        concurrency=row.concurrency_requests,
        output_tokens=float(row.output_tokens),
        drafts=_optional(row.drafts),
        draft_tokens=_optional(row.draft_tokens),
        accepted_tokens=_optional(row.accepted_tokens),
        accepted_per_position=tuple(float(a) for a in json.loads(row.accepted_per_position)),
        plain_busy_seconds=plain if assessed else None,
        assessed_busy_seconds=busy if assessed else 0.0,
        low_busy_seconds=busy * low if assessed and low is not None else None,
        high_busy_seconds=busy * high if assessed and high is not None else None,
        basis=cast(Basis, basis) if assessed else None,
        savings_usd=row.speculation_savings_usd,
        busy_usd=float(row.busy_spend_usd) if row.busy_spend_usd is not None else None,
        ridge_batch=row.ridge_batch_requests,
        draft_cost_ratio=row.draft_cost_ratio or 0.0,
    )


def _optional(value: float | None) -> float | None:
    return None if value is None else float(value)
