"""Exact window deltas from a Prometheus HTTP API: raw samples in, one `Interval` per
endpoint and window out, the same intervals the direct scrapes would have given.

Why not `increase()`: it extrapolates to the window's edges and is a float estimate
(3.97 tokens for 4). Instead each metric is read with one instant query of a range
selector for the whole fleet, `vllm:prompt_tokens_total{selector}[range]`, which returns
the raw samples Prometheus scraped. Per series, the delta between consecutive samples
is added to the window the later sample falls in ((start, end], like the direct
scrapes' intervals), and a value that went down is a reset: the new value counts, as
after a restart of a directly scraped engine. The first sample of each window counts
from the last sample before the window (up to `lookback` earlier), so nothing at a
boundary is lost or counted twice. Series are summed per endpoint only after their own
deltas: a replica that disappears keeps the counts it had, and is no reset.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from spectax import logs
from spectax.engines.base import COUNTERS, Histogram
from spectax.engines.vllm import MAX_MODEL_NAME, MAX_VALUE
from spectax.pipeline.counts import Counts
from spectax.pipeline.intervals import Interval
from spectax.scrape import redact
from spectax.sources.config import PrometheusSource

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
_NAME = re.compile(r"[^A-Za-z0-9_.-]")


class SourceError(Exception):
    """The source did not answer, or answered only in part: the window waits."""


def queries(source: PrometheusSource, seconds: float) -> dict[str, str]:
    """The PromQL sent for a span of `seconds`: one query a series name for the whole
    fleet, never one per endpoint, each the raw samples of the span and its lookback."""
    names = [RUNNING]
    for counter, series in SERIES.items():
        histogram = KIND[counter] == "histogram"
        names += [f"{series}_sum", f"{series}_count"] if histogram else [series]
    span = f"{{{source.selector}}}[{math.ceil(seconds + source.lookback)}s]"
    return {name: name + span for name in names}


def endpoint_name(source: PrometheusSource, labels: Mapping[str, str]) -> str | None:
    """The endpoint a series belongs to: its `endpoint_labels` values, joined by '.'."""
    values = [labels.get(label, "") for label in source.endpoint_labels]
    if not all(values):
        return None
    name = _NAME.sub("_", source.name_prefix + ".".join(values))[:63]
    return name if name[:1].isalnum() else None


@dataclass
class _Sums:
    """One endpoint's model in one window, while the series are added up."""

    values: dict[str, float] = field(default_factory=dict)
    positions: dict[int, float] = field(default_factory=dict)
    running_seconds: float = 0.0

    def counts(self) -> Counts:
        args: dict[str, Any] = {}
        for counter, kind in KIND.items():
            series = SERIES[counter]
            if kind == "histogram":
                total, count = self.values.get(f"{series}_sum"), self.values.get(f"{series}_count")
                args[counter] = None if total is None or count is None else Histogram(total, count)
            elif kind == "per_position":
                top = max(self.positions, default=-1)
                args[counter] = tuple(self.positions.get(i, 0.0) for i in range(top + 1))
            elif series in self.values or kind == "plain":
                args[counter] = self.values.get(series, 0.0)
        return Counts(**args, running_seconds=self.running_seconds)


