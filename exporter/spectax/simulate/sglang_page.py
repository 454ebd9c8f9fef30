"""The /metrics page of a simulated SGLang 0.5.23 server, from the same state as vLLM's page.

The shape is the fixtures' (tests/fixtures/sglang-0.5.23: prometheus multiprocess mode, so
no ``*_created`` and no ``process_*`` families, labels in sorted order): the tokenizer's
counters and histograms labelled ``engine_type``, ``is_streaming``, ``model_name``, the
one scheduler's gauges with its ranks. What SGLang lacks, the page lacks: no drafted-token
counter, no per-position counts, no step time. The verify calls are the state's drafts.

One simplification: SGLang's tokenizer counts a request's tokens and verify calls when
it finishes; the simulator counts them as they happen (it keeps no per-request verify
count). Over a window the two differ by the requests in flight.
"""

from __future__ import annotations

from spectax.simulate.pagetext import finished, labels, number, rebucket, split_streaming
from spectax.simulate.state import EngineState, Histogram

__all__ = ["SglangPage"]

# fmt: off
_LATENCY_BUCKETS = [0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04,
                    0.06, 0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0]
_TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0,
                 80.0, 100.0, 200.0, 400.0]
_E2E_BUCKETS = [*_TTFT_BUCKETS, 600.0, 1200.0, 1800.0, 2400.0]
_TOKEN_BUCKETS = [100.0, 300.0, 500.0, 700.0, 1000.0, 1500.0, 2000.0, 3000.0, 4000.0, 5000.0,
                  6000.0, 7000.0, 8000.0, 9000.0, 10000.0, 12500.0, 15000.0, 17500.0, 20000.0,
                  22500.0, 25000.0, 27500.0, 30000.0, 35000.0, 40000.0, 60000.0, 80000.0,
                  100000.0, 200000.0, 300000.0, 400000.0, 600000.0, 800000.0, 1000000.0]
# fmt: on

_COUNTERS = (  # (family, HELP, split by is_streaming)
    ("sglang:prompt_tokens_total", "Number of prefill tokens processed.", True),
    ("sglang:generation_tokens_total", "Number of generation tokens processed.", True),
    ("sglang:spec_verify_calls_total", "Number of speculative decoding verification calls.", False),
    ("sglang:num_requests_total", "Number of requests processed.", True),
)
_HISTOGRAMS = (  # (family, HELP, state histogram, buckets, split by is_streaming)
    (
        "sglang:request_time_per_output_token_seconds",
        "Per-request TPOT in seconds: (finished_time - first_token_time) / "
        "(completion_tokens - 1).",
        "tpot",
        _LATENCY_BUCKETS,
        True,
    ),
    (
        "sglang:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        "itl",
        _LATENCY_BUCKETS,
        False,
    ),
    (
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        "ttft",
        _TTFT_BUCKETS,
        True,
    ),
    (
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
        "e2e",
        _E2E_BUCKETS,
        True,
    ),
    ("sglang:prompt_tokens_histogram", "Histogram of prompt token length.", "prompt",
     _TOKEN_BUCKETS, False),
    ("sglang:generation_tokens_histogram", "Histogram of generation token length.", "gen_tokens",
     _TOKEN_BUCKETS, False),
)  # fmt: skip
_UNREAD_GAUGES = (  # declared by the scheduler's collector, 0 on the simulated page
    "num_grammar_queue_reqs",
    "gen_throughput",
    "cache_hit_rate",
    "decode_sum_seq_lens",
    "full_token_usage",
    "swa_token_usage",
    "mamba_usage",
    "num_used_tokens",
    "kv_available_tokens",
    "kv_evictable_tokens",
    "kv_used_tokens",
    "swa_available_tokens",
    "swa_evictable_tokens",
    "swa_used_tokens",
    "mamba_available_tokens",
    "mamba_evictable_tokens",
    "mamba_used_tokens",
    "spec_cap_length",
    "spec_block_accept_length",
    "num_retracted_reqs",
    "num_paused_reqs",
    "utilization",
    "new_token_ratio",
    "max_total_num_tokens",
    "page_size",
    "context_len",
)
_GAUGES = (  # (family, HELP); the first seven carry values, settings below, the rest 0
    ("sglang:num_running_reqs", "The number of running requests."),
    ("sglang:num_queue_reqs", "The number of requests in the waiting queue."),
    ("sglang:spec_accept_length", "The average acceptance length of speculative decoding."),
    (
        "sglang:spec_accept_rate",
        "The average acceptance rate of speculative decoding (`accepted tokens / total draft "
        "tokens` in batch).",
    ),
    ("sglang:spec_num_steps", "Number of speculative decoding steps."),
    ("sglang:spec_num_draft_tokens", "Number of draft tokens per speculative decoding step."),
    ("sglang:token_usage", "The token usage."),
    *((f"sglang:{n}", f"{n.replace('_', ' ')}.") for n in _UNREAD_GAUGES),
)


