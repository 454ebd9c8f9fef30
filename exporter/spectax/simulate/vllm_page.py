"""The /metrics page of a simulated engine: vLLM 0.32's families, family order and label order.

Rendering is on every scrape's path, so the page is a list of segments built once
per process start: static text (HELP, TYPE, label sets, ``_created`` values, the
cache-config info) and holes for the values, filled from the engine's state by
`MetricsPage.render`. Numbers are written as prometheus_client writes them
(:mod:`~spectax.simulate.textformat`), so the page parses like the real server's.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

from spectax.simulate.state import EngineState
from spectax.simulate.textformat import escape_label, format_int, format_value
from spectax.simulate.vllm_families import HISTOGRAM_FAMILIES, cache_config_labels

__all__ = ["MetricsPage"]


class MetricsPage:
    """One engine's page. Build a new one when the engine restarts (its times change)."""

    content_type = "text/plain; version=1.0.0; charset=utf-8"  # as vLLM 0.32.0 sends it

    def __init__(self, state: EngineState) -> None:
        self.state = state
        p = state.profile
        self._eng_label = f'engine="{escape_label(p.engine)}"'
        self._model_label = f'model_name="{escape_label(p.model_name)}"'
        self._label = f"{self._eng_label},{self._model_label}"
        self._segments = self._build_segments()

    def _build_segments(self) -> list[_Segment]:
        """Every static part of the page, once per process start (`created` changes then)."""
        b = _Segments(self.state, self._eng_label, self._model_label)
        _process_families(b)
        _engine_families(b)
        _token_families(b)
        for name, help_, key in HISTOGRAM_FAMILIES:
            b.histogram(name, help_, key)
        b.static(self._cache_config_line())
        return b.merged()

    def render(self) -> str:
        """The /metrics page: vLLM 0.32's families, family order and label order."""
        s = self.state
        c = s.counters
        uptime = max(0.0, s.clock - s.process_start)
        gen0 = 15000 + int(uptime * 3.1)
        running = round(s.gauge_running)
        waiting = round(s.gauge_waiting)
        vals: dict[str, Sequence[float]] = {
            "gc_collected": (gen0, 2300 + int(uptime * 0.28), 600 + int(uptime * 0.02)),
            "gc_collections": (gen0 // 10, gen0 // 110, gen0 // 1500),
            "rss": (4294967296 + 4096 * (gen0 % 65536),),
            "cpu": (round(8.0 + 0.97 * uptime, 2),),
            "fds": (34 + running,),
            "drafts": (c.drafts,),
            "draft_tokens": (c.draft_tokens,),
            "accepted": (c.accepted,),
            "per_pos": s.accepted_per_position(),
            "running": (running,),
            "waiting": (waiting,),
            "waiting_by_reason": (waiting, 0),
            "kv": (float(s.gauge_kv),),
            "prompt": (c.prompt_tokens,),
            "prompt_by_source": (c.prompt_tokens, 0, 0),
            "generation": (c.generation_tokens,),
            "success": (c.success_stop, c.success_length, 0, 0, 0),
        }
        out: list[str] = []
        w = out.append
        hists = s.hists
        for seg in self._segments:
            if isinstance(seg, str):
                w(seg)
                continue
            kind, prefixes, key = seg
            if kind == "v":
                for pre, v in zip(prefixes, vals[key], strict=True):
                    w(f"{pre}{format_int(v) if type(v) is int else format_value(v)}\n")
            else:
                hist = hists[key]
                cums = list(map(format_int, map(round, accumulate(hist.counts))))
                cums.append(cums[-1])
                w("".join(map("{}{}\n".format, prefixes, cums)))
                w(f"{prefixes[-1]}{format_value(hist.sum)}\n")
        return "".join(out)

    def _cache_config_line(self) -> str:
        body = ",".join(
            f'{k}="{escape_label(v)}"' for k, v in cache_config_labels(self.state.profile).items()
        )
        return (
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
            "# TYPE vllm:cache_config_info gauge\n"
            f"vllm:cache_config_info{{{body}}} 1.0\n"
        )


# A page segment: static text, or ("v", sample prefixes, value key) / ("h", prefixes, hist).
_Segment = str | tuple[str, list[str], str]


class _Segments:
    """The page's segments as they are built: static text, and holes for values (`"v"`: one
    value per label set; `"h"`: a histogram's buckets, count and sum), in page order."""

    def __init__(self, state: EngineState, eng: str, model: str) -> None:
        self.state = state
        self.eng, self.model, self.lab = eng, model, f"{eng},{model}"
        self._segs: list[_Segment] = []
        self._serial = 0

    def _created(self) -> str:
        """A `_created` value: the process start, each family a little later, as vLLM's."""
        self._serial += 1
        return format_value(self.state.created + 1e-5 * self._serial)

    def static(self, text: str) -> None:
        self._segs.append(text)

    def counter(self, name: str, help_: str, labels: Sequence[str], key: str | None) -> None:
        """`name_total` per label set (a hole, or 0.0 when `key` is None) and its `_created`."""
        head = f"# HELP {name}_total {help_}\n# TYPE {name}_total counter\n"
        prefixes = [f"{name}_total{{{lb}}} " for lb in labels]
        tail = f"# HELP {name}_created {help_}\n# TYPE {name}_created gauge\n" + "".join(
            f"{name}_created{{{lb}}} {self._created()}\n" for lb in labels
        )
        if key is None:
            self._segs.append(head + "".join(f"{pr}0.0\n" for pr in prefixes) + tail)
        else:
            self._segs += [head, ("v", prefixes, key), tail]

    def gauge(
        self,
        name: str,
        help_: str,
        labels: Sequence[str],
        key: str | None,
        static: Sequence[str] = (),
    ) -> None:
        """A gauge per label set: a hole, or the `static` values when `key` is None."""
        head = f"# HELP {name} {help_}\n# TYPE {name} gauge\n"
        prefixes = [f"{name}{{{lb}}} " for lb in labels]
        if key is None:
            values = "".join(f"{pr}{v}\n" for pr, v in zip(prefixes, static, strict=True))
            self._segs.append(head + values)
        else:
            self._segs += [head, ("v", prefixes, key)]

    def histogram(self, name: str, help_: str, key: str) -> None:
        """Buckets (engine, le, model_name, as prometheus_client orders labels), count, sum."""
        hist = self.state.hists[key]
        self._segs.append(f"# HELP {name} {help_}\n# TYPE {name} histogram\n")
        prefixes = [
            f'{name}_bucket{{{self.eng},le="{le}",{self.model}}} '
            for le in [*map(format_value, hist.bounds), "+Inf"]
        ]
        prefixes += [f"{name}_count{{{self.lab}}} ", f"{name}_sum{{{self.lab}}} "]
        self._segs.append(("h", prefixes, key))
        self._segs.append(
            f"# HELP {name}_created {help_}\n# TYPE {name}_created gauge\n"
            f"{name}_created{{{self.lab}}} {self._created()}\n"
        )

    def plain(self, name: str, kind: str, help_: str, labels: Sequence[str], key: str) -> None:
        """A family written as is (the process collector's), one hole per label set."""
        self._segs.append(f"# HELP {name} {help_}\n# TYPE {name} {kind}\n")
        self._segs.append(("v", [f"{name}{lb} " for lb in labels], key))

    def merged(self) -> list[_Segment]:
        """The segments with adjacent static text joined: fewer pieces to render."""
        merged: list[_Segment] = []
        for seg in self._segs:
            if isinstance(seg, str) and merged and isinstance(merged[-1], str):
                merged[-1] += seg
            else:
                merged.append(seg)
        return merged


def _process_families(b: _Segments) -> None:
    """prometheus_client's own: the GC, the platform, the process."""
    state = b.state
    gens = ['{generation="0"}', '{generation="1"}', '{generation="2"}']
    b.plain(
        "python_gc_objects_collected_total",
        "counter",
        "Objects collected during gc",
        gens,
        "gc_collected",
    )
    b.static(
        "# HELP python_gc_objects_uncollectable_total Uncollectable objects found during GC\n"
        "# TYPE python_gc_objects_uncollectable_total counter\n"
        + "".join(f"python_gc_objects_uncollectable_total{g} 0.0\n" for g in gens)
    )
    b.plain(
        "python_gc_collections_total",
        "counter",
        "Number of times this generation was collected",
        gens,
        "gc_collections",
    )
    b.static(
        "# HELP python_info Python platform information\n"
        "# TYPE python_info gauge\n"
        'python_info{implementation="CPython",major="3",minor="12",patchlevel="11",'
        'version="3.12.11"} 1.0\n'
        "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
        "# TYPE process_virtual_memory_bytes gauge\n"
        "process_virtual_memory_bytes 3.4359738368e+10\n"
    )
    b.plain("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", [""], "rss")
    b.static(
        "# HELP process_start_time_seconds Start time of the process since unix epoch in "
        "seconds.\n# TYPE process_start_time_seconds gauge\n"
        f"process_start_time_seconds {format_value(state.process_start)}\n"
    )
    b.plain(
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
        [""],
        "cpu",
    )
    b.plain("process_open_fds", "gauge", "Number of open file descriptors.", [""], "fds")
    b.static(
        "# HELP process_max_fds Maximum number of open file descriptors.\n"
        "# TYPE process_max_fds gauge\nprocess_max_fds 1.048576e+06\n"
    )


def _engine_families(b: _Segments) -> None:
    """Speculative decoding, the MFU estimates, the queue and the KV cache."""
    state, lab = b.state, b.lab
    if state.speculative_tokens:
        b.counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", [lab], "drafts")
        b.counter(
            "vllm:spec_decode_num_draft_tokens",
            "Number of draft tokens.",
            [lab],
            "draft_tokens",
        )
        b.counter(
            "vllm:spec_decode_num_accepted_tokens",
            "Number of accepted tokens.",
            [lab],
            "accepted",
        )
        b.counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            [f'{lab},position="{i}"' for i in range(state.speculative_tokens)],
            "per_pos",
        )
    mfu = "(for Model Flops Utilization calculations)."
    b.counter(
        "vllm:estimated_flops_per_gpu",
        f"Estimated number of floating point operations per GPU {mfu}",
        [lab],
        None,
    )
    b.counter(
        "vllm:estimated_read_bytes_per_gpu",
        f"Estimated number of bytes read from memory per GPU {mfu}",
        [lab],
        None,
    )
    b.counter(
        "vllm:estimated_write_bytes_per_gpu",
        f"Estimated number of bytes written to memory per GPU {mfu}",
        [lab],
        None,
    )
    b.gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        [lab],
        "running",
    )
    b.gauge(
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        [lab],
        "waiting",
    )
    b.gauge(
        "vllm:num_requests_waiting_by_reason",
        "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
        "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA "
        "budget, KV transfer, blocked status). Sum of all reasons equals "
        "vllm:num_requests_waiting.",
        [f'{lab},reason="capacity"', f'{lab},reason="deferred"'],
        "waiting_by_reason",
    )
    b.gauge(
        "vllm:engine_sleep_state",
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
        "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
        "sleep level 2.",
        [
            f'{lab},sleep_state="awake"',
            f'{lab},sleep_state="weights_offloaded"',
            f'{lab},sleep_state="discard_all"',
        ],
        None,
        ("1.0", "0.0", "0.0"),
    )
    b.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", [lab], "kv")


