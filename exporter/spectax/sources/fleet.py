"""Fleet mode: the endpoints found in a Prometheus, each window read once it has closed.

One task per source. At each window boundary (plus the source's `delay`, for Prometheus
to have scraped up to it) the reader sends one query per series for the whole fleet and
hands each discovered endpoint its window; the endpoint's monitor (spectax.endpoint)
prices, assesses and closes it like any scraped window, and the daemon's store writer
writes it. The fleet is handed its sources and two callables, to make an endpoint's
monitor and to publish its new state: it never sees the daemon. When the source fails or
answers in part, the window waits: it is read again until it is whole, never written
short, and the windows behind it follow in one query.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import replace

import aiohttp

from spectax import logs
from spectax.endpoint import EndpointMonitor, EndpointSnapshot
from spectax.endpoint_config import EndpointConfig
from spectax.engines.base import EngineSample, ModelSample
from spectax.health import LogOnce, ScrapeError
from spectax.observed import Observed
from spectax.pipeline.intervals import Interval
from spectax.pipeline.windows import aligned_start
from spectax.scrape import redact
from spectax.source_config import PrometheusSource
from spectax.sources.prometheus import PrometheusReader, SourceError, iso
from spectax.sources.promql import horizon

log = logging.getLogger("spectax.fleet")
RETRY_SECONDS = 15.0  # a failed read is tried again this soon (or at the next window)
CATCH_UP_WINDOWS = 24  # windows read in one query after an outage
# After spectax was down, at most this much of the gap is read at start (the rest: backfill).
CATCH_UP_SECONDS = 86400.0


def cursor_sample(interval: Interval) -> EngineSample:
    """What a fleet endpoint's cursor holds: its models (the deltas come from Prometheus)."""
    return EngineSample("vllm", {model: ModelSample() for model in interval.models})


def carried(monitor: EndpointMonitor, interval: Interval, source: PrometheusSource) -> Interval:
    """The interval from the endpoint's last window on: the seconds (and so the spend) of
    the windows in which none of its series had a sample (Prometheus paused, every
    replica gone a while) go into the next one, as a direct scrape after a gap counts the
    gap; its tokens do too (spectax.sources.promql.horizon), within the same horizon."""
    last = monitor.cursor_time
    if last is None or not interval.start - horizon(source) < last < interval.start:
        return interval
    return replace(interval, start=last)


MonitorFactory = Callable[[Sequence[EndpointConfig]], AsyncIterator[EndpointMonitor]]
Emit = Callable[[EndpointMonitor, Observed | None], None]


