"""Rolling windows into hourly rows, hourly rows into daily rows, and retention.

Sums are exact: token counts are integers and money is integer nano-dollars,
so an hour's row equals the sum of its windows to the last digit, whatever
the backend. Ratios are never rolled up; readers recompute them from sums.
Parameters (draft cost ratio, ridge batch) are not sums: a rollup keeps the
latest window's value.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

from spectax.store.models import DailyRow, HourlyRow, Sums, WindowRow

Granularity = Literal["window", "hour", "day"]
TABLES: dict[str, type[Sums]] = {"window": WindowRow, "hour": HourlyRow, "day": DailyRow}
PERIOD = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
_ADDED = (
    "seconds",
    "busy_seconds",
    "restarts",
    "output_tokens",
    "prompt_tokens",
    "requests_finished",
    "running_seconds",
)
_OPTIONAL_ADDED = (
    "drafts",
    "draft_tokens",
    "accepted_tokens",
    "iteration_tokens_sum",
    "iteration_tokens_count",
    "inter_token_latency_sum",
    "inter_token_latency_count",
    "time_per_output_token_sum",
    "time_per_output_token_count",
    "spend_usd",
    "busy_spend_usd",
    "cold_start_usd",
    "draft_load_usd",
    "speculation_savings_usd",
)


def period_start(t: datetime, granularity: str) -> datetime:
    t = t.astimezone(UTC)
    if granularity == "hour":
        return t.replace(minute=0, second=0, microsecond=0)
    return t.replace(hour=0, minute=0, second=0, microsecond=0)


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
            "accepted_per_position": json.dumps(_add_positions(group)),
            "draft_cost_ratio": group[-1].draft_cost_ratio,
            "ridge_batch_requests": group[-1].ridge_batch_requests,
        }
        for name in _ADDED:
            summed[name] = sum(getattr(r, name) for r in group)
        for name in _OPTIONAL_ADDED:
            values = [getattr(r, name) for r in group if getattr(r, name) is not None]
            zero: Any = Decimal(0) if values and isinstance(values[0], Decimal) else 0
            summed[name] = sum(values, zero) if values else None
        result.append(summed)
    return result


def _add_positions(rows: Sequence[Sums]) -> list[int]:
    total: list[int] = []
    for row in rows:
        for i, accepted in enumerate(json.loads(row.accepted_per_position)):
            if i == len(total):
                total.append(0)
            total[i] += int(accepted)
    return total
