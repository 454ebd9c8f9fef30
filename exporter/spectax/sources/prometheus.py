"""Exact window deltas from a Prometheus HTTP API: one `Interval` per endpoint and window,
the same intervals the direct scrapes would have given.

Why not `increase()`: it extrapolates to the window's edges and is a float estimate
(3.97 tokens for 4), and summed over pods it cannot tell a pod that left from a reset.
The exact growth of a series in a window (start, end] is its last sample in the window
less its last sample before it, as long as it did not go down: Prometheus computes that
itself, per series, and sums it per endpoint (`CounterQueries.sums`, a range query with
one point per window: `last_over_time(x[window]) - last_over_time(x[lookback] offset
window)`, `unless` the series reset in the window or its lookback). That answer is one
number per endpoint, not the raw samples of every replica: at 20,000 replicas a window
is ~10 M samples, and decoding them was nearly all of a read's CPU.

The other series of a window are odd (`CounterQueries.odd`): one that went down (a
restart: the new value counts and the window counts a restart), one with no sample
within `lookback` before the window (new: it counts from its first sample; or back after
a gap: it counts from its sample before the gap, within `promql.horizon`). Those are read
raw over the span and that horizon before it, with a selector naming their label values
(`odd_matchers`), and spectax.sources.deltas counts them as the direct scrapes do; they
are few (a restart, a scale-up). Running requests, a gauge integrated over time, are read
raw too. Series are summed per endpoint only after their own deltas:
a replica that disappears keeps the counts it had, and is no reset.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import sys
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp

from spectax import logs
from spectax.engines.base import Histogram
from spectax.engines.vllm import MAX_MODEL_NAME, MAX_VALUE
from spectax.pipeline.counts import Counts
from spectax.pipeline.intervals import Interval, larger_running
from spectax.scrape import redact
from spectax.source_config import PrometheusSource
from spectax.sources.deltas import deltas
from spectax.sources.matrix import MatrixDecoder, MatrixError
from spectax.sources.promql import (
    ESTIMATES,
    KIND,
    PREFILL_TIME,
    RUNNING,
    SERIES,
    CounterQueries,
    horizon,
    odd_matchers,
    queries,
    samples_query,
)

_NAME = re.compile(r"[^A-Za-z0-9_.-]")
_ITL_SUM = f"{SERIES['inter_token_latency']}_sum"
log = logging.getLogger("spectax.fleet")


class SourceError(Exception):
    """The source did not answer, or answered only in part: the window waits."""


def series_key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """A series within one query's answer, whether or not the query kept its name."""
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))


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
    gauge_running_seconds: float = 0.0  # the running gauge's samples integrated
    prefill_time: float | None = None  # PREFILL_TIME's growth, where the replicas have it

    @property
    def running_seconds(self) -> float:
        """The running requests' integral as pipeline.intervals takes it: the larger of the
        gauge's and, where both were read, the inter-token latencies' sum plus the prefill
        time."""
        decoding = self.values.get(_ITL_SUM)
        if decoding is None or self.prefill_time is None:
            return self.gauge_running_seconds
        return larger_running(self.gauge_running_seconds, decoding, self.prefill_time)

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
    """The windows between `bounds`, filled as the answers arrive (so that no answer needs
    to be held whole: at 20,000 replicas a raw one is ~100 MB of JSON): an endpoint's sums
    per window as Prometheus computed them, and the deltas of series read raw."""

    def __init__(self, source: PrometheusSource, bounds: list[float]):
        self.source = source
        self.bounds = bounds
        self._step = (bounds[-1] - bounds[0]) / (len(bounds) - 1)
        # (endpoint label values, model) -> (endpoint, model), or None when a series of
        # theirs is not read (no endpoint, a model the store cannot hold, a secret echoed)
        self._names: dict[tuple[str, ...], tuple[str, str] | None] = {}
        self._sums: list[dict[tuple[str, str], _Sums]] = [{} for _ in bounds[1:]]
        self._resets: list[set[str]] = [set() for _ in bounds[1:]]

    def window_of(self, stamp: str) -> int | None:
        """The window a range query's point belongs to (evaluated at its end)."""
        i = round((float(stamp) - self.bounds[1]) / self._step)
        return i if 0 <= i < len(self._sums) else None

    def add(
        self,
        name: str,
        labels: Mapping[str, str],
        stamps: list[str],
        texts: list[str],
        windows: set[int] | None = None,
    ) -> None:
        """One series read raw: its labels and samples (as sent); only its deltas in
        `windows` count when given (the others are in a sum already)."""
        if (target := self._target(name, labels)) is None:
            return
        bound = sys.float_info.max if name in ESTIMATES else MAX_VALUE  # FLOPs pass 2**53
        reach = horizon(self.source, name)
        for i, grown, reset in deltas(stamps, texts, self.bounds, name == RUNNING, bound, reach):
            if windows is None or i in windows:
                self._grow(i, name, *target, grown, reset)

    def add_sums(
        self, name: str, labels: Mapping[str, str], stamps: list[str], texts: list[str]
    ) -> None:
        """One group of `CounterQueries.sums`: its growth in each window it has a point for
        (every one a count: `countable`)."""
        if (target := self._target(name, labels)) is None:
            return
        for stamp, text in zip(stamps, texts, strict=True):
            if (i := self.window_of(stamp)) is not None:
                self._grow(i, name, *target, float(text), False)

    def _target(
        self, name: str, labels: Mapping[str, str]
    ) -> tuple[tuple[str, str], int | None] | None:
        """(endpoint, model) and position of a series, or None when it is not read."""
        names = self._names
        key = (
            *(labels.get(label, "") for label in self.source.endpoint_labels),
            labels.get("model_name", ""),
        )
        if key not in names:
            names[key] = self._endpoint(labels)
        if (found := names[key]) is None:
            return None
        if "per_pos" not in name:
            return found, None
        position = labels.get("position")
        if position is None or not position.isdigit():
            return None
        return found, int(position)

    def _grow(
        self,
        i: int,
        name: str,
        found: tuple[str, str],
        position: int | None,
        grown: float,
        reset: bool,
    ) -> None:
        model_sums = self._sums[i].get(found)
        if model_sums is None:
            model_sums = self._sums[i][found] = _Sums()
        if name == RUNNING:
            model_sums.gauge_running_seconds += grown
        elif name == PREFILL_TIME:
            model_sums.prefill_time = (model_sums.prefill_time or 0.0) + grown
        elif position is not None:
            model_sums.positions[position] = model_sums.positions.get(position, 0.0) + grown
        else:
            model_sums.values[name] = model_sums.values.get(name, 0.0) + grown
        if reset:
            self._resets[i].add(found[0])

    def _endpoint(self, labels: Mapping[str, str]) -> tuple[str, str] | None:
        endpoint, model = endpoint_name(self.source, labels), labels.get("model_name")
        if endpoint is None or not model or len(model) > MAX_MODEL_NAME:
            return None  # the store's model column holds MAX_MODEL_NAME characters
        if any(logs.holds_secret(v) for v in (endpoint, model)):
            return None  # a label echoing a secret never becomes a label or a row
        return endpoint, model

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