def window_intervals(
    source: PrometheusSource,
    results: Mapping[str, list[dict[str, Any]]],
    bounds: list[float],
) -> dict[float, dict[str, Interval]]:
    """Per window end (bounds[i], bounds[i+1]], per endpoint: its interval.

    `results` is each query's `data.result` (matrix). An endpoint is in a window when
    any of its series has a sample in it; a replica with no sample in it adds nothing.
    """
    clean: dict[str, bool] = {}  # model name -> holds no credential spectax holds
    sums: list[dict[tuple[str, str], _Sums]] = [{} for _ in bounds[1:]]
    resets: list[set[str]] = [set() for _ in bounds[1:]]
    for name, result in results.items():
        for series in result:
            labels = series["metric"]
            endpoint, model = endpoint_name(source, labels), labels.get("model_name")
            if endpoint is None or not model or len(model) > MAX_MODEL_NAME:
                continue  # the store's model column holds MAX_MODEL_NAME characters
            if not all(clean.setdefault(v, logs.blank_secrets(v) == v) for v in (endpoint, model)):
                continue  # a label echoing a secret never becomes a label or a row
            position = labels.get("position") if "per_pos" in name else None
            if "per_pos" in name and (position is None or not position.isdigit()):
                continue
            bound = sys.float_info.max if name in ESTIMATES else MAX_VALUE  # FLOPs pass 2**53
            for i, grown, reset in _deltas(series["values"], bounds, name == RUNNING, bound):
                model_sums = sums[i].setdefault((endpoint, model), _Sums())
                if name == RUNNING:
                    model_sums.running_seconds += grown
                elif position is not None:
                    index = int(position)
                    model_sums.positions[index] = model_sums.positions.get(index, 0.0) + grown
                else:
                    model_sums.values[name] = model_sums.values.get(name, 0.0) + grown
                if reset:
                    resets[i].add(endpoint)
    out: dict[float, dict[str, Interval]] = {}
    for i, window in enumerate(sums):
        models: dict[str, dict[str, Counts]] = {}
        for (endpoint, model), model_sums in window.items():
            models.setdefault(endpoint, {})[model] = model_sums.counts()
        out[bounds[i + 1]] = {
            endpoint: Interval(
                start=bounds[i],
                end=bounds[i + 1],
                models=by_model,
                restarted=endpoint in resets[i],
                busy=any(
                    c.generation_tokens > 0 or c.running_seconds > 0 for c in by_model.values()
                ),
            )
            for endpoint, by_model in models.items()
        }
    return out


def _deltas(
    values: Iterable[list[Any]], bounds: list[float], gauge: bool, bound: float = MAX_VALUE
) -> Iterable[tuple[int, float, bool]]:
    """(window index, growth, reset) for each raw sample after the first, in a window.

    A counter's growth is its delta from the sample before, or its value after a reset;
    a gauge's is its trapezoid with the sample before (running requests x seconds).
    Every sample in a window yields, so the window is known to hold the series.
    """
    previous: tuple[float, float] | None = None
    i, last = 0, len(bounds) - 2
    for stamp, text in values:
        t, v = float(stamp), float(text)
        if not 0.0 <= v <= bound:  # NaN, negative, too large: skipped, as the parser refuses it
            continue
        if t > bounds[0]:
            while i < last and t > bounds[i + 1]:
                i += 1
            if t <= bounds[-1]:
                if previous is None:
                    yield i, 0.0, False
                elif gauge:
                    yield i, (previous[1] + v) / 2 * (t - previous[0]), False
                elif v >= previous[1]:
                    yield i, v - previous[1], False
                else:
                    yield i, v, True
        previous = (t, v)


class PrometheusReader:
    """Reads windows from one source: the queries of a span, sent together."""

    def __init__(self, source: PrometheusSource, session: aiohttp.ClientSession):
        self.source = source
        self._session = session

    async def windows(self, bounds: list[float]) -> dict[float, dict[str, Interval]]:
        """The intervals of the windows between `bounds`; SourceError when any query
        failed or came back partial (then nothing of the span is used)."""
        sent = queries(self.source, bounds[-1] - bounds[0])
        answers = await asyncio.gather(*(self._query(q, bounds[-1]) for q in sent.values()))
        return window_intervals(self.source, dict(zip(sent, answers, strict=True)), bounds)

    async def _query(self, query: str, at: float) -> list[dict[str, Any]]:
        source = self.source
        url = f"{source.url}/api/v1/query"
        # Thanos: fail rather than answer from the stores that happened to respond.
        form = {"query": query, "time": f"{at:.3f}", "partial_response": "false"}
        ssl = source.auth.ssl if source.auth.ssl is not None else True
        try:
            async with asyncio.timeout(source.timeout):
                async with self._session.post(
                    url, data=form, headers=source.auth.headers, ssl=ssl
                ) as response:
                    text = await response.text()
        except TimeoutError:
            raise SourceError(f"{redact(url)}: no answer within {source.timeout:g} s") from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise SourceError(f"{redact(url)}: {type(exc).__name__}: {exc}") from None
        try:
            body = json.loads(text)
        except ValueError:
            body = None  # a proxy's error page
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else text.strip()[:200]
            raise SourceError(f"{redact(url)}: HTTP {response.status}: {error or 'no answer'}")
        if body.get("warnings"):  # Prometheus/Thanos/Mimir: some data was left out
            raise SourceError(f"{redact(url)}: partial answer: {'; '.join(body['warnings'])[:300]}")
        data = body.get("data") or {}
        if data.get("resultType") != "matrix":
            raise SourceError(f"{redact(url)}: expected a matrix for {query!r}")
        return list(data.get("result") or [])
