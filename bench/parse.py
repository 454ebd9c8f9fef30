"""Benchmark: spectax's engine parsers vs prometheus_client's text parser.

For every fixture page of every engine (vLLM's and llama.cpp's recorded ones; SGLang,
TensorRT-LLM and TGI's written from their source, whose prometheus_client references are the
differential tests' own, tests/test_engine_<name>.py), time the engine's `parse` against
`prometheus_client.parser.text_string_to_metric_families` plus the summing
needed to get the same numbers, check that both give the same `EngineSample`,
and print a table.

    PYTHONPATH=exporter python bench/parse.py [--repeat 7] [--min-time 0.2]

Each timing is the best of `--repeat` rounds; a round runs the parser enough
times to last about `--min-time` seconds (timeit's auto-range) and reports the
mean per call. The overall ratio is total reference time over total spectax
time across all pages (each page once).
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import timeit
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from spectax.engines.base import EngineSample, Histogram, ModelSample
from spectax.engines.vllm import parse

TESTS = Path(__file__).resolve().parent.parent / "tests"
FIXTURES = TESTS / "fixtures" / "vllm-0.32.0"

_PLAIN = {
    "vllm:generation_tokens_total": "generation_tokens",
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:request_success_total": "requests_finished",
    "vllm:num_requests_running": "requests_running",
    "vllm:num_requests_waiting": "requests_waiting",
    "vllm:spec_decode_num_drafts_total": "drafts",
    "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens_total": "accepted_tokens",
    "vllm:spec_decode_draft_acceptance_rate": "legacy_acceptance_rate",
    "vllm:spec_decode_efficiency": "legacy_efficiency",
    "vllm:iteration_tokens_total_sum": "iteration_sum",
    "vllm:iteration_tokens_total_count": "iteration_count",
    "vllm:inter_token_latency_seconds_sum": "itl_sum",
    "vllm:inter_token_latency_seconds_count": "itl_count",
    "vllm:time_per_output_token_seconds_sum": "v0_itl_sum",
    "vllm:time_per_output_token_seconds_count": "v0_itl_count",
    "vllm:request_time_per_output_token_seconds_sum": "tpot_sum",
    "vllm:request_time_per_output_token_seconds_count": "tpot_count",
    "vllm:time_to_first_token_seconds_sum": "ttft_sum",
    "vllm:time_to_first_token_seconds_count": "ttft_count",
    "vllm:e2e_request_latency_seconds_sum": "e2e_sum",
    "vllm:e2e_request_latency_seconds_count": "e2e_count",
    "vllm:estimated_flops_per_gpu_total": "estimated_flops",
    "vllm:estimated_read_bytes_per_gpu_total": "estimated_read_bytes",
    "vllm:num_preemptions_total": "preemptions",
}
_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
#: The latency histograms whose buckets spectax reads, by the key of their _sum/_count.
_BUCKETS = {
    "vllm:inter_token_latency_seconds_bucket": "itl",
    "vllm:request_time_per_output_token_seconds_bucket": "tpot",
    "vllm:time_to_first_token_seconds_bucket": "ttft",
    "vllm:e2e_request_latency_seconds_bucket": "e2e",
}


def reference(text: str) -> EngineSample:
    """The same result computed with prometheus_client's parser (what spectax replaces)."""
    fields: dict[str, dict[str, float]] = {}
    per_pos: dict[str, dict[int, float]] = {}
    buckets: dict[tuple[str, str], dict[float, float]] = {}
    start: float | None = None
    cache: dict[str, float] = {}  # the KV cache's settings, summed over ranks
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "process_start_time_seconds":
                start = float(s.value)
            elif s.name == "vllm:cache_config_info":
                for key in ("num_gpu_blocks", "kv_cache_memory_bytes"):
                    if s.labels[key] != "None":
                        cache[key] = cache.get(key, 0.0) + float(s.labels[key])
                cache["block_size"] = float(s.labels["block_size"])
            elif s.name == "vllm:kv_cache_usage_perc":
                v = fields.setdefault(s.labels["model_name"], {})
                v["kv_usage"] = v.get("kv_usage", 0.0) + float(s.value)
                v["kv_series"] = v.get("kv_series", 0.0) + 1
            elif s.name in _PLAIN:
                v = fields.setdefault(s.labels["model_name"], {})
                key = _PLAIN[s.name]
                v[key] = v.get(key, 0.0) + float(s.value)
            elif s.name in _BUCKETS:
                per_le = buckets.setdefault((s.labels["model_name"], _BUCKETS[s.name]), {})
                le = float(s.labels["le"])
                per_le[le] = per_le.get(le, 0.0) + float(s.value)
            elif s.name == _PER_POS:
                model = s.labels["model_name"]
                fields.setdefault(model, {})
                pos = per_pos.setdefault(model, {})
                i = int(s.labels["position"])
                pos[i] = pos.get(i, 0.0) + float(s.value)

    def hist(v: dict[str, float], name: str) -> Histogram | None:
        if f"{name}_sum" not in v:
            return None
        per_le = buckets.get((model, name), {})
        return Histogram(v[f"{name}_sum"], v[f"{name}_count"], tuple(sorted(per_le.items())))

    models = {}
    for model, v in fields.items():
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
            iteration_tokens=hist(v, "iteration"),
            inter_token_latency=hist(v, "itl") or hist(v, "v0_itl"),
            time_per_output_token=hist(v, "tpot"),
            time_to_first_token=hist(v, "ttft"),
            e2e_request_latency=hist(v, "e2e"),
            estimated_flops=v.get("estimated_flops", 0.0),
            estimated_read_bytes=v.get("estimated_read_bytes", 0.0),
            preemptions=v.get("preemptions", 0.0),
            kv_cache_usage=v["kv_usage"] / v["kv_series"] if "kv_usage" in v else None,
            kv_cache_blocks=cache.get("num_gpu_blocks"),
            kv_block_size=cache.get("block_size"),
            kv_cache_bytes=cache.get("kv_cache_memory_bytes"),
            legacy_acceptance_rate=v.get("legacy_acceptance_rate"),
            legacy_efficiency=v.get("legacy_efficiency"),
        )
    return EngineSample(engine="vllm", models=models, process_start_time_seconds=start)


