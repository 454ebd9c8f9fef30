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
import math
import re
import sys
from bisect import bisect_right
from collections.abc import Mapping
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
from spectax.sources.matrix import MatrixDecoder, MatrixError

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


class WindowSums:
    """The windows between `bounds`, filled one series at a time as the answers arrive
    (so that no answer needs to be held whole: at 20,000 replicas one is ~100 MB of JSON)."""

    def __init__(self, source: PrometheusSource, bounds: list[float]):
        self.source = source
        self.bounds = bounds
        self._clean: dict[str, bool] = {}  # label value -> holds no credential spectax holds
        self._sums: list[dict[tuple[str, str], _Sums]] = [{} for _ in bounds[1:]]
        self._resets: list[set[str]] = [set() for _ in bounds[1:]]

    def add(
        self, name: str, labels: Mapping[str, str], stamps: list[float], texts: list[str]
    ) -> None:
        """One series of the query for `name`: its labels and raw samples."""
        endpoint, model = endpoint_name(self.source, labels), labels.get("model_name")
        if endpoint is None or not model or len(model) > MAX_MODEL_NAME:
            return  # the store's model column holds MAX_MODEL_NAME characters
        clean = self._clean
        if not all(clean.setdefault(v, logs.blank_secrets(v) == v) for v in (endpoint, model)):
            return  # a label echoing a secret never becomes a label or a row
        position = labels.get("position") if "per_pos" in name else None
        if "per_pos" in name and (position is None or not position.isdigit()):
            return
        bound = sys.float_info.max if name in ESTIMATES else MAX_VALUE  # FLOPs pass 2**53
        for i, grown, reset in _deltas(stamps, texts, self.bounds, name == RUNNING, bound):
            model_sums = self._sums[i].get((endpoint, model))
            if model_sums is None:
                model_sums = self._sums[i][(endpoint, model)] = _Sums()
            if name == RUNNING:
                model_sums.running_seconds += grown
            elif position is not None:
                index = int(position)
                model_sums.positions[index] = model_sums.positions.get(index, 0.0) + grown
            else:
                model_sums.values[name] = model_sums.values.get(name, 0.0) + grown
            if reset:
                self._resets[i].add(endpoint)

    def intervals(self) -> dict[float, dict[str, Interval]]:
        """Per window end, per endpoint: its interval. An endpoint is in a window when any
        of its series has a sample in it; a replica with no sample in it adds nothing."""
        bounds, out = self.bounds, {}
        for i, window in enumerate(self._sums):
            models: dict[str, dict[str, Counts]] = {}
            for (endpoint, model), model_sums in window.items():
                models.setdefault(endpoint, {})[model] = model_sums.counts()
            out[bounds[i + 1]] = {
                endpoint: Interval(
                    start=bounds[i],
                    end=bounds[i + 1],
                    models=by_model,
                    restarted=endpoint in self._resets[i],
                    busy=any(
                        c.generation_tokens > 0 or c.running_seconds > 0 for c in by_model.values()
                    ),
                )
                for endpoint, by_model in models.items()
            }
        return out


def window_intervals(
    source: PrometheusSource,
    results: Mapping[str, list[dict[str, Any]]],
    bounds: list[float],
) -> dict[float, dict[str, Interval]]:
    """Per window end (bounds[i], bounds[i+1]], per endpoint: its interval, from each
    query's decoded `data.result` (matrix)."""
    sums = WindowSums(source, bounds)
    for name, result in results.items():
        for series in result:
            values = series["values"]
            sums.add(name, series["metric"], [float(t) for t, _ in values], [v for _, v in values])
    return sums.intervals()


