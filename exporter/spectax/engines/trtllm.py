"""TensorRT-LLM `trtllm-serve` page (`/prometheus/metrics`) -> `EngineSample`.

Read from TensorRT-LLM's `tensorrt_llm/metrics/collector.py` (2026, NVIDIA/TensorRT-LLM#12636;
see /work/shared/ENGINES.md). Labels are `model_name` and `engine_type` (plus
`finished_reason`, `token_position`); one server process renders the page for its
replica, so series are summed per `model_name` over every other label.

Exact counters: drafted and accepted tokens (`trtllm_spec_decode_num_{draft,accepted}
_tokens_total`, per iteration, with `enable_iter_perf_stats`), per position
(`trtllm_spec_decode_{drafted,accepted}_tokens_total{token_position}`, per finished
request, with `return_perf_metrics`). There is no drafts (verify steps) counter: every
draft proposes a token at position 0, so drafts are the drafted tokens at position 0
(derived; it moves when a request finishes). `trtllm_spec_decode_draft_overhead` is the
one measured draft overhead of any engine (draft time / iteration time, a gauge of the
last iteration), kept as `ModelSample.draft_overhead`. The speculation counters are
created on their first draft: before it, `trtllm_speculative_config_info` says the
engine speculates and they read 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Final

from spectax.engines import scan
from spectax.engines.base import Capability, EngineSample, Histogram, ModelSample

__all__ = ["CAPABILITIES", "parse"]

ENGINE: Final = "trtllm"

_GEN, _PROMPT, _FINISHED, _DRAFT_TOKENS, _ACCEPTED, _TPOT_SUM, _TPOT_COUNT = range(7)
_RUNNING, _WAITING, _OVERHEAD, _SPEC_INFO = range(7, 11)
_N_SLOTS: Final = 11
_FAMILIES: Final = {
    "trtllm_generation_tokens_total": _GEN,
    "trtllm_prompt_tokens_total": _PROMPT,
    "trtllm_request_success_total": _FINISHED,
    "trtllm_spec_decode_num_draft_tokens_total": _DRAFT_TOKENS,
    "trtllm_spec_decode_num_accepted_tokens_total": _ACCEPTED,
    "trtllm_time_per_output_token_seconds_sum": _TPOT_SUM,
    "trtllm_time_per_output_token_seconds_count": _TPOT_COUNT,
    "trtllm_num_requests_running": _RUNNING,
    "trtllm_num_requests_waiting": _WAITING,
    "trtllm_spec_decode_draft_overhead": _OVERHEAD,
    "trtllm_speculative_config_info": _SPEC_INFO,
}
_DRAFTED_POS: Final = "trtllm_spec_decode_drafted_tokens_total"
_ACCEPTED_POS: Final = "trtllm_spec_decode_accepted_tokens_total"
_START: Final = "process_start_time_seconds"
_SCAN: Final = scan.scanner([*_FAMILIES, _DRAFTED_POS, _ACCEPTED_POS, _START])
_LINES: Final = scan.line_scanner([*_FAMILIES, _DRAFTED_POS, _ACCEPTED_POS, _START])
_BOUNDED: Final = frozenset(
    [
        *(n for n, s in _FAMILIES.items() if s not in (_OVERHEAD, _SPEC_INFO)),
        _DRAFTED_POS,
        _ACCEPTED_POS,
    ]
)


def parse(text: str | bytes) -> EngineSample:
    """Parse a TensorRT-LLM page into an `EngineSample` (`models == {}` without metrics).

    Raises `ParseError` naming the line for a malformed line it reads (a draft overhead
    outside 0..1 included: it is a share of the step).
    """
    return scan.read(text, _LINES, _SCAN, _BOUNDED, _read)


def _read(rows: Iterable[scan.Row]) -> EngineSample:
    """The sample of the page's relevant lines (`scan.read` gives them, in bulk or line by
    line); `ParseError` for one the engine's rules refuse."""
    models: dict[str, list[float | None]] = {}
    positions: dict[str, tuple[dict[int, float], dict[int, float]]] = {}
    process_start: float | None = None
    for name, labels, value, start, body in rows:
        if name == _START:
            if not math.isfinite(value):
                raise scan.error(body, start, f"bad value for {name}")
            process_start = value
            continue
        model = scan.model_of(name, labels, models, body, start)
        acc = models.get(model)
        if acc is None:
            acc = models[model] = [None] * _N_SLOTS
            positions[model] = ({}, {})
        if name in (_DRAFTED_POS, _ACCEPTED_POS):
            index = scan.position(body, start, name, labels.get("token_position"))
            per_pos = positions[model][name == _ACCEPTED_POS]
            total = per_pos.get(index, 0.0) + value
            per_pos[index] = scan.check_sum(body, start, name, model, total)
            continue
        slot = _FAMILIES[name]
        if slot == _OVERHEAD:
            if not 0.0 <= value <= 1.0:
                raise scan.error(body, start, f"{name} must be a share 0..1, got {value!r}")
            if acc[slot] is not None:
                raise scan.error(body, start, f"{name} appears twice for model {model!r}")
            acc[slot] = value
            continue
        previous = acc[slot]
        total = value if previous is None else previous + value
        acc[slot] = scan.check_sum(body, start, name, model, total)
    return EngineSample(
        engine=ENGINE,
        models={m: _sample(models[m], *positions[m]) for m in models},
        process_start_time_seconds=process_start,
    )


