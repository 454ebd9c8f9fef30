"""The references spectax's engine parsers are held to: each engine's page read with
prometheus_client's own text parser, and summed as the engine's parser documents
(`text_string_to_metric_families`, then plain Python over its samples).

One module for both users: the differential tests (tests/test_engine_<name>.py) assert that
each parser gives exactly what its reference gives, and bench/parse.py times each parser
against its reference (after checking they agree), so the figure the bench reports is
against the same code the tests trust. `REFERENCES` maps an engine's name to its reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from spectax.engines.base import EngineSample, Histogram, ModelSample
from spectax.engines.llamacpp import MODEL_NAME
from spectax.engines.tgi import MODEL

# ---------------------------------------------------------------------------
# Independent reference: prometheus_client's parser + summing.
# prometheus_client strips `_total` from counter *family* names; samples keep
# their full exposed names, so everything below is keyed on sample names.

_VLLM_PLAIN = {  # sample name -> (ModelSample field, family type prometheus_client reports)
    "vllm:generation_tokens_total": ("generation_tokens", "counter"),
    "vllm:prompt_tokens_total": ("prompt_tokens", "counter"),
    "vllm:request_success_total": ("requests_finished", "counter"),
    "vllm:num_requests_running": ("requests_running", "gauge"),
    "vllm:num_requests_waiting": ("requests_waiting", "gauge"),
    "vllm:spec_decode_num_drafts_total": ("drafts", "counter"),
    "vllm:spec_decode_num_draft_tokens_total": ("draft_tokens", "counter"),
    "vllm:spec_decode_num_accepted_tokens_total": ("accepted_tokens", "counter"),
    "vllm:spec_decode_draft_acceptance_rate": ("legacy_acceptance_rate", "gauge"),
    "vllm:spec_decode_efficiency": ("legacy_efficiency", "gauge"),
    "vllm:estimated_flops_per_gpu_total": ("estimated_flops", "counter"),
    "vllm:estimated_read_bytes_per_gpu_total": ("estimated_read_bytes", "counter"),
    "vllm:num_preemptions_total": ("preemptions", "counter"),
    "vllm:kv_cache_usage_perc": ("kv_usage_sum", "gauge"),  # averaged over ranks below
    "vllm:gpu_cache_usage_perc": ("kv_usage_sum", "gauge"),  # its name until 0.11
}
_VLLM_CACHE_INFO = {  # cache_config_info label -> field, summed over ranks (block size: shared)
    "num_gpu_blocks": "kv_cache_blocks",
    "kv_cache_memory_bytes": "kv_cache_bytes",
    "block_size": "kv_block_size",
}
_VLLM_HIST = {  # histogram family -> ModelSample field
    "vllm:iteration_tokens_total": "iteration_tokens",
    "vllm:inter_token_latency_seconds": "inter_token_latency",
    "vllm:request_time_per_output_token_seconds": "time_per_output_token",
    "vllm:time_per_output_token_seconds": "v0_time_per_output_token",
    "vllm:time_to_first_token_seconds": "time_to_first_token",
    "vllm:e2e_request_latency_seconds": "e2e_request_latency",
    "vllm:request_prefill_time_seconds": "prefill_time",  # its _sum alone is read
}
#: The histograms whose buckets spectax reads (quantiles); the others' buckets are skipped.
_VLLM_BUCKETED = {
    "inter_token_latency",
    "time_per_output_token",
    "time_to_first_token",
    "e2e_request_latency",
}
_VLLM_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def vllm_reference(text: str) -> EngineSample:
    """What parse() must return, computed with prometheus_client's text parser."""
    fields: dict[str, dict[str, Any]] = {}
    per_pos: dict[str, dict[int, float]] = {}
    buckets: dict[tuple[str, str], dict[float, float]] = {}
    start: float | None = None
    cache: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "process_start_time_seconds":
                start = float(s.value)
                continue
            if s.name == "vllm:cache_config_info":
                for label, name in _VLLM_CACHE_INFO.items():
                    if s.labels[label] != "None":
                        summed = 0.0 if label == "block_size" else cache.get(name, 0.0)
                        cache[name] = summed + float(s.labels[label])
                continue
            if not s.name.startswith("vllm:"):
                continue
            model = s.labels.get("model_name")
            if s.name in _VLLM_PLAIN:
                field, typ = _VLLM_PLAIN[s.name]
                assert family.type == typ, (s.name, family.type)
            elif s.name == _VLLM_PER_POS:
                assert family.type == "counter"
                assert model is not None
                pos = per_pos.setdefault(model, {})
                i = int(s.labels["position"])
                pos[i] = pos.get(i, 0.0) + float(s.value)
                fields.setdefault(model, {})
                continue
            else:
                base, _, suffix = s.name.rpartition("_")
                if base in _VLLM_HIST and suffix == "bucket" and _VLLM_HIST[base] in _VLLM_BUCKETED:
                    assert model is not None, s
                    per_le = buckets.setdefault((model, _VLLM_HIST[base]), {})
                    le = float(s.labels["le"])
                    per_le[le] = per_le.get(le, 0.0) + float(s.value)
                    continue
                if base not in _VLLM_HIST or suffix not in ("sum", "count"):
                    continue
                assert family.type == "histogram", (s.name, family.type)
                field = f"{_VLLM_HIST[base]}_{suffix}"
            assert model is not None, s
            values = fields.setdefault(model, {})
            values[field] = values.get(field, 0.0) + float(s.value)
            if field == "kv_usage_sum":
                values["kv_usage_series"] = values.get("kv_usage_series", 0) + 1
    models = {}
    for model, v in fields.items():

        def hist(name: str, v: dict[str, Any] = v, model: str = model) -> Histogram | None:
            if f"{name}_sum" not in v:
                return None
            per_le = sorted(buckets.get((model, name), {}).items())
            return Histogram(v[f"{name}_sum"], v[f"{name}_count"], tuple(per_le))

        pos = per_pos.get(model, {})
        models[model] = ModelSample(
            generation_tokens=v.get("generation_tokens", 0.0),
            prompt_tokens=v.get("prompt_tokens", 0.0),
            requests_finished=v.get("requests_finished", 0.0),
            requests_running=v.get("requests_running", 0.0),
            requests_waiting=v.get("requests_waiting", 0.0),
            drafts=v.get("drafts"),
            draft_tokens=v.get("draft_tokens"),
            accepted_tokens=v.get("accepted_tokens"),
            accepted_per_position=tuple(pos.get(i, 0.0) for i in range(max(pos, default=-1) + 1)),
            iteration_tokens=hist("iteration_tokens"),
            inter_token_latency=hist("inter_token_latency") or hist("v0_time_per_output_token"),
            time_per_output_token=hist("time_per_output_token"),
            time_to_first_token=hist("time_to_first_token"),
            e2e_request_latency=hist("e2e_request_latency"),
            estimated_flops=v.get("estimated_flops", 0.0),
            estimated_read_bytes=v.get("estimated_read_bytes", 0.0),
            preemptions=v.get("preemptions", 0.0),
            kv_cache_usage=(
                v["kv_usage_sum"] / v["kv_usage_series"] if "kv_usage_sum" in v else None
            ),
            kv_cache_blocks=cache.get("kv_cache_blocks"),
            kv_block_size=cache.get("kv_block_size"),
            kv_cache_bytes=cache.get("kv_cache_bytes"),
            legacy_acceptance_rate=v.get("legacy_acceptance_rate"),
            legacy_efficiency=v.get("legacy_efficiency"),
            prefill_seconds=v.get("prefill_time_sum"),
        )
    return EngineSample(engine="vllm", models=models, process_start_time_seconds=start)