def _token_families(b: _Segments) -> None:
    """The caches, tokens, finished requests and admission."""
    eng, model, lab = b.eng, b.model, b.lab
    b.counter(
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        [lab],
        "prompt",
    )
    b.counter(
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        [lab],
        None,
    )
    kvc = "from KV connector cross-instance cache sharing, in terms of number of"
    b.counter(
        "vllm:external_prefix_cache_queries",
        f"External prefix cache queries {kvc} queried tokens.",
        [lab],
        None,
    )
    b.counter(
        "vllm:external_prefix_cache_hits",
        f"External prefix cache hits {kvc} cached tokens.",
        [lab],
        None,
    )
    b.counter(
        "vllm:mm_cache_queries",
        "Multi-modal cache queries, in terms of number of queried items.",
        [lab],
        None,
    )
    b.counter(
        "vllm:mm_cache_hits",
        "Multi-modal cache hits, in terms of number of cached items.",
        [lab],
        None,
    )
    b.counter(
        "vllm:num_preemptions", "Cumulative number of preemption from the engine.", [lab], None
    )
    b.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", [lab], "prompt")
    b.counter(
        "vllm:prompt_tokens_by_source",
        "Number of prompt tokens by source.",
        [
            f'{lab},source="{s}"'
            for s in ("local_compute", "local_cache_hit", "external_kv_transfer")
        ],
        "prompt_by_source",
    )
    b.counter(
        "vllm:prompt_tokens_cached",
        "Number of cached prompt tokens (local + external).",
        [lab],
        None,
    )
    b.counter(
        "vllm:prompt_tokens_cached_by_source",
        "Prefix-cache hit tokens by the cache tier that supplied them: device (local "
        "HBM), host (offloaded to DRAM), disk, p2p (transferred from another vLLM "
        "instance) or external_unspecified. Counted at admission; sums to "
        "vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
        [f'{lab},source="{s}"' for s in ("device", "host", "p2p", "disk", "external_unspecified")],
        None,
    )
    b.counter(
        "vllm:generation_tokens", "Number of generation tokens processed.", [lab], "generation"
    )
    b.counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        [
            f'{eng},finished_reason="{r}",{model}'
            for r in ("stop", "length", "abort", "error", "repetition")
        ],
        "success",
    )
    b.counter(
        "vllm:admission_rejections",
        "Number of admission attempts rejected by a queue limit, by reason.",
        [f'{model},reason="max_num_queued_reqs"', f'{model},reason="max_num_queued_tokens"'],
        None,
    )
