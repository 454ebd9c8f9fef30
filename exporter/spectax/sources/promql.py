"""The PromQL fleet mode sends: what it reads of vLLM's series, and how, for the whole
fleet at once and never per endpoint (spectax.sources.prometheus says why it is exact).

For each counter, two range queries with one point per window (`W` the window, `L`
the lookback, `x` the series name and the source's selector):

- sums: `sum by (<endpoint labels>, model_name, position) ((last_over_time(x[W - 1ms])
  - last_over_time(x[L] offset W)) unless (resets(x[W + L]) > 0))`, the growth of every
  plain series, summed per endpoint by Prometheus;
- odd: `(resets(x[W + L]) > 0) or (last_over_time(x[W]) unless (last_over_time(x[W -
  1ms]) and last_over_time(x[L] offset W)))`, the series that are not plain in a window:
  a reset in it or its lookback, no sample within L before it, or a sample only on its
  edge (a range includes its start in Prometheus 2, not in 3: `W - 1ms` ends where the
  window's own samples do in both, at millisecond timestamps).

The odd series are then read raw (`samples_query` with `odd_matchers`) over the span and
`horizon` before it, and so are running requests (over the span and the lookback), a gauge
whose integral over time needs each sample's time.

A window counts a counter from its last sample before the window when that lies within
`horizon` (an hour), whatever the lookback: the lookback only decides which series
Prometheus sums and which are read raw. So a window read alone (the live daemon) counts
what a span read at once (backfill, catch-up) counts, and a gap in the samples (a
Prometheus paused for two minutes) loses nothing, as a direct scrape after it would not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from spectax.engines.base import COUNTERS
from spectax.source_config import PrometheusSource

#: The vLLM series of each declared counter (spectax.engines.base.Counters); a histogram
#: is read as its `_sum` and `_count`: fleet mode reads no buckets (yet), so a fleet
#: endpoint has no latency quantiles.
SERIES: Mapping[str, str] = {
    "generation_tokens": "vllm:generation_tokens_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "requests_finished": "vllm:request_success_total",
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
    "accepted_per_position": "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    "iteration_tokens": "vllm:iteration_tokens_total",
    "inter_token_latency": "vllm:inter_token_latency_seconds",
    "time_per_output_token": "vllm:request_time_per_output_token_seconds",
    "time_to_first_token": "vllm:time_to_first_token_seconds",
    "e2e_request_latency": "vllm:e2e_request_latency_seconds",
    "estimated_flops": "vllm:estimated_flops_per_gpu_total",
    "estimated_read_bytes": "vllm:estimated_read_bytes_per_gpu_total",
    "preemptions": "vllm:num_preemptions_total",
}
assert set(SERIES) == {c.name for c in COUNTERS}, "a declared counter has no vLLM series"
KIND = {c.name: c.kind for c in COUNTERS}
ESTIMATES = {SERIES["estimated_flops"], SERIES["estimated_read_bytes"]}
RUNNING = "vllm:num_requests_running"  # a gauge: integrated over time, as the scrapes do
#: The finished requests' prefill time, read as a counter: where a replica has it, the
#: running requests' integral is the inter-token latencies' sum plus it, as a direct scrape
#: takes it (pipeline.intervals).
PREFILL_TIME = "vllm:request_prefill_time_seconds_sum"
#: What a window's sum is grouped by besides the endpoint's labels: a series' model, and
#: the per-position counter's position (a label a series lacks groups as empty).
GROUP = ("model_name", "position")
#: More odd series of one name than this in a span, and its raw read is the whole fleet's
#: (a selector naming that many label values would cost Prometheus more than it saves).
MAX_NAMED_ODD = 500
#: How far before a window a counter's last sample may lie and still be what the window
#: counts from (at least twice the lookback, so that a sum's sample never falls on the edge).
HORIZON_SECONDS = 3600.0
_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")
_LEGACY_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def names() -> list[str]:
    """The series names read: one query (or two) each for the whole fleet."""
    out = [RUNNING, PREFILL_TIME]
    for counter, series in SERIES.items():
        histogram = KIND[counter] == "histogram"
        out += [f"{series}_sum", f"{series}_count"] if histogram else [series]
    return out


@dataclass(frozen=True)
class CounterQueries:
    """The two range queries (one point per window) of one counter for the whole fleet."""

    sums: str  # per endpoint, model (and position): the window's growth of its plain series
    odd: str  # the series not plain in some window: read raw (`samples_query`)


def queries(source: PrometheusSource, window: float) -> dict[str, str | CounterQueries]:
    """The PromQL sent per series name (the module's docstring): for running requests the
    raw samples of the span and its lookback; for each counter its `CounterQueries`."""
    out: dict[str, str | CounterQueries] = {RUNNING: samples_query(source, RUNNING, window)}
    by = ", ".join(dict.fromkeys((*source.endpoint_labels, *GROUP)))
    w, inside = _duration(window), _duration(window - 0.001)
    both, lb = _duration(window + source.lookback), _duration(source.lookback)
    for name in names()[1:]:
        s = f"{name}{{{source.selector}}}"
        reset = f"resets({s}[{both}]) > 0"
        last, before = f"last_over_time({s}[{inside}])", f"last_over_time({s}[{lb}] offset {w})"
        out[name] = CounterQueries(
            sums=f"sum by ({by}) (({last} - {before}) unless ({reset}))",
            odd=f"({reset}) or (last_over_time({s}[{w}]) unless ({last} and {before}))",
        )
    return out


def horizon(source: PrometheusSource, name: str = "") -> float:
    """How far before a window the sample it counts from may lie: a counter's last sample
    within HORIZON_SECONDS (read raw only for the odd series, so a long reach costs little);
    running requests, read raw for the whole fleet each window, within the lookback."""
    return source.lookback if name == RUNNING else max(HORIZON_SECONDS, 2 * source.lookback)


def samples_query(source: PrometheusSource, name: str, seconds: float, matchers: str = "") -> str:
    """The raw samples of a span of `seconds` and of its `horizon` before it."""
    selector = ",".join(m for m in (source.selector, matchers) if m)
    return f"{name}{{{selector}}}[{_duration(seconds + horizon(source, name))}]"


def odd_matchers(odd: Sequence[Mapping[str, str]]) -> str:
    """Label matchers that select at least these series, and few others: one regex per
    label of the values they have (empty for a series without it). Past MAX_NAMED_ODD
    series, none: the whole fleet's series of the name."""
    if len(odd) > MAX_NAMED_ODD:
        return ""
    labels = sorted({label for series in odd for label in series} - {"__name__"})
    out = []
    for label in labels:
        values = sorted({series.get(label, "") for series in odd})
        regex = "|".join(_RE2_SPECIAL.sub(r"\\\1", v) for v in values)
        # Prometheus 3's UTF-8 label names are quoted; its string escapes are Go's, where a
        # surrogate pair is no code point (so no ASCII-only escaping)
        name = label if _LEGACY_LABEL.fullmatch(label) else json.dumps(label, ensure_ascii=False)
        out.append(f"{name}=~{json.dumps(regex, ensure_ascii=False)}")
    return ",".join(out)


def _duration(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"