class SglangPage:
    """One SGLang server's page; build a new one when the engine restarts."""

    content_type = "text/plain; version=0.0.4; charset=utf-8"

    def __init__(self, state: EngineState) -> None:
        self.state = state
        self._model = state.profile.model_name

    def render(self) -> str:
        s = self.state
        c = s.counters
        spec = s.speculative_tokens > 0
        out: list[str] = []
        w = out.append
        counter_values = (c.prompt_tokens, c.generation_tokens, c.drafts, finished(s))
        for (name, help_, split), value in zip(_COUNTERS, counter_values, strict=True):
            w(f"# HELP {name} {help_}\n# TYPE {name} counter\n")
            if name == "sglang:spec_verify_calls_total" and not spec:
                continue  # never incremented without a speculative algorithm: no series
            if value:  # prometheus_client creates a labelled series on its first use
                w(self._series(name, value, split))
        for name, help_, key, bounds, split in _HISTOGRAMS:
            w(f"# HELP {name} {help_}\n# TYPE {name} histogram\n")
            hist = s.hists[key]
            if hist.count:
                w(self._histogram(name, hist, bounds, split))
        k = s.speculative_tokens
        accept_length = 1.0 + c.accepted / c.drafts if c.drafts else 0.0
        accept_rate = c.accepted / c.draft_tokens if c.draft_tokens else 0.0
        p = s.profile
        gauges = (
            round(s.gauge_running),
            round(s.gauge_waiting),
            round(accept_length, 2),
            round(accept_rate, 2),
            k,
            k + 1 if spec else 0,
            round(s.gauge_kv, 4),
        )
        ranks = labels(
            engine_type="unified", model_name=self._model, moe_ep_rank="0", pp_rank="0", tp_rank="0"
        )
        settings = {"sglang:max_total_num_tokens": p.kv_cache_tokens, "sglang:page_size": 1,
                    "sglang:context_len": p.max_model_len}  # fmt: skip
        for i, (name, help_) in enumerate(_GAUGES):
            shown: float = gauges[i] if i < len(gauges) else settings.get(name, 0)
            w(f"# HELP {name} {help_}\n# TYPE {name} gauge\n{name}{ranks} {number(float(shown))}\n")
        return "".join(out)

    def _series(self, name: str, value: float, split: bool) -> str:
        if not split:
            return (
                f"{name}{labels(engine_type='unified', model_name=self._model)} {number(value)}\n"
            )
        return "".join(
            f"{name}{labels(engine_type='unified', is_streaming=flag, model_name=self._model)} "
            f"{number(part)}\n"
            for flag, part in zip(("true", "false"), split_streaming(value), strict=True)
        )

    def _histogram(self, name: str, hist: Histogram, bounds: list[float], split: bool) -> str:
        cums = rebucket(hist, bounds)
        les = [*map(number, bounds), "+Inf"]
        shares = list(zip(*map(split_streaming, cums), strict=True)) if split else [cums]
        sums = split_streaming(hist.sum) if split else (hist.sum,)
        flags = ("true", "false") if split else (None,)
        lines = []
        for flag, part, total in zip(flags, shares, sums, strict=True):
            stream = {} if flag is None else {"is_streaming": flag}
            for le, v in zip(les, part, strict=True):
                lab = labels(engine_type="unified", **stream, le=le, model_name=self._model)
                lines.append(f"{name}_bucket{lab} {number(v)}\n")
            lab = labels(engine_type="unified", **stream, model_name=self._model)
            lines.append(f"{name}_count{lab} {number(part[-1])}\n")
            lines.append(f"{name}_sum{lab} {number(total)}\n")
        return "".join(lines)
