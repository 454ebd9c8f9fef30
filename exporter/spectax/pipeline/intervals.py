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

from spectax.engines.base import EngineSample, ModelSample
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
    the KV cache's settings as the later page states them."""
    usage = None
    if after.kv_cache_usage is not None:
        usage = ((before.kv_cache_usage or 0.0) + after.kv_cache_usage) / 2 * seconds
    return (
        (before.requests_running + after.requests_running) / 2 * seconds,
        (before.requests_waiting + after.requests_waiting) / 2 * seconds,
        usage,
        after.kv_cache_blocks,
        after.kv_block_size,
        after.kv_cache_bytes,
    )


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
        base = ModelSample() if reset or then is None else then
        models[name] = delta(base, now, _gauges(base, now, seconds))
    busy = any(c.generation_tokens > 0 or c.running_seconds > 0 for c in models.values())
    return Interval(start=start, end=end, models=models, restarted=reset, busy=busy)