def best_seconds(fn: Callable[[], Any], repeat: int, min_time: float) -> float:
    """Best-of-`repeat` mean seconds per call, each round lasting about `min_time`."""
    timer = timeit.Timer(fn)
    number, elapsed = 1, timer.timeit(1)
    while elapsed < min_time:  # like timeit's autorange, with a configurable duration
        number = max(number * 2, math.ceil(number * min_time / max(elapsed, 1e-9)))
        elapsed = timer.timeit(number)
    return min(timer.repeat(repeat=repeat, number=number)) / number


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--repeat", type=int, default=7, help="rounds per measurement (best kept)")
    ap.add_argument("--min-time", type=float, default=0.2, help="seconds per round")
    args = ap.parse_args(argv)

    print(f"machine: {platform.platform()}; {cpu_model()}")
    print(f"python:  {platform.python_implementation()} {sys.version.split()[0]}")
    print(f"timing:  best of {args.repeat} rounds of ~{args.min_time}s each, mean per call")
    mismatches = 0
    for name, directory, ours, ref in engine_sets():
        mismatches += bench_engine(name, directory, ours, ref, args.repeat, args.min_time)
    if mismatches:
        print(f"\n{mismatches} page(s) where the numbers disagree", file=sys.stderr)
        return 1
    print("\nall pages: same numbers from both parsers")
    return 0


Parser = Callable[[str], EngineSample]


def engine_sets() -> list[tuple[str, Path, Parser, Parser]]:
    """(engine, fixture directory, spectax's parser, the prometheus_client reference)."""
    sys.path.insert(0, str(TESTS))  # the differential tests' references
    from spectax.engines import llamacpp, sglang, tgi, trtllm
    from test_engine_llamacpp import reference as llamacpp_reference
    from test_engine_sglang import reference as sglang_reference
    from test_engine_tgi import reference as tgi_reference
    from test_engine_trtllm import reference as trtllm_reference

    fixtures = TESTS / "fixtures"
    return [
        ("vllm", FIXTURES, parse, reference),
        ("sglang", fixtures / "sglang-0.5.23", sglang.parse, sglang_reference),
        ("trtllm", fixtures / "trtllm-050f80d", trtllm.parse, trtllm_reference),
        ("tgi", fixtures / "tgi-3.3.6", tgi.parse, tgi_reference),
        ("llamacpp", fixtures / "llamacpp-11434.0.0", llamacpp.parse, llamacpp_reference),
    ]


def bench_engine(
    name: str, directory: Path, ours_parse: Parser, ref_parse: Parser, repeat: int, min_time: float
) -> int:
    """Print one engine's table; the number of pages where the two parsers disagree."""
    pages = sorted(
        p for p in directory.glob("*.txt") if p.name != "INDEX.txt" and "headers" not in p.name
    )
    header = f"{'page':42} {'bytes':>7} {'spectax µs':>11} {'prom_client µs':>15} {'ratio':>7}"
    print(f"\n{name} ({directory.name})")
    print(header)
    print("-" * len(header))
    total_ours = total_ref = 0.0
    mismatches = 0
    for path in pages:
        text = path.read_text(encoding="utf-8")
        ok = ours_parse(text) == ref_parse(text)
        mismatches += not ok
        ours = best_seconds(partial(ours_parse, text), repeat, min_time)
        ref = best_seconds(partial(ref_parse, text), repeat, min_time)
        total_ours += ours
        total_ref += ref
        flag = "" if ok else "  MISMATCH"
        print(
            f"{path.name:42} {len(text.encode()):7d} {ours * 1e6:11.1f} {ref * 1e6:15.1f}"
            f" {ref / ours:6.0f}x{flag}"
        )
    print("-" * len(header))
    print(
        f"{'all pages (sum of per-page times)':42} {'':7} {total_ours * 1e6:11.1f}"
        f" {total_ref * 1e6:15.1f} {total_ref / total_ours:6.0f}x"
    )
    return mismatches


if __name__ == "__main__":
    sys.exit(main())
