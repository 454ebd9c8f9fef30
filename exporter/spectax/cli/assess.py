"""`spectax assess BEFORE AFTER`: the economics between two saved `/metrics` pages.

For someone who just ran curl twice against their server. Only two
snapshots are seen, so the whole span counts as busy (ECONOMICS.md §4) and
concurrency is the mean of the two pages' running requests, floored at 1.
Two more pages from a control (the same model without speculation) give the
measured speedup: the control's time per output token over ours.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spectax import economics
from spectax.engines import get_parser
from spectax.engines.base import EngineSample
from spectax.pipeline.intervals import interval_between
from spectax.pipeline.windows import sum_intervals

PROVISIONED_NOTE = (
    "savings: on provisioned (always-on) GPUs this is capacity freed, money only if replicas"
    " are scaled down; on serverless GPUs it is invoice money"
)

JSON_KEYS = (
    "model",
    "output_tokens",
    "prompt_tokens",
    "drafts",
    "draft_tokens",
    "accepted_tokens",
    "concurrency_requests",
    "restarted",
    "acceptance_ratio",
    "acceptance_length_tokens",
    "position_acceptance_ratio",
    "breakeven_acceptance_ratio",
    "speedup_ratio",
    "speedup_measured_ratio",
    "crossover_concurrency_requests",
    "recommended_speculative_tokens",
    "draft_compute_share_ratio",
    "rejected_share_ratio",
    "spend_usd",
    "cost_per_million_output_tokens_usd",
    "cost_per_million_output_tokens_no_speculation_usd",
    "speculation_savings_usd",
    "verdict",
)


class AssessError(ValueError):
    """Inputs that cannot be assessed; the message is one line for the user."""


@dataclass(frozen=True)
class AssessOptions:
    seconds: float | None = None
    usd_per_hour: float | None = None
    gpus: int = 1
    method: str | None = None
    draft_cost_ratio: float | None = None
    ridge_batch: float = economics.DEFAULT_RIDGE_BATCH
    concurrency: float | None = None


def assess_pages(
    before_text: str,
    after_text: str,
    options: AssessOptions,
    control: tuple[str, str] | None = None,
    engine: str = "vllm",
) -> list[economics.Assessment]:
    """Assess per model; `control` is a (before, after) pair from the same model served
    without speculation, over the same span, for the measured speedup."""
    parse = get_parser(engine)
    before, after = parse(before_text), parse(after_text)
    if not after.has_engine_metrics:
        raise AssessError("the AFTER page has no engine metrics (vLLM --disable-log-stats?)")
    seconds = options.seconds if options.seconds is not None else 0.0
    interval = interval_between(before, after, 0.0, seconds)
    if not interval.models:
        raise AssessError("the pages share no model: were they taken from the same server?")
    window = sum_intervals([interval])
    control_window = None
    if control is not None:
        control_before, control_after = parse(control[0]), parse(control[1])
        control_window = sum_intervals([interval_between(control_before, control_after, 0, 1)])
        if not control_window.models:
            raise AssessError("the control pages have no engine metrics in common")
    c = _draft_cost_ratio(options, _speculates(after))
    params = economics.Parameters(draft_cost_ratio=c, ridge_batch=options.ridge_batch)
    spend = None
    if options.usd_per_hour is not None and options.seconds is not None:
        spend = economics.spend_estimate_usd(options.usd_per_hour, options.gpus, options.seconds)
    money = economics.Money(seconds, spend, spend)
    results = []
    for model, counts in sorted(interval.models.items()):
        concurrency = options.concurrency
        if concurrency is None:
            concurrency = _mean_running(before, after, model)
        traffic = economics.traffic_of(counts, max(concurrency, 1.0), interval.restarted)
        measured = economics.measured_speedup(window, control_window, model)
        results.append(economics.assess_model(model, traffic, params, money, measured))
    return results


def _speculates(sample: EngineSample) -> bool:
    return any(m.speculating for m in sample.models.values())


def to_json(assessments: Sequence[economics.Assessment]) -> str:
    return json.dumps([_json_object(a) for a in assessments], indent=2)


def to_text(assessments: Sequence[economics.Assessment]) -> str:
    lines = []
    for a in assessments:
        data = _json_object(a)
        lines.append(f"verdict: {a.verdict.upper()}   model: {a.model}")
        width = max(len(k) for k in JSON_KEYS)
        for key in JSON_KEYS[1:-1]:
            lines.append(f"  {key:<{width}}  {_show(data[key])}")
        lines.append("")
    if assessments:
        lines.append(PROVISIONED_NOTE)
    return "\n".join(lines)


def _json_object(a: economics.Assessment) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key in JSON_KEYS:
        value = getattr(a, key)
        if isinstance(value, tuple):
            value = list(value)
        if isinstance(value, float) and not math.isfinite(value):
            value = None  # JSON has no infinity; B_x = inf means "never a tax"
        data[key] = value
    return data


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return "[" + ", ".join(f"{v:.3f}" for v in value) + "]"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _mean_running(before: EngineSample, after: EngineSample, model: str) -> float:
    values = [s.models[model].requests_running for s in (before, after) if model in s.models]
    return sum(values) / len(values) if values else 0.0


def _draft_cost_ratio(options: AssessOptions, speculating: bool) -> float:
    if options.draft_cost_ratio is not None:
        return options.draft_cost_ratio
    if options.method is not None:
        c = economics.draft_cost_ratio_for(options.method)
        if c is None:
            raise AssessError(
                f"--method {options.method} needs --draft-cost-ratio (a draft model's cost "
                "relative to the target; roughly their latency ratio)"
            )
        return c
    if speculating:
        raise AssessError(
            "the pages show speculative decoding but not its method: give --method "
            f"({', '.join(economics.SPECULATIVE_METHODS)}) or --draft-cost-ratio"
        )
    return 0.0
