"""Intervals: what happened on one endpoint between two consecutive successful scrapes.

Scrapes arrive as cumulative `EngineSample`s. Between two consecutive samples
there is an `Interval`: per model, the counter deltas with Prometheus `rate()`
semantics, the mean number of running requests, and whether the engine
restarted in between.

Restarts: a changed `process_start_time_seconds`, or any counter going down
(data-parallel pages carry no process metrics). Across a restart every
counter's delta is its new value: the new process counted from zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from spectax.engines.base import EngineSample, Histogram, ModelSample
from spectax.pipeline.counts import Counts, any_counter_down, delta


@dataclass(frozen=True, slots=True)
class Interval:
    """What happened on one endpoint between two consecutive successful scrapes.

    The money is the estimated spend over the interval (spectax.economics.pricing), cold
    start included; zero until the interval is priced. `unobserved_seconds` is, across a
    restart, the part of it in which the old process served what no scrape can ever show
    (economics.restart_sight): its counters died with it.
    """

    start: float
    end: float
    models: dict[str, Counts]
    restarted: bool
    busy: bool
    spend_usd: Decimal = Decimal(0)
    cold_start_usd: Decimal = Decimal(0)
    draft_load_usd: Decimal = Decimal(0)
    unobserved_seconds: float = 0.0

    @property
    def seconds(self) -> float:
        return self.end - self.start


def restarted(previous: EngineSample, current: EngineSample) -> bool:
    """A new process: a changed start time, or any counter that went down."""
    before, after = previous.process_start_time_seconds, current.process_start_time_seconds
    if before is not None and after is not None and before != after:
        return True
    for name, now in current.models.items():
        then = previous.models.get(name)
        if then is not None and any_counter_down(then, now):
            return True
    return False


def _gauges(before: ModelSample, after: ModelSample, seconds: float) -> tuple[object, ...]:
    """The span's `GAUGES`: gauges integrated over it (trapezoids; a fresh process from 0),
    the KV cache's settings as the later page states them; the running requests by
    `_running_seconds`."""
    usage = None
    if after.kv_cache_usage is not None:
        usage = ((before.kv_cache_usage or 0.0) + after.kv_cache_usage) / 2 * seconds
    return (
        _running_seconds(before, after, seconds),
        (before.requests_waiting + after.requests_waiting) / 2 * seconds,
        usage,
        after.kv_cache_blocks,
        after.kv_block_size,
        after.kv_cache_bytes,
    )


def _running_seconds(before: ModelSample, after: ModelSample, seconds: float) -> float:
    """The span's request-seconds of running: the larger of two readings, each of which
    misses running requests in its own way and neither of which counts one that did not
    run (docs/economics.md, "Running requests").

    - The running gauge's trapezoid between the two pages: a guess from two instants, and
      a low one where the server answers /metrics only between its busy stretches (vLLM
      0.32 running its K schedule read 0 at 20 of 21 pages while it ran 3.5 requests).
    - Where the engine times its requests (vLLM), the time it spent on them: the decode
      time its tokens came out over (the inter-token latencies' sum: a request's gaps add
      up to its decode time, as it runs) plus the prefill time of the requests that
      finished (`ModelSample.prefill_seconds`). Low while prompts are still prefilling
      (counted when their request ends): a burst of 96 long prompts read near 0 at first.
    """
    gauge = (before.requests_running + after.requests_running) / 2 * seconds
    itl, earlier = after.inter_token_latency, before.inter_token_latency
    if earlier is None and before is _FRESH:  # a new process: its decode time from zero
        earlier = _NO_DECODING
    if (
        itl is None
        or earlier is None
        or after.prefill_seconds is None
        or before.prefill_seconds is None
    ):
        return gauge
    return larger_running(
        gauge, itl.sum - earlier.sum, after.prefill_seconds - before.prefill_seconds
    )


def larger_running(gauge: float, decoding: float, prefilling: float) -> float:
    """The running requests' integral from its two readings (`_running_seconds`; fleet mode
    sums the same series from Prometheus): the larger, the gauge's alone when the engine's
    sums went down (a reset no other counter showed)."""
    if decoding < 0.0 or prefilling < 0.0:
        return gauge
    return max(gauge, decoding + prefilling)


#: The base of a fresh process's deltas: every counter from zero, its prefill time too.
_FRESH = ModelSample(prefill_seconds=0.0)
_NO_DECODING = Histogram(0.0, 0.0)


def interval_between(
    previous: EngineSample, current: EngineSample, start: float, end: float
) -> Interval:
    """The deltas from `previous` (scraped at `start`) to `current` (scraped at `end`).

    A model seen for the first time in the same process has no delta yet (like
    a new series in Prometheus); after a restart every model counts from zero.
    """
    reset = restarted(previous, current)
    seconds = max(end - start, 0.0)
    models: dict[str, Counts] = {}
    for name, now in current.models.items():
        then = previous.models.get(name)
        if then is None and not reset:
            continue
        base = _FRESH if reset or then is None else then
        models[name] = delta(base, now, _gauges(base, now, seconds))
    # running_seconds is at least the gauge's: a page that showed a request running is busy
    busy = any(c.generation_tokens > 0 or c.running_seconds > 0 for c in models.values())
    return Interval(start=start, end=end, models=models, restarted=reset, busy=busy)