# ---------------------------------------------------------------------------


def sglang_reference(text: str) -> EngineSample:
    """What parse() must give, from prometheus_client's parser: counters summed over every
    label, scheduler gauges from the lowest shard rank of each dp_rank, summed over dp."""
    counters = {
        "sglang:generation_tokens_total": "gen",
        "sglang:prompt_tokens_total": "prompt",
        "sglang:num_requests_total": "finished",
        "sglang:spec_verify_calls_total": "verify",
        "sglang:request_time_per_output_token_seconds_sum": "tpot_sum",
        "sglang:request_time_per_output_token_seconds_count": "tpot_count",
    }
    gauges = {"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:spec_num_draft_tokens"}
    sums: dict[str, dict[str, float]] = {}
    shards: dict[tuple[str, str, str], tuple[tuple[int, int, int], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in counters:
                assert family.type in ("counter", "histogram")
                v = sums.setdefault(s.labels["model_name"], {})
                v[counters[s.name]] = v.get(counters[s.name], 0.0) + s.value
            elif s.name in gauges and not s.labels.get("priority"):
                assert family.type == "gauge"
                sums.setdefault(s.labels["model_name"], {})
                rank = tuple(
                    int(s.labels.get(k, "0")) for k in ("pp_rank", "moe_ep_rank", "tp_rank")
                )
                key = (s.labels["model_name"], s.labels.get("dp_rank", ""), s.name)
                if key not in shards or rank < shards[key][0]:
                    shards[key] = (rank, s.value)  # type: ignore[assignment]
    models = {}
    for model, v in sums.items():

        def gauge(name: str, model: str = model) -> float:
            return sum(val for (m, _, n), (_, val) in shards.items() if m == model and n == name)

        spec = gauge("sglang:spec_num_draft_tokens") > 0
        drafts = v.get("verify", 0.0 if spec else None)
        gen, finished = v.get("gen", 0.0), v.get("finished", 0.0)
        models[model] = ModelSample(
            generation_tokens=gen,
            prompt_tokens=v.get("prompt", 0.0),
            requests_finished=finished,
            drafts=drafts,
            accepted_tokens=None if drafts is None else gen - finished - drafts,
            time_per_output_token=(
                Histogram(v["tpot_sum"], v["tpot_count"]) if "tpot_sum" in v else None
            ),
            requests_running=gauge("sglang:num_running_reqs"),
            requests_waiting=gauge("sglang:num_queue_reqs"),
        )
    return EngineSample(engine="sglang", models=models)


# ---------------------------------------------------------------------------


def trtllm_reference(text: str) -> EngineSample:
    """What parse() must give, from prometheus_client's parser (sums per model_name)."""
    plain = {
        "trtllm_generation_tokens_total": "gen",
        "trtllm_prompt_tokens_total": "prompt",
        "trtllm_request_success_total": "finished",
        "trtllm_spec_decode_num_draft_tokens_total": "draft_tokens",
        "trtllm_spec_decode_num_accepted_tokens_total": "accepted",
        "trtllm_time_per_output_token_seconds_sum": "tpot_sum",
        "trtllm_time_per_output_token_seconds_count": "tpot_count",
        "trtllm_num_requests_running": "running",
        "trtllm_num_requests_waiting": "waiting",
        "trtllm_spec_decode_draft_overhead": "overhead",
        "trtllm_speculative_config_info": "info",
    }
    sums: dict[str, dict[str, float]] = {}
    pos: dict[str, dict[str, dict[int, float]]] = {}
    start = None
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "process_start_time_seconds":
                start = s.value
            elif s.name in plain:
                v = sums.setdefault(s.labels["model_name"], {})
                v[plain[s.name]] = v.get(plain[s.name], 0.0) + s.value
            elif s.name in (
                "trtllm_spec_decode_drafted_tokens_total",
                "trtllm_spec_decode_accepted_tokens_total",
            ):
                assert family.type == "counter"
                per = pos.setdefault(s.labels["model_name"], {}).setdefault(s.name, {})
                i = int(s.labels["token_position"])
                per[i] = per.get(i, 0.0) + s.value
    models = {}
    for model, v in sums.items():
        drafted = pos.get(model, {}).get("trtllm_spec_decode_drafted_tokens_total", {})
        accepted = pos.get(model, {}).get("trtllm_spec_decode_accepted_tokens_total", {})
        spec = "info" in v or "draft_tokens" in v
        zero = 0.0 if spec else None
        dt = v.get("draft_tokens", zero)
        models[model] = ModelSample(
            generation_tokens=v.get("gen", 0.0),
            prompt_tokens=v.get("prompt", 0.0),
            requests_finished=v.get("finished", 0.0),
            drafts=drafted[0] if drafted else (zero if not dt else None),
            draft_tokens=dt,
            accepted_tokens=v.get("accepted", zero),
            accepted_per_position=tuple(accepted.get(i, 0.0) for i in range(len(drafted))),
            time_per_output_token=(
                Histogram(v["tpot_sum"], v["tpot_count"]) if "tpot_sum" in v else None
            ),
            requests_running=v.get("running", 0.0),
            requests_waiting=v.get("waiting", 0.0),
            draft_overhead=v.get("overhead"),
        )
    return EngineSample(engine="trtllm", models=models, process_start_time_seconds=start)


# ---------------------------------------------------------------------------


def tgi_reference(text: str) -> EngineSample:
    """What parse() must give, from prometheus_client's parser."""
    v: dict[str, float] = {}
    top = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "tgi_request_skipped_tokens_bucket" and s.labels["le"] != "+Inf":
                top = max(top, float(s.labels["le"]))
            elif s.name.startswith("tgi_") and not s.labels:
                v[s.name] = s.value
    if not v:
        return EngineSample(engine="tgi")
    finished = v.get("tgi_request_success_total", v.get("tgi_request_success", 0.0))
    spec = top >= 1 or v.get("tgi_request_skipped_tokens_sum", 0.0) > 0
    return EngineSample(
        engine="tgi",
        models={
            MODEL: ModelSample(
                generation_tokens=v.get("tgi_request_generated_tokens_sum", 0.0),
                prompt_tokens=v.get("tgi_request_input_length_sum", 0.0),
                requests_finished=finished,
                drafts=v["tgi_request_skipped_tokens_count"] - finished if spec else None,
                accepted_tokens=v["tgi_request_skipped_tokens_sum"] if spec else None,
                time_per_output_token=(
                    Histogram(
                        v["tgi_request_mean_time_per_token_duration_sum"],
                        v["tgi_request_mean_time_per_token_duration_count"],
                    )
                    if "tgi_request_mean_time_per_token_duration_sum" in v
                    else None
                ),
                requests_running=v["tgi_batch_current_size"],
                requests_waiting=v["tgi_queue_size"],
            )
        },
    )


# ---------------------------------------------------------------------------
# Independent reference: prometheus_client's parser and the module's documented rules.

_LLAMACPP_FIELDS = {
    "llamacpp:tokens_predicted_total": ("generation_tokens", "counter"),
    "llamacpp:prompt_tokens_total": ("prompt_tokens", "counter"),
    "llamacpp:requests_processing": ("requests_running", "gauge"),
    "llamacpp:requests_deferred": ("requests_waiting", "gauge"),
    "llamacpp:spec_decode_num_drafts_total": ("drafts", "counter"),
    "llamacpp:spec_decode_num_draft_tokens_total": ("draft_tokens", "counter"),
    "llamacpp:spec_decode_num_accepted_tokens_total": ("accepted_tokens", "counter"),
}
_LLAMACPP_PER_POS = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
_LLAMACPP_SPEC = ("drafts", "draft_tokens", "accepted_tokens")


def llamacpp_reference(text: str) -> EngineSample:
    values: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in _LLAMACPP_FIELDS:
                name, typ = _LLAMACPP_FIELDS[s.name]
                assert family.type == typ, (s.name, family.type)
                values[name] = values.get(name, 0.0) + s.value
            elif s.name == _LLAMACPP_PER_POS:
                assert family.type == "counter"
                per_pos[int(s.labels["position"])] = s.value
    if not values and not per_pos:
        return EngineSample(engine="llamacpp")
    # "No speculation seen": all three spec counters 0 and no per-position family.
    speculating = bool(per_pos) or any(values.get(k) for k in _LLAMACPP_SPEC)
    spec = {k: values.pop(k, 0.0) if speculating else None for k in _LLAMACPP_SPEC}
    for k in _LLAMACPP_SPEC:
        values.pop(k, None)
    positions = tuple(per_pos.get(i, 0.0) for i in range(max(per_pos, default=-1) + 1))
    sample = ModelSample(**values, **spec, accepted_per_position=positions)  # type: ignore[arg-type]
    return EngineSample(engine="llamacpp", models={MODEL_NAME: sample})


#: Engine name -> its reference.
REFERENCES: dict[str, Callable[[str], EngineSample]] = {
    "vllm": vllm_reference,
    "sglang": sglang_reference,
    "trtllm": trtllm_reference,
    "tgi": tgi_reference,
    "llamacpp": llamacpp_reference,
}
