"""The /prometheus/metrics page of a simulated `trtllm-serve`, from the same state as vLLM's.

The shape is the fixtures' (tests/fixtures/trtllm-050f80d: prometheus_client's default
layout, ``*_created`` series and ``process_*`` families, labels ``engine_type`` and
``model_name``). TensorRT-LLM counts drafted and accepted tokens, and per position
(drafted at every position once per draft, so position 0's is the state's drafts), and it
times the drafter: ``trtllm_spec_decode_draft_overhead`` is the physics' draft time over
step time at the current batch (:func:`~spectax.simulate.pagetext.step_times`). Labelled
series appear on their first use, as prometheus_client creates them.
"""

from __future__ import annotations

from collections.abc import Sequence

from spectax.simulate.pagetext import finished, labels, number, rebucket, step_times
from spectax.simulate.state import EngineState
from spectax.simulate.textformat import format_value

__all__ = ["TrtllmPage"]

# fmt: off
_TPOT_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                 7.5, 10.0, 20.0, 40.0, 80.0]
_REQUEST_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
_TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
_PREFILL_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0,
                    40.0, 80.0, 160.0, 640.0, 2560.0]
# fmt: on
_HISTOGRAMS = (  # (family, HELP, state histogram, buckets)
    (
        "time_per_output_token_seconds",
        "Histogram of time per output token in seconds.",
        "tpot",
        _TPOT_BUCKETS,
    ),
    (
        "e2e_request_latency_seconds",
        "Histogram of end to end request latency in seconds.",
        "e2e",
        _REQUEST_BUCKETS,
    ),
    (
        "time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        "ttft",
        _TTFT_BUCKETS,
    ),
    (
        "request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        "queue",
        _REQUEST_BUCKETS,
    ),
    (
        "request_prefill_time_seconds",
        "Histogram of prefill (context) phase duration in seconds "
        "(first_token_time - first_scheduled_time).",
        "prefill",
        _PREFILL_BUCKETS,
    ),
    (
        "request_decode_time_seconds",
        "Histogram of decode (generation) phase duration in seconds "
        "(last_token_time - first_token_time).",
        "decode",
        _REQUEST_BUCKETS,
    ),
    (
        "request_inference_time_seconds",
        "Histogram of total inference duration in seconds "
        "(last_token_time - first_scheduled_time).",
        "inference",
        _REQUEST_BUCKETS,
    ),
)  # fmt: skip
_ITERATION_GAUGES = (  # iteration stats spectax does not read; kv_cache_utilization has a value
    ("kv_cache_hit_rate", "KV cache hit rate"),
    ("kv_cache_utilization", "KV cache utilization"),
    ("max_num_active_requests", "Maximum number of active requests"),
    ("gpu_memory_usage_bytes", "GPU memory usage in bytes"),
    ("cpu_memory_usage_bytes", "CPU memory usage in bytes"),
    ("pinned_memory_usage_bytes", "Pinned memory usage in bytes"),
    ("max_batch_size_static", "Static maximum batch size"),
    ("max_batch_size_runtime", "Runtime maximum batch size"),
    ("max_num_tokens_runtime", "Runtime maximum number of tokens"),
    ("kv_cache_max_blocks", "Maximum number of KV cache blocks"),
    ("kv_cache_free_blocks", "Number of free KV cache blocks"),
    ("kv_cache_used_blocks", "Number of used KV cache blocks"),
    ("kv_cache_tokens_per_block", "Number of tokens per KV cache block"),
    ("num_context_requests", "Number of context (prefill) requests"),
    ("num_generation_requests", "Number of generation (decode) requests"),
    ("num_paused_requests", "Number of paused requests"),
    ("num_scheduled_requests", "Number of scheduled requests"),
    ("total_context_tokens", "Total number of context tokens"),
    ("avg_decoded_tokens_per_iter", "Average number of decoded tokens per iteration"),
)
_DRAFT_HELP = "Total number of draft tokens in speculative decoding"
_ACCEPTED_HELP = "Total number of accepted tokens in speculative decoding"
_DRAFTED_POS_HELP = "Total drafted tokens per speculative decoding position."
_ACCEPTED_POS_HELP = "Total accepted tokens per speculative decoding position."


