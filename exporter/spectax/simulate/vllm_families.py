"""vLLM 0.32's own text for the simulated page: histogram families and the cache-config labels.

Data copied from the real server's page (tests/fixtures/vllm-0.32.0), kept apart from
the code that lays the page out (:mod:`spectax.simulate.vllm_page`).
"""

from __future__ import annotations

from spectax.simulate.sim_profiles import SimProfile

__all__ = ["HISTOGRAM_FAMILIES", "cache_config_labels"]

# (family name, HELP text, histogram key in the engine's state), in vLLM's page order.
HISTOGRAM_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "prompt"),
    ("vllm:request_generation_tokens", "Number of generation tokens processed.", "gen_tokens"),
    ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", "iteration"),
    (
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        "max_gen",
    ),
    ("vllm:request_params_n", "Histogram of the n request parameter.", "n"),
    (
        "vllm:request_params_max_tokens",
        "Histogram of the max_tokens request parameter.",
        "max_tokens",
    ),
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "ttft"),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "itl"),
    (
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        "tpot",
    ),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", "e2e"),
    (
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        "queue",
    ),
    (
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        "inference",
    ),
    (
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        "prefill",
    ),
    (
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        "decode",
    ),
    (
        "vllm:request_num_preemptions",
        "Histogram of the number of times a request was preempted.",
        "preempt",
    ),
    (
        "vllm:request_prefill_kv_computed_tokens",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        "kv_computed",
    ),
)


def cache_config_labels(p: SimProfile) -> dict[str, str]:
    """vllm:cache_config_info's labels, in vLLM's order, for this profile's cache."""
    blocks = p.kv_cache_tokens // p.block_size
    max_conc = p.kv_cache_tokens / p.max_model_len
    # fmt: off
    return {
        "_block_size_resolved": "True", "block_size": str(p.block_size),
        "cache_dtype": "auto", "cache_hit_alignment_tokens": "None",
        "effective_attention_block_size": str(p.block_size),
        "enable_mamba_shared_prefix_checkpoint": "False", "enable_prefix_caching": "True",
        "engine": p.engine, "gpu_memory_utilization": "0.9", "hash_block_size": "None",
        "is_attention_free": "False", "kv_cache_dtype_skip_layers": "[]",
        "kv_cache_layout": "None", "kv_cache_max_concurrency": repr(max_conc),
        "kv_cache_memory_bytes": str(p.kv_cache_tokens * 131072),
        "kv_cache_size_tokens": str(p.kv_cache_tokens),
        "kv_offloading_backend": "native", "kv_offloading_size": "None",
        "kv_sharing_fast_prefill": "False", "mamba_block_size": "None",
        "mamba_cache_dtype": "auto", "mamba_cache_mode": "none",
        "mamba_page_size_padded": "None", "mamba_ssm_cache_dtype": "float32",
        "num_cpu_blocks": "None", "num_gpu_blocks": str(blocks),
        "num_gpu_blocks_override": "None", "prefix_cache_retention_interval": "0",
        "prefix_caching_hash_algo": "sha256", "prefix_match_unit": "None",
        "replayssm_buffer_len": "16", "skip_page_size_padded": "None",
        "sliding_window": "None", "swa_bounded_replay": "True",
        "use_kda_recoverssm": "False", "use_replayssm": "False",
        "user_specified_block_size": "False",
    }
    # fmt: on