def _deltas(
    stamps: list[float], texts: list[str], bounds: list[float], gauge: bool, bound: float
) -> list[tuple[int, float, bool]]:
    """(window index, growth, reset) of one series, for each window it has a sample in.

    A counter's growth is the sum of its deltas from the sample before, or its value after
    a reset; a gauge's the sum of its trapezoids with the sample before (running requests
    x seconds). A value no page could hold (NaN, negative, over `bound`) is skipped.
    """
    values = list(map(float, texts))
    if not gauge and _plain_integers(texts, values, bound):
        return _integer_deltas(stamps, values, bounds)
    out: list[tuple[int, float, bool]] = []
    previous: tuple[float, float] | None = None
    i, last = 0, len(bounds) - 2
    for t, v in zip(stamps, values, strict=True):
        if not 0.0 <= v <= bound:
            continue
        if t > bounds[0]:
            while i < last and t > bounds[i + 1]:
                i += 1
            if t <= bounds[-1]:
                if previous is None:
                    grown, reset = 0.0, False
                elif gauge:
                    grown, reset = (previous[1] + v) / 2 * (t - previous[0]), False
                elif v >= previous[1]:
                    grown, reset = v - previous[1], False
                else:
                    grown, reset = v, True
                if out and out[-1][0] == i:
                    _, before, was_reset = out[-1]
                    out[-1] = (i, before + grown, was_reset or reset)
                else:
                    out.append((i, grown, reset))
        previous = (t, v)
    return out


def _plain_integers(texts: list[str], values: list[float], bound: float) -> bool:
    """Whether a counter's samples are whole numbers that never go down and are all valid:
    then a window's growth is exactly its last value less the one before it."""
    return (
        all(map(str.isdigit, texts))
        and values == sorted(values)
        and (not values or values[-1] <= min(bound, 2.0**53))
    )


def _integer_deltas(
    stamps: list[float], values: list[float], bounds: list[float]
) -> list[tuple[int, float, bool]]:
    """`_deltas` of a counter without resets or invalid values, a slice per window (the
    per-sample deltas of whole numbers below 2**53 sum exactly to the difference)."""
    out: list[tuple[int, float, bool]] = []
    lo = bisect_right(stamps, bounds[0])
    before = values[lo - 1] if lo > 0 else None
    for i, end in enumerate(bounds[1:]):
        hi = bisect_right(stamps, end, lo)
        if hi > lo:
            out.append((i, values[hi - 1] - (values[lo] if before is None else before), False))
            before, lo = values[hi - 1], hi
    return out


class PrometheusReader:
    """Reads windows from one source: the queries of a span, sent together."""

    def __init__(self, source: PrometheusSource, session: aiohttp.ClientSession):
        self.source = source
        self._session = session

    async def windows(self, bounds: list[float]) -> dict[float, dict[str, Interval]]:
        """The intervals of the windows between `bounds`; SourceError when any query
        failed or came back partial (then nothing of the span is used)."""
        sent = queries(self.source, bounds[-1] - bounds[0])
        sums = WindowSums(self.source, bounds)
        await asyncio.gather(*(self._query(q, bounds[-1], name, sums) for name, q in sent.items()))
        return sums.intervals()

    async def _query(self, query: str, at: float, name: str, sums: WindowSums) -> None:
        """Send one query; each series of its answer is added to `sums` as it arrives."""
        source = self.source
        url = f"{source.url}/api/v1/query"
        # Thanos: fail rather than answer from the stores that happened to respond.
        form = {"query": query, "time": f"{at:.3f}", "partial_response": "false"}
        ssl = source.auth.ssl if source.auth.ssl is not None else True
        decoder = MatrixDecoder()
        try:
            async with asyncio.timeout(source.timeout):
                async with self._session.post(
                    url, data=form, headers=source.auth.headers, ssl=ssl
                ) as response:
                    async for chunk in response.content.iter_chunked(1 << 16):
                        for labels, stamps, texts in decoder.feed(chunk):
                            sums.add(name, labels, stamps, texts)
            body, series, text = decoder.finish()
        except TimeoutError:
            raise SourceError(f"{redact(url)}: no answer within {source.timeout:g} s") from None
        except MatrixError as exc:
            raise SourceError(f"{redact(url)}: {exc}") from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise SourceError(f"{redact(url)}: {type(exc).__name__}: {exc}") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else text.strip()[:200]
            raise SourceError(f"{redact(url)}: HTTP {response.status}: {error or 'no answer'}")
        if body.get("warnings"):  # Prometheus/Thanos/Mimir: some data was left out
            raise SourceError(f"{redact(url)}: partial answer: {'; '.join(body['warnings'])[:300]}")
        data = body.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise SourceError(f"{redact(url)}: expected a matrix for {query!r}")
        for labels, stamps, texts in series:
            sums.add(name, labels, stamps, texts)
