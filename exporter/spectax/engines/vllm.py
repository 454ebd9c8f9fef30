"""vLLM `/metrics` page -> `EngineSample`.

Only a handful of the ~650 lines on a vLLM page matter, so instead of parsing
the whole exposition we scan for the lines we need with one compiled regular
expression (anchored on a newline, the scan runs in C), and parse only those
lines. Everything else (comments, the buckets of histograms other than the four
latency ones, `*_created`, `python_*`, other `vllm:` families) is skipped unvalidated.

Covers vLLM V1 (0.11 - 0.33) and the V0 legacy names (before 0.11); see
/work/shared/ENGINES.md. Series are summed per `model_name` over every other
label (`engine` = data-parallel rank, `finished_reason`, ...).

Strictness on the lines that are read: a bad value, an unterminated label set
or quote, a missing/empty or over-long `model_name`, a bad `position` or `le`, a
histogram with buckets but no +Inf one, a duplicate series, and a cumulative value
(counter, histogram `_sum`/`_count`/`_bucket`) or request-count gauge that is
negative, NaN, infinite or above `MAX_VALUE` (the FLOP and byte estimates: negative,
NaN or infinite) raise `ParseError` naming the 1-based line. What passes fits the
store's columns, so one target's page can never stop the history of the others. The V0
legacy gauges are passed through as reported (vLLM V0 could report NaN there before the
first draft).
"""

from __future__ import annotations

import math
import sys
from typing import Final

from spectax.engines.base import (
    Capability,
    EngineSample,
    ModelSample,
    ParseError,
)
from spectax.engines.scan import decode as _decode
from spectax.engines.scan import histogram, number, scanner, with_buckets
from spectax.engines.scan import where as _where
from spectax.engines.vllm_cache import CacheConfig
from spectax.engines.vllm_labels import LABEL_CACHE as _LABEL_CACHE
from spectax.engines.vllm_labels import parse_labels as _parse_labels

__all__ = ["MAX_MODELS", "MAX_MODEL_NAME", "MAX_POSITIONS", "MAX_VALUE", "parse"]

ENGINE: Final = "vllm"

#: Distinct `model_name` values accepted on one page (guards memory and cardinality).
MAX_MODELS: Final = 64
#: Largest number of speculative positions accepted (vLLM K is typically 1-10).
MAX_POSITIONS: Final = 256
#: Longest `model_name` accepted, in characters: the store's `model` column is
#: String(256) (PostgreSQL refuses longer), and a served name is a Hugging Face id
#: (at most 96 + 1 + 96 characters) or a local path, well under it.
MAX_MODEL_NAME: Final = 256
#: Largest cumulative value or request count accepted, 2**53: above it a float no longer
#: holds every integer, so deltas (and the stored sums) stop being exact; and the store's
#: BIGINT columns (2**63) keep 2**10 times that as headroom for rollups summing windows.
#: 2**53 tokens is 285 years at a million tokens a second.
MAX_VALUE: Final = float(2**53)
#: The estimated FLOPs and bytes (vLLM --enable-mfu-metrics) pass 2**53 within seconds on a
#: GPU: they are only bounded to be finite, and stored as floats.
_LARGEST_FLOAT: Final = sys.float_info.max

# Accumulator slots, one list of these per model.
(
    _GEN,
    _PROMPT,
    _FINISHED,
    _RUNNING,
    _WAITING,
    _DRAFTS,
    _DRAFT_TOKENS,
    _ACCEPTED,
    _ITER_SUM,
    _ITER_COUNT,
    _ITL_SUM,
    _ITL_COUNT,
    _TPOT_SUM,
    _TPOT_COUNT,
    _V0_TPOT_SUM,
    _V0_TPOT_COUNT,
    _LEGACY_RATE,
    _LEGACY_EFF,
    _FLOPS,
    _READ_BYTES,
    _TTFT_SUM,
    _TTFT_COUNT,
    _E2E_SUM,
    _E2E_COUNT,
    _PREEMPTIONS,
    _KV_USAGE,  # summed over ranks; divided by _KV_USAGE_SERIES: the ranks' mean
    _KV_USAGE_SERIES,
    _N_SLOTS,
) = range(28)
_PER_POS: Final = -1
_PROCESS_START: Final = -2
_CACHE_CONFIG: Final = -3

# How a value is checked and combined.
_CUMULATIVE: Final = 0  # counter / histogram _sum / _count: finite, >= 0, summed
_COUNT_GAUGE: Final = 1  # num_requests_*: finite, >= 0, summed over ranks
_LEGACY_GAUGE: Final = 2  # V0 ratio gauges: as reported, one series per model
_ESTIMATE: Final = 3  # estimated FLOPs / bytes: finite, >= 0, summed, with no 2**53 bound
_FRACTION: Final = 4  # KV-cache usage: 0..1, averaged over ranks

