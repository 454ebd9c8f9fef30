"""The row codec: a closed window and its assessments as `windows` table rows, a stored
window back as a `Window`, and an engine sample as the cursor's JSON text. The only place
that knows how a counter is spelled in the database."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from decimal import Decimal
from typing import Any

from spectax.economics.formulas import Assessment
from spectax.engines.base import EngineSample, Histogram, ModelSample
from spectax.pipeline.windows import Counts, Window
from spectax.store.models import WindowRow
from spectax.units import from_timestamp as _utc


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
        spend_usd=sum_usd(row.spend_usd for row in rows),
        cold_start_usd=sum_usd(row.cold_start_usd for row in rows),
        draft_load_usd=sum_usd(row.draft_load_usd for row in rows),
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


def sum_usd(values: Iterable[Decimal | None]) -> Decimal:
    return sum((v or Decimal(0) for v in values), Decimal(0))


def _round(value: float | None) -> int | None:
    return None if value is None else round(value)


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)


def _histogram(total: float | None, count: float | None) -> Histogram | None:
    return None if total is None or count is None else Histogram(sum=total, count=count)


def _histogram_columns(prefix: str, histogram: Histogram | None) -> dict[str, float | None]:
    return {
        f"{prefix}sum_usd": histogram.sum if histogram else None,
        f"{prefix}_count": histogram.count if histogram else None,
    }