Each = Callable[[dict[str, str], list[str], list[str]], None]


class PrometheusReader:
    """Reads windows from one source: the queries of a span, every name at once.

    `raw`: read every name's raw samples and count their deltas here, as the odd series
    are (for tests and bench/: what the sums must equal, and what they save)."""

    def __init__(self, source: PrometheusSource, session: aiohttp.ClientSession, raw: bool = False):
        self.source = source
        self._session = session
        self._raw_only = raw

    async def windows(self, bounds: list[float]) -> dict[float, dict[str, Interval]]:
        """The intervals of the windows between `bounds` (evenly spaced); SourceError when
        any query failed or came back partial (then nothing of the span is used)."""
        sums = WindowSums(self.source, bounds)
        # Every name at once, as Prometheus answers them in parallel and spectax decodes
        # on its own core.
        await _together(
            self._raw(name, bounds, sums)
            if isinstance(sent, str) or self._raw_only
            else self._counter(name, sent, bounds, sums)
            for name, sent in queries(self.source, bounds[1] - bounds[0]).items()
        )
        return sums.intervals()

    async def _raw(
        self,
        name: str,
        bounds: list[float],
        sums: WindowSums,
        odd: dict[tuple[tuple[str, str], ...], set[int]] | None = None,
        matchers: str = "",
    ) -> None:
        """One name's raw samples over the span and its lookback, each series' deltas
        added as it arrives; with `odd`, only those series, in their windows."""

        def add(labels: dict[str, str], stamps: list[str], texts: list[str]) -> None:
            if odd is None:
                sums.add(name, labels, stamps, texts)
            elif windows := odd.get(series_key(labels)):
                sums.add(name, labels, stamps, texts, windows)

        query = samples_query(self.source, name, bounds[-1] - bounds[0], matchers)
        await self._query(query, add, at=bounds[-1])

    async def _counter(
        self, name: str, sent: CounterQueries, bounds: list[float], sums: WindowSums
    ) -> None:
        """One counter: Prometheus's sums of its plain series per endpoint and window, and
        the odd ones (a reset, no sample before the window, one on its edge) read raw and
        counted here. A sum that is no count (a series' NaN sample: NaN itself, or a value
        that went down after it, which `resets()` cannot see, made it negative) and the
        name is read raw. (Not seen: such a negative part outweighed by the other series
        of its endpoint. vLLM's counters are never NaN; a page with one is refused.)"""
        odd: dict[tuple[tuple[str, str], ...], set[int]] = {}

        def hold(labels: dict[str, str], stamps: list[str], texts: list[str]) -> None:
            windows = odd.setdefault(series_key(labels), set())
            windows.update(i for i in map(sums.window_of, stamps) if i is not None)

        grouped: list[tuple[dict[str, str], list[str], list[str]]] = []

        def add(labels: dict[str, str], stamps: list[str], texts: list[str]) -> None:
            grouped.append((labels, stamps, texts))  # one an endpoint and model: few

        await _together(
            [self._query(sent.sums, add, span=bounds), self._query(sent.odd, hold, span=bounds)]
        )
        if not all(countable(texts) for _, _, texts in grouped):
            # A NaN sample makes a sum NaN, or hides a value that went down from resets():
            # the name is counted from every series' raw samples, as the scrapes count.
            log.warning(
                "%s: %s summed to no count (a NaN sample) from %s to %s; its samples read raw",
                redact(self.source.url),
                name,
                iso(bounds[0]),
                iso(bounds[-1]),
            )
            await self._raw(name, bounds, sums)
            return
        for group in grouped:
            sums.add_sums(name, *group)
        if odd:
            await self._raw(name, bounds, sums, odd, odd_matchers([dict(key) for key in odd]))

    async def _query(
        self, query: str, each: Each, at: float | None = None, span: list[float] | None = None
    ) -> None:
        """Send one query, instant `at` or over `span`'s windows (a point at each end);
        `each` is called with every series of its answer as it arrives."""
        source = self.source
        # Thanos: fail rather than answer from the stores that happened to respond, and
        # read raw samples, never its downsampled blocks (which a range query may pick).
        form = {"query": query, "partial_response": "false", "max_source_resolution": "0s"}
        if span is None:
            url = f"{source.url}/api/v1/query"
            form["time"] = f"{at:.3f}"
        else:
            url = f"{source.url}/api/v1/query_range"
            step = (span[-1] - span[0]) / (len(span) - 1)
            form |= {"start": f"{span[1]:.3f}", "end": f"{span[-1]:.3f}", "step": f"{step:.3f}"}
        ssl = source.auth.ssl if source.auth.ssl is not None else True
        decoder = MatrixDecoder()
        try:
            async with asyncio.timeout(source.timeout):
                async with self._session.post(
                    url, data=form, headers=source.auth.headers, ssl=ssl
                ) as response:
                    async for chunk in response.content.iter_chunked(1 << 16):
                        for series in decoder.feed(chunk):
                            each(*series)
            body, rest, text = decoder.finish()
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
        try:
            for series in rest:
                each(*series)
        except ValueError as exc:  # a value that is no number
            raise SourceError(f"{redact(url)}: {type(exc).__name__}: {exc}"[:300]) from None


def iso(t: float) -> str:
    """A window boundary as an operator reads it: 2026-12-03T18:40:00Z."""
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def countable(texts: list[str]) -> bool:
    """Whether a sum's values are all counts: not NaN, negative or infinite."""
    return all(0.0 <= float(text) < math.inf for text in texts)


async def _together(reads: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run the reads at once. The first SourceError cancels the others and is raised on
    its own (the span is then read again whole); a nested `_together` raises it unwrapped
    too, so its caller's group holds SourceErrors only."""
    try:
        async with asyncio.TaskGroup() as group:
            for read in reads:
                group.create_task(read)
    except* SourceError as failed:
        raise failed.exceptions[0] from None
