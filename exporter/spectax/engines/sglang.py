"""SGLang `/metrics` page (`--enable-metrics`) -> `EngineSample`.

Read from SGLang 0.5.23's `srt/observability/metrics_collector.py` (see
/work/shared/ENGINES.md). Two collectors write the page:

- the tokenizer process's counters (`sglang:generation_tokens_total`,
  `prompt_tokens_total`, `num_requests_total`, `spec_verify_calls_total`), labelled
  `model_name`, `engine_type`, `is_streaming` (and custom labels) but no rank: one
  process counts each finished request once, so they are summed over every label;
- each scheduler's gauges (`sglang:num_running_reqs`, `num_queue_reqs`,
  `spec_num_draft_tokens`), labelled `tp_rank`, `pp_rank`, `moe_ep_rank` and, with
  data-parallel attention, `dp_rank`. Tensor-, pipeline- and expert-parallel ranks are
  shards of one replica and report the same requests (by default only the first
  attention-TP rank reports at all): per `dp_rank` the lowest (pp, moe_ep, tp) rank is
  taken. Data-parallel ranks serve different requests: they are summed, as vLLM's
  `engine` ranks are. With priority scheduling the total is the `priority=""` series;
  the per-priority breakdown is skipped.

What SGLang lacks: a drafted-token counter (so no acceptance ratio; `draft_tokens` stays
None, never 0), per-position counts, a step time. Its window gauges
(`spec_accept_length`, `spec_accept_rate`) reset every log interval and cannot be
differenced: they are not read. Verify calls are the drafts; the accepted drafts are
derived per finished request as generated - finished - verify calls (each verify step
emits its accepted drafts plus one, a request's first token comes from prefill), so the
acceptance length 1 + accepted / drafts is Δ(generated - finished) / Δverify calls.
Its counters move only when a request finishes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Final

from spectax.engines import scan
from spectax.engines.base import Capability, EngineSample, Histogram, ModelSample

__all__ = ["CAPABILITIES", "parse"]

ENGINE: Final = "sglang"

_GEN, _PROMPT, _FINISHED, _VERIFY, _TPOT_SUM, _TPOT_COUNT = range(6)
_N_COUNTERS: Final = 6
_COUNTERS: Final = {
    "sglang:generation_tokens_total": _GEN,
    "sglang:prompt_tokens_total": _PROMPT,
    "sglang:num_requests_total": _FINISHED,
    "sglang:spec_verify_calls_total": _VERIFY,
    "sglang:request_time_per_output_token_seconds_sum": _TPOT_SUM,
    "sglang:request_time_per_output_token_seconds_count": _TPOT_COUNT,
}
_RUNNING, _WAITING, _SPEC_K = range(3)
_GAUGES: Final = {
    "sglang:num_running_reqs": _RUNNING,
    "sglang:num_queue_reqs": _WAITING,
    "sglang:spec_num_draft_tokens": _SPEC_K,
}
_START: Final = "process_start_time_seconds"
_SCAN: Final = scan.scanner([*_COUNTERS, *_GAUGES, _START])
_LINES: Final = scan.line_scanner([*_COUNTERS, *_GAUGES, _START])
_BOUNDED: Final = frozenset([*_COUNTERS, *_GAUGES])
_RANKS: Final = ("pp_rank", "moe_ep_rank", "tp_rank")


def _rank(labels: dict[str, str], body: str, start: int, name: str) -> tuple[int, ...]:
    try:
        return tuple(int(labels.get(key, "0")) for key in _RANKS)
    except ValueError:
        raise scan.error(body, start, f"{name} has a rank label that is not a number") from None


def parse(text: str | bytes) -> EngineSample:
    """Parse an SGLang page into an `EngineSample` (`models == {}` without metrics).

    Raises `ParseError` naming the line for a malformed line it reads.
    """
    return scan.read(text, _LINES, _SCAN, _BOUNDED, _read)


def _read(rows: Iterable[scan.Row]) -> EngineSample:
    """The sample of the page's relevant lines (`scan.read` gives them, in bulk or line by
    line); `ParseError` for one the engine's rules refuse."""
    counters: dict[str, list[float | None]] = {}
    # model -> dp_rank -> gauge slot -> (shard rank, value): the lowest shard wins.
    gauges: dict[str, dict[str, dict[int, tuple[tuple[int, ...], float]]]] = {}
    process_start: float | None = None
    for name, labels, value, start, body in rows:
        if name == _START:
            if not math.isfinite(value):
                raise scan.error(body, start, f"bad value for {name}")
            process_start = value
            continue
        model = scan.model_of(name, labels, counters, body, start)
        if model not in counters:
            counters[model] = [None] * _N_COUNTERS
            gauges[model] = {}
        slot = _COUNTERS.get(name)
        if slot is not None:
            acc = counters[model]
            previous = acc[slot]
            total = value if previous is None else previous + value
            acc[slot] = scan.check_sum(body, start, name, model, total)
            continue
        if labels.get("priority", ""):
            continue  # a per-priority breakdown of the total beside it
        per_dp = gauges[model].setdefault(labels.get("dp_rank", ""), {})
        rank = _rank(labels, body, start, name)
        held = per_dp.get(_GAUGES[name])
        if held is None or rank < held[0]:
            per_dp[_GAUGES[name]] = (rank, value)
    return EngineSample(
        engine=ENGINE,
        models={m: _sample(counters[m], gauges[m]) for m in counters},
        process_start_time_seconds=process_start,
    )