class FleetSource:
    """One source's endpoints and the task that reads their windows."""

    def __init__(
        self,
        source: PrometheusSource,
        window: float,
        session: aiohttp.ClientSession,
        new_monitors: MonitorFactory,
        emit: Emit,
        reserved: frozenset[str] = frozenset(),
        resume: float | None = None,
    ):
        """`resume`: where the stored history of the fleet ends (a window's end); the
        windows from there on are read first, up to CATCH_UP_SECONDS back."""
        self.source = source
        self.window = window
        self.reader = PrometheusReader(source, session)
        self.monitors: dict[str, EndpointMonitor] = {}
        self._new_monitors = new_monitors
        self._emit = emit
        self._reserved = reserved  # the configured endpoints' names: never taken over
        self._health = LogOnce(log, "source", redact(source.url))
        self.next_end = aligned_start(time.time() - source.delay, window) + window
        if resume is not None:
            oldest = self.next_end - CATCH_UP_SECONDS
            self.next_end = max(oldest, min(self.next_end, aligned_start(resume, window) + window))

    async def run(self) -> None:
        while True:
            due = self.next_end + self.source.delay
            if (wait := due - time.time()) > 0:
                await asyncio.sleep(wait)
            try:
                read = await self.read_due(time.time())
            except Exception as exc:  # a bug must not stop the source for good: retry
                log.error(
                    "source %s: read failed: %s",
                    redact(self.source.url),
                    logs.blank_secrets(repr(exc))[:300],
                )
                read = False
            if not read:
                await asyncio.sleep(min(RETRY_SECONDS, self.window))

    async def read_due(self, now: float) -> bool:
        """Read every window whose end (plus `delay`) has passed; False when the source failed
        (the windows wait, and the endpoints show the error)."""
        last = aligned_start(now - self.source.delay, self.window)
        count = min(CATCH_UP_WINDOWS, int((last - self.next_end) // self.window) + 1)
        if count <= 0:
            return True
        bounds = [self.next_end - self.window + i * self.window for i in range(count + 1)]
        started = time.monotonic()
        try:
            windows = await self.reader.windows(bounds)
        except SourceError as exc:
            self._health.failed(
                "cannot read the windows up to %s (%d endpoint(s) wait): %s",
                iso(bounds[-1]),
                len(self.monitors),
                exc,
            )
            for monitor in self.monitors.values():  # one line for the source, not one each
                monitor.observe_failure(ScrapeError("connection", str(exc)), 0.0, told=True)
                self._emit(monitor, None)
            return False
        self._health.recovered("reading windows again from %s", iso(bounds[0]))
        # The endpoints found in this span resume before any window is handed on: their
        # writes still queued are looked up in the store writer's queue, which the windows
        # handed on would fill (20,000 endpoints found at once then scanned 20,000 growing
        # queues), and the store is read for them a batch at a time.
        seen = {name for found in windows.values() for name in found}
        if new := sorted(seen - self.monitors.keys() - self._reserved):
            await self._add(new)
        for end in bounds[1:]:
            for name, interval in sorted(windows[end].items()):
                if (found := self.monitors.get(name)) is not None:  # None: a reserved name
                    fed = carried(found, interval, self.source)
                    self._emit(found, found.observe_interval(fed, cursor_sample(interval)))
        for name in self.monitors.keys() - windows[bounds[-1]].keys():  # every replica gone
            gone = self.monitors[name]
            stale = "no sample in the last window: every replica gone, or no longer scraped"
            gone.observe_failure(ScrapeError("connection", f"{name}: {stale}"), 0.0)
            self._emit(gone, None)
        self.next_end = bounds[-1] + self.window
        log.debug(
            "%d window(s) of %d endpoint(s) read in %.2f s",
            count,
            len(self.monitors),
            time.monotonic() - started,
        )
        return True

    async def _add(self, names: Sequence[str]) -> None:
        """Monitors for the endpoints found, resumed from the store a batch at a time (a
        fleet's first read finds every endpoint at once)."""
        configs = [self.source.endpoint_config(name) for name in names]
        async for monitor in self._new_monitors(configs):
            self.monitors[monitor.config.name] = monitor
            log.info("endpoint %s: found in %s", monitor.config.name, redact(self.source.url))


class Fleet:
    """The daemon's fleet sources: started after the store is restored, stopped first."""

    def __init__(self) -> None:
        self.sources: list[FleetSource] = []
        self._tasks: list[asyncio.Task[None]] = []

    def start(
        self,
        sources: Iterable[PrometheusSource],
        window: float,
        session: aiohttp.ClientSession,
        resume: float | None,
        new_monitors: MonitorFactory,
        publish: Emit,
        reserved: frozenset[str] = frozenset(),
    ) -> None:
        """One task per source. `resume`: where the stored history of the fleet ends (the
        windows from there on are read first); `new_monitors` makes (priced, and resumed from
        the store) the monitors of the endpoints found, `publish` takes its new state and its
        closed windows; `reserved`: the configured endpoints' names, never taken over."""
        for source in sources:
            fleet = FleetSource(source, window, session, new_monitors, publish, reserved, resume)
            self.sources.append(fleet)
            self._tasks.append(asyncio.create_task(fleet.run(), name=f"fleet {source.url}"))

    async def stop(self) -> None:
        """Cancel the reads; the sources' endpoints go with them (a read is whole or not
        used, so nothing of theirs is left to write)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self.sources.clear()

    def snapshots(self) -> dict[str, EndpointSnapshot]:
        return {n: m.snapshot for s in self.sources for n, m in s.monitors.items()}