_FAMILIES: Final[dict[str, tuple[int, int]]] = {
    # vLLM V1 (and the V0 names that kept their meaning).
    "vllm:generation_tokens_total": (_GEN, _CUMULATIVE),
    "vllm:prompt_tokens_total": (_PROMPT, _CUMULATIVE),
    "vllm:request_success_total": (_FINISHED, _CUMULATIVE),
    "vllm:num_requests_running": (_RUNNING, _COUNT_GAUGE),
    "vllm:num_requests_waiting": (_WAITING, _COUNT_GAUGE),
    "vllm:num_preemptions_total": (_PREEMPTIONS, _CUMULATIVE),
    "vllm:kv_cache_usage_perc": (_KV_USAGE, _FRACTION),  # a 0-1 fraction despite the name
    "vllm:gpu_cache_usage_perc": (_KV_USAGE, _FRACTION),  # its name until 0.11
    # Settings as labels, one series per rank and no model_name: the page's KV cache.
    "vllm:cache_config_info": (_CACHE_CONFIG, _LEGACY_GAUGE),
    "vllm:spec_decode_num_drafts_total": (_DRAFTS, _CUMULATIVE),
    "vllm:spec_decode_num_draft_tokens_total": (_DRAFT_TOKENS, _CUMULATIVE),
    "vllm:spec_decode_num_accepted_tokens_total": (_ACCEPTED, _CUMULATIVE),
    "vllm:spec_decode_num_accepted_tokens_per_pos_total": (_PER_POS, _CUMULATIVE),
    "vllm:iteration_tokens_total_sum": (_ITER_SUM, _CUMULATIVE),
    "vllm:iteration_tokens_total_count": (_ITER_COUNT, _CUMULATIVE),
    "vllm:inter_token_latency_seconds_sum": (_ITL_SUM, _CUMULATIVE),
    "vllm:inter_token_latency_seconds_count": (_ITL_COUNT, _CUMULATIVE),
    "vllm:request_time_per_output_token_seconds_sum": (_TPOT_SUM, _CUMULATIVE),
    "vllm:request_time_per_output_token_seconds_count": (_TPOT_COUNT, _CUMULATIVE),
    "vllm:time_to_first_token_seconds_sum": (_TTFT_SUM, _CUMULATIVE),
    "vllm:time_to_first_token_seconds_count": (_TTFT_COUNT, _CUMULATIVE),
    "vllm:e2e_request_latency_seconds_sum": (_E2E_SUM, _CUMULATIVE),
    "vllm:e2e_request_latency_seconds_count": (_E2E_COUNT, _CUMULATIVE),
    # Non-zero only with --enable-mfu-metrics (vLLM 0.32+; v1/metrics/perf.py).
    "vllm:estimated_flops_per_gpu_total": (_FLOPS, _ESTIMATE),
    "vllm:estimated_read_bytes_per_gpu_total": (_READ_BYTES, _ESTIMATE),
    # vLLM V0 only (before 0.11).
    "vllm:spec_decode_draft_acceptance_rate": (_LEGACY_RATE, _LEGACY_GAUGE),
    "vllm:spec_decode_efficiency": (_LEGACY_EFF, _LEGACY_GAUGE),
    "vllm:time_per_output_token_seconds_sum": (_V0_TPOT_SUM, _CUMULATIVE),
    "vllm:time_per_output_token_seconds_count": (_V0_TPOT_COUNT, _CUMULATIVE),
    # Unlabelled process gauge (absent in prometheus multiprocess mode).
    "process_start_time_seconds": (_PROCESS_START, _LEGACY_GAUGE),
}

_HISTOGRAMS: Final = {
    (_ITER_SUM, _ITER_COUNT): "vllm:iteration_tokens_total",
    (_ITL_SUM, _ITL_COUNT): "vllm:inter_token_latency_seconds",
    (_TPOT_SUM, _TPOT_COUNT): "vllm:request_time_per_output_token_seconds",
    (_V0_TPOT_SUM, _V0_TPOT_COUNT): "vllm:time_per_output_token_seconds",
    (_TTFT_SUM, _TTFT_COUNT): "vllm:time_to_first_token_seconds",
    (_E2E_SUM, _E2E_COUNT): "vllm:e2e_request_latency_seconds",
}
# The latency histograms whose `_bucket` series are read (quantiles), each with its slot
# below _BUCKET: a bucket line's slot is _BUCKET - its index here.
_BUCKETED: Final = tuple((at, at + 1) for at in (_ITL_SUM, _TPOT_SUM, _TTFT_SUM, _E2E_SUM))
_BUCKET: Final = -10
_FAMILIES.update(
    {f"{_HISTOGRAMS[h]}_bucket": (_BUCKET - i, _CUMULATIVE) for i, h in enumerate(_BUCKETED)}
)