def _sample(
    acc: list[float | None], drafted: dict[int, float], accepted: dict[int, float]
) -> ModelSample:
    speculating = any(acc[s] is not None for s in (_SPEC_INFO, _DRAFT_TOKENS, _ACCEPTED))
    speculating = speculating or bool(drafted)
    zero = 0.0 if speculating else None
    tpot = None
    if acc[_TPOT_SUM] is not None or acc[_TPOT_COUNT] is not None:
        tpot = Histogram(sum=acc[_TPOT_SUM] or 0.0, count=acc[_TPOT_COUNT] or 0.0)
    draft_tokens = acc[_DRAFT_TOKENS] if acc[_DRAFT_TOKENS] is not None else zero
    accepted_tokens = acc[_ACCEPTED] if acc[_ACCEPTED] is not None else zero
    return ModelSample(
        generation_tokens=acc[_GEN] or 0.0,
        prompt_tokens=acc[_PROMPT] or 0.0,
        requests_finished=acc[_FINISHED] or 0.0,
        # Without per-position counters (no return_perf_metrics) drafts are unknown, not 0.
        drafts=drafted.get(0, zero if not draft_tokens else None),
        draft_tokens=draft_tokens,
        accepted_tokens=accepted_tokens,
        accepted_per_position=(
            tuple(accepted.get(i, 0.0) for i in range(max(drafted) + 1)) if drafted else ()
        ),
        time_per_output_token=tpot,
        requests_running=acc[_RUNNING] or 0.0,
        requests_waiting=acc[_WAITING] or 0.0,
        draft_overhead=acc[_OVERHEAD],
    )


#: TensorRT-LLM (2026 collector): exact drafted/accepted counters and a measured overhead.
CAPABILITIES: Final = {
    "output_tokens": Capability("exact"),
    "prompt_tokens": Capability("exact"),
    "requests_finished": Capability("exact", "trtllm_request_success_total"),
    "draft_tokens": Capability("exact", "trtllm_spec_decode_num_draft_tokens_total"),
    "acceptance_length": Capability(
        "derived", "no drafts counter: drafts are the drafted tokens at position 0"
    ),
    "per_position": Capability("exact", "needs return_perf_metrics"),
    "step_time": Capability(
        "absent", "trtllm_iteration_latency_seconds is the last iteration only (a gauge)"
    ),
    "time_per_output_token": Capability("exact"),
    "requests_running": Capability("exact"),
    "draft_overhead": Capability("exact", "trtllm_spec_decode_draft_overhead (last iteration)"),
    "restart": Capability("exact", "process_start_time_seconds, or counters going down"),
}