class TrtllmPage:
    """One trtllm-serve replica's page; build a new one when the engine restarts."""

    content_type = "text/plain; version=0.0.4; charset=utf-8"

    def __init__(self, state: EngineState) -> None:
        self.state = state
        self._lab = labels(engine_type="trtllm", model_name=state.profile.model_name)
        self._serial = 0

    def _created(self) -> str:
        self._serial += 1  # prometheus_client's creation times, a few microseconds apart
        return format_value(self.state.created + 1e-5 * self._serial)

    def _counter(self, name: str, help_: str, series: Sequence[tuple[str, float]]) -> str:
        head = f"# HELP trtllm_{name}_total {help_}\n# TYPE trtllm_{name}_total counter\n"
        live = [(lab, v) for lab, v in series if v]  # a labelled series exists once used
        if not live:
            return head
        return (
            head
            + "".join(f"trtllm_{name}_total{lab} {number(v)}\n" for lab, v in live)
            + f"# HELP trtllm_{name}_created {help_}\n# TYPE trtllm_{name}_created gauge\n"
            + "".join(f"trtllm_{name}_created{lab} {self._created()}\n" for lab, _ in live)
        )

    def _gauge(self, name: str, help_: str, value: float | None, lab: str | None = None) -> str:
        head = f"# HELP trtllm_{name} {help_}\n# TYPE trtllm_{name} gauge\n"
        if value is None:
            return head
        return f"{head}trtllm_{name}{self._lab if lab is None else lab} {number(value)}\n"

    def render(self) -> str:
        s = self.state
        c = s.counters
        p = s.profile
        k = s.speculative_tokens
        self._serial = 0
        uptime = max(0.0, s.clock - s.process_start)
        out = [
            "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
            "# TYPE process_virtual_memory_bytes gauge\n"
            "process_virtual_memory_bytes 3.0101504e+07\n"
            "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
            "# TYPE process_resident_memory_bytes gauge\n"
            f"process_resident_memory_bytes {number(2.5063424e07 + 4096.0 * (int(uptime) % 99))}\n"
            "# HELP process_start_time_seconds Start time of the process since unix epoch in "
            "seconds.\n# TYPE process_start_time_seconds gauge\n"
            f"process_start_time_seconds {s.process_start:.2f}\n"
            "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
            "# TYPE process_cpu_seconds_total counter\n"
            f"process_cpu_seconds_total {number(round(0.06 + 0.97 * uptime, 2))}\n"
            "# HELP process_open_fds Number of open file descriptors.\n"
            "# TYPE process_open_fds gauge\nprocess_open_fds 6.0\n"
            "# HELP process_max_fds Maximum number of open file descriptors.\n"
            "# TYPE process_max_fds gauge\nprocess_max_fds 20000.0\n"
        ]
        w = out.append
        model = p.model_name
        w(
            self._counter(
                "request_success",
                "Count of successfully processed requests.",
                [
                    (labels(engine_type="trtllm", finished_reason=r, model_name=model), v)
                    for r, v in (("stop", c.success_stop), ("length", c.success_length))
                ],
            )
        )
        for name, help_, key, bounds in _HISTOGRAMS:
            w(self._histogram(name, help_, key, bounds))
        for name, help_ in _ITERATION_GAUGES:
            w(
                self._gauge(
                    name, help_, round(s.gauge_kv, 4) if name == "kv_cache_utilization" else 0.0
                )
            )
        w(self._counter("prompt_tokens", "Cumulative number of prompt (input) tokens processed.",
                        [(self._lab, c.prompt_tokens)]))  # fmt: skip
        w(self._counter("generation_tokens",
                        "Cumulative number of generation (output) tokens produced.",
                        [(self._lab, c.generation_tokens)]))  # fmt: skip
        w(self._gauge("num_requests_running", "Number of active requests", round(s.gauge_running)))
        w(self._gauge("num_requests_waiting", "Number of queued requests", round(s.gauge_waiting)))
        step, draft = step_times(s)
        w(self._gauge("iteration_latency_seconds", "Iteration latency in seconds",
                      round(step, 6) if finished(s) or s.gauge_running else 0.0))  # fmt: skip
        used = k > 0 and c.drafts > 0
        w(self._counter("spec_decode_num_draft_tokens", _DRAFT_HELP,
                        [(self._lab, c.draft_tokens if k else 0)]))  # fmt: skip
        w(self._counter("spec_decode_num_accepted_tokens", _ACCEPTED_HELP,
                        [(self._lab, c.accepted if k else 0)]))  # fmt: skip
        length = round(1.0 + c.accepted / c.drafts, 2) if used else None
        w(self._gauge("spec_decode_acceptance_length", "Acceptance length in speculative decoding",
                      length))  # fmt: skip
        w(self._gauge("spec_decode_draft_overhead", "Draft overhead in speculative decoding",
                      round(draft / step, 4) if used else None))  # fmt: skip
        positions = [
            labels(engine_type="trtllm", model_name=model, token_position=str(i)) for i in range(k)
        ]
        w(self._counter("spec_decode_drafted_tokens", _DRAFTED_POS_HELP,
                        [(lab, c.drafts) for lab in positions]))  # fmt: skip
        w(self._counter("spec_decode_accepted_tokens", _ACCEPTED_POS_HELP,
                        list(zip(positions, s.accepted_per_position(), strict=True))))  # fmt: skip
        info = labels(engine_type="trtllm", model_name=model, spec_method="EAGLE3",
                      spec_num_tokens=str(k))  # fmt: skip
        w(self._gauge("speculative_config_info", "Speculative decoding configuration info",
                      1.0 if k else None, info))  # fmt: skip
        return "".join(out)

    def _histogram(self, name: str, help_: str, key: str, bounds: list[float]) -> str:
        full = f"trtllm_{name}"
        head = f"# HELP {full} {help_}\n# TYPE {full} histogram\n"
        hist = self.state.hists[key]
        if not hist.count:
            return head
        model = self.state.profile.model_name
        les = [*map(number, bounds), "+Inf"]
        cums = rebucket(hist, bounds)
        return (
            head
            + "".join(
                f"{full}_bucket{labels(engine_type='trtllm', le=le, model_name=model)} "
                f"{number(v)}\n"
                for le, v in zip(les, cums, strict=True)
            )
            + f"{full}_count{self._lab} {number(cums[-1])}\n"
            + f"{full}_sum{self._lab} {number(hist.sum)}\n"
            + f"# HELP {full}_created {help_}\n# TYPE {full}_created gauge\n"
            + f"{full}_created{self._lab} {self._created()}\n"
        )