# One relevant sample line. The body is prefixed with "\n" so every line starts
# after a newline. When the tail (labels, value, optional timestamp) does not
# match, group 3 is empty -> ParseError, so a relevant line is never skipped
# silently.
_SCAN: Final = scanner(_FAMILIES)


def parse(text: str | bytes) -> EngineSample:
    """Parse a vLLM `/metrics` page (text exposition format) into an `EngineSample`.

    `text` is the decoded body; bytes are accepted too and must be UTF-8.
    A page without any vLLM family (`--disable-log-stats`) gives `models == {}`.
    Raises `ParseError` for malformed relevant lines (see the module docstring).
    """
    if not isinstance(text, str):
        text = _decode(text)
    body = "\n" + text
    families = _FAMILIES
    cache = _LABEL_CACHE
    models: dict[str, list[float | None]] = {}
    positions: dict[str, dict[int, float]] = {}
    # (model, index in _BUCKETED) -> le -> count summed over the other labels (ranks).
    buckets: dict[tuple[str, int], dict[float, float]] = {}
    seen: set[tuple[str, str | None]] = set()
    process_start: float | None = None
    cache_config = CacheConfig()

    # findall, not finditer: no match object per line. An error locates its line again
    # (`where`, the index-th match), which only a bad page pays for.
    for index, (name, labels, raw_value) in enumerate(_SCAN.findall(body)):
        if not raw_value:  # findall gives "" for a group that did not match
            raise ParseError(f"cannot parse {name} sample", *_where(_SCAN, body, index))
        key = (name, labels)
        if key in seen:
            raise ParseError(f"duplicate series {name}", *_where(_SCAN, body, index))
        seen.add(key)
        value = number(raw_value)
        if value is None:
            raise ParseError(f"bad value {raw_value!r} for {name}", *_where(_SCAN, body, index))
        slot, kind = families[name]

        if kind < _LEGACY_GAUGE and not 0.0 <= value <= MAX_VALUE:
            raise ParseError(
                f"{name} must be a finite non-negative number at most 2**53, got {raw_value}",
                *_where(_SCAN, body, index),
            )
        if kind == _ESTIMATE and not 0.0 <= value < math.inf:
            raise ParseError(
                f"{name} must be a finite non-negative number, got {raw_value}",
                *_where(_SCAN, body, index),
            )
        if slot <= _BUCKET:  # the most frequent lines: the shortest path
            info = cache.get(labels)
            if info is None:
                parsed = _parse_labels(labels) if labels else f"{name} has no model_name label"
                if isinstance(parsed, str):
                    raise ParseError(parsed, *_where(_SCAN, body, index))
                info = parsed
            model, _, le = info
            if model is None or le is None:
                missing = "model_name" if model is None else "le"
                raise ParseError(f"{name} has no {missing} label", *_where(_SCAN, body, index))
            per_le = buckets.setdefault((model, _BUCKET - slot), {})
            per_le[le] = total = per_le.get(le, 0.0) + value
            if total > MAX_VALUE:
                raise ParseError(
                    f"{name} of model {model!r} sums to more than 2**53",
                    *_where(_SCAN, body, index),
                )
            continue
        if slot == _PROCESS_START:
            if not math.isfinite(value):
                raise ParseError(f"bad value for {name}", *_where(_SCAN, body, index))
            process_start = value
            continue
        if slot == _CACHE_CONFIG:
            problem = cache_config.add(labels or "")
            if problem:
                raise ParseError(f"{name}: {problem}", *_where(_SCAN, body, index))
            continue
        if kind == _FRACTION and not 0.0 <= value <= 1.0:
            raise ParseError(
                f"{name} must be a fraction from 0 to 1, got {raw_value}",
                *_where(_SCAN, body, index),
            )

        if not labels:
            raise ParseError(f"{name} has no model_name label", *_where(_SCAN, body, index))
        info = cache.get(labels)
        if info is None:
            parsed = _parse_labels(labels)
            if isinstance(parsed, str):
                raise ParseError(parsed, *_where(_SCAN, body, index))
            info = parsed
        model = info[0]
        if model is None:
            raise ParseError(f"{name} has no model_name label", *_where(_SCAN, body, index))
        acc = models.get(model)
        if acc is None:
            if len(models) >= MAX_MODELS:
                raise ParseError(
                    f"too many models (more than {MAX_MODELS} model_name values)",
                    *_where(_SCAN, body, index),
                )
            acc = models[model] = [None] * _N_SLOTS

        if slot == _PER_POS:
            position = info[1]
            if (
                position is None
                or not position.isascii()
                or not position.isdigit()
                or int(position) >= MAX_POSITIONS
            ):
                raise ParseError(
                    f"{name} needs a position label 0..{MAX_POSITIONS - 1}",
                    *_where(_SCAN, body, index),
                )
            per_pos = positions.setdefault(model, {})
            at = int(position)
            per_pos[at] = total = per_pos.get(at, 0.0) + value
            if total > MAX_VALUE:
                raise ParseError(
                    f"{name} of model {model!r} sums to more than 2**53",
                    *_where(_SCAN, body, index),
                )
            continue

        if kind == _FRACTION:
            acc[_KV_USAGE_SERIES] = (acc[_KV_USAGE_SERIES] or 0.0) + 1.0
        previous = acc[slot]
        if previous is None:
            acc[slot] = value
        elif kind == _LEGACY_GAUGE:
            raise ParseError(
                f"{name} appears twice for model {model!r}", *_where(_SCAN, body, index)
            )
        else:
            acc[slot] = previous = previous + value
            # Each series passed, their sum over ranks does not (an estimate: when infinite).
            if previous > (MAX_VALUE if kind != _ESTIMATE else _LARGEST_FLOAT):
                bound = "2**53" if kind != _ESTIMATE else "the largest float"
                raise ParseError(
                    f"{name} of model {model!r} sums to more than {bound}",
                    *_where(_SCAN, body, index),
                )

    for model, _ in buckets:
        if model not in models:
            raise ParseError(f"model {model!r} has histogram buckets but no _sum and _count")
    out: dict[str, ModelSample] = {}
    for model, acc in models.items():
        hist = {h: histogram(acc[h[0]], acc[h[1]], name, model) for h, name in _HISTOGRAMS.items()}
        for i, h in enumerate(_BUCKETED):
            found = buckets.get((model, i))
            if found is not None:
                hist[h] = with_buckets(hist[h], found, _HISTOGRAMS[h], model)
        itl = hist[(_ITL_SUM, _ITL_COUNT)]
        if itl is None:  # V0 name of the same quantity
            itl = hist[(_V0_TPOT_SUM, _V0_TPOT_COUNT)]
        accepted = positions.get(model)
        usage, usage_series = acc[_KV_USAGE], acc[_KV_USAGE_SERIES]
        out[model] = ModelSample(
            generation_tokens=acc[_GEN] or 0.0,
            prompt_tokens=acc[_PROMPT] or 0.0,
            requests_finished=acc[_FINISHED] or 0.0,
            requests_running=acc[_RUNNING] or 0.0,
            requests_waiting=acc[_WAITING] or 0.0,
            drafts=acc[_DRAFTS],
            draft_tokens=acc[_DRAFT_TOKENS],
            accepted_tokens=acc[_ACCEPTED],
            accepted_per_position=(
                tuple(accepted.get(i, 0.0) for i in range(max(accepted) + 1)) if accepted else ()
            ),
            iteration_tokens=hist[(_ITER_SUM, _ITER_COUNT)],
            inter_token_latency=itl,
            time_per_output_token=hist[(_TPOT_SUM, _TPOT_COUNT)],
            time_to_first_token=hist[(_TTFT_SUM, _TTFT_COUNT)],
            e2e_request_latency=hist[(_E2E_SUM, _E2E_COUNT)],
            estimated_flops=acc[_FLOPS] or 0.0,
            estimated_read_bytes=acc[_READ_BYTES] or 0.0,
            preemptions=acc[_PREEMPTIONS] or 0.0,
            kv_cache_usage=usage / usage_series if usage is not None and usage_series else None,
            kv_cache_blocks=cache_config.blocks,
            kv_block_size=cache_config.block_size,
            kv_cache_bytes=cache_config.memory_bytes,
            legacy_acceptance_rate=acc[_LEGACY_RATE],
            legacy_efficiency=acc[_LEGACY_EFF],
        )
    return EngineSample(engine=ENGINE, models=out, process_start_time_seconds=process_start)


#: vLLM exposes every quantity spectax reads (V1; V0's counters over-counted: its gauges).
CAPABILITIES: Final = {
    "output_tokens": Capability("exact"),
    "prompt_tokens": Capability("exact"),
    "requests_finished": Capability("exact"),
    "draft_tokens": Capability("exact"),
    "acceptance_length": Capability("exact"),
    "per_position": Capability("exact"),
    "step_time": Capability("exact", "vllm:iteration_tokens_total, inter-token latency"),
    "time_per_output_token": Capability("exact"),
    "requests_running": Capability("exact"),
    "draft_overhead": Capability("absent", "vLLM does not time the drafter apart"),
    "restart": Capability("exact", "process_start_time_seconds"),
}