def _sample(
    acc: list[float | None], per_dp: dict[str, dict[int, tuple[tuple[int, ...], float]]]
) -> ModelSample:
    def gauge(slot: int) -> float | None:
        values = [held[slot][1] for held in per_dp.values() if slot in held]
        return sum(values) if values else None

    generated, finished, verify = acc[_GEN] or 0.0, acc[_FINISHED] or 0.0, acc[_VERIFY]
    configured = (gauge(_SPEC_K) or 0.0) > 0
    drafts = verify if verify is not None else (0.0 if configured else None)
    accepted = None
    if drafts is not None:
        # Each finished request: one prefill token plus (accepted + 1) per verify step.
        accepted = max(0.0, generated - finished - drafts)
    tpot = None
    if acc[_TPOT_SUM] is not None or acc[_TPOT_COUNT] is not None:
        tpot = Histogram(sum=acc[_TPOT_SUM] or 0.0, count=acc[_TPOT_COUNT] or 0.0)
    return ModelSample(
        generation_tokens=generated,
        prompt_tokens=acc[_PROMPT] or 0.0,
        requests_finished=finished,
        drafts=drafts,
        accepted_tokens=accepted,
        time_per_output_token=tpot,
        requests_running=gauge(_RUNNING) or 0.0,
        requests_waiting=gauge(_WAITING) or 0.0,
    )


#: SGLang 0.5.x: tokens and verify calls are counters; no drafted count, no step time.
CAPABILITIES: Final = {
    "output_tokens": Capability("exact"),
    "prompt_tokens": Capability("exact"),
    "requests_finished": Capability("exact", "sglang:num_requests_total"),
    "draft_tokens": Capability(
        "absent", "no drafted-token counter (spec_accept_rate is a window gauge)"
    ),
    "acceptance_length": Capability(
        "derived", "Δ(generation_tokens - num_requests) / Δspec_verify_calls"
    ),
    "per_position": Capability("absent", "no per-position counter"),
    "step_time": Capability("absent", "inter_token_latency is per token, not per step"),
    "time_per_output_token": Capability("exact"),
    "requests_running": Capability("exact", "scheduler gauge, summed over dp_rank"),
    "draft_overhead": Capability("absent", "SGLang does not time the drafter apart"),
    "restart": Capability(
        "derived", "prometheus multiprocess mode: no process_start_time_seconds, counters go down"
    ),
}
