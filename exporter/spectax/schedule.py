"""When each endpoint is scraped: its own offset within the interval, on a fixed grid.

Like Prometheus' scrape loops, every endpoint keeps a fixed phase, so scrapes
spread evenly over the interval instead of bursting, and never drift. One task
wakes every `tick` seconds and starts the scrapes that fell due since the last
tick. At fleet scale this matters: one APScheduler job per endpoint cost about
0.23 ms of CPU per scrape in bookkeeping and wake-ups, one timer per endpoint
about 0.09 ms, the tick about 0.02 ms (bench/README.md, "Fleet scale").
APScheduler keeps the daemon's other periodic jobs (rollup, billing): `Jobs`.

A scrape still running when its next turn comes is not started twice: that
turn is skipped, as Prometheus does.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from datetime import UTC
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

log = logging.getLogger(__name__)
TICK_SECONDS = 0.05
UNWIND_SECONDS = 2.0  # for a cancelled job's cleanup (a rollback) at a stop


class ScrapeSchedule:
    def __init__(
        self,
        scrape: Callable[[str], Coroutine[Any, Any, None]],
        interval: float,
        tick: float = TICK_SECONDS,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        """`clock` and `sleep` are the event loop's time and `asyncio.sleep` unless given
        (a test's virtual clock, which advances time instead of waiting for it)."""
        self._scrape = scrape
        self.interval = interval
        self._tick = tick
        self._clock = clock
        self._sleep = sleep
        self._due: list[tuple[float, int, str]] = []  # (loop time, tie-breaker, endpoint)
        self._order = itertools.count()
        self._running: dict[str, asyncio.Task[None]] = {}
        self._ticker: asyncio.Task[None] | None = None

    @property
    def in_flight(self) -> set[asyncio.Task[None]]:
        return set(self._running.values())

    def start(self, names: Iterable[str]) -> None:
        """Scrape `names` from now on, the i-th of n first at i/n of the interval."""
        self.replace(names, self.interval)
        self._ticker = asyncio.create_task(self._tick_loop(), name="scrape-schedule")

    def replace(self, names: Iterable[str], interval: float) -> None:
        """Schedule `names` anew (a reload; none: pause); scrapes in flight finish on their own."""
        self.interval = interval
        listed = list(names)
        now = self._now()
        count = max(len(listed), 1)
        self._due = [
            (now + self.interval * i / count, next(self._order), name)
            for i, name in enumerate(listed)
        ]
        heapq.heapify(self._due)

    async def stop(self) -> None:
        """Start no more scrapes; those in flight go on (the caller bounds them)."""
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
            self._ticker = None

    def _finished(self, task: asyncio.Task[None]) -> None:
        name = task.get_name().removeprefix("scrape:")
        self._running.pop(name, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("endpoint %s: scrape crashed", name, exc_info=task.exception())

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    async def _tick_loop(self) -> None:
        while True:
            now = self._now()
            while self._due and self._due[0][0] <= now:
                at, _, name = heapq.heappop(self._due)
                if name in self._running:
                    log.debug("endpoint %s: previous scrape still running, turn skipped", name)
                else:
                    task = asyncio.create_task(self._scrape(name), name=f"scrape:{name}")
                    self._running[name] = task
                    task.add_done_callback(self._finished)
                # the next turn on this endpoint's grid that is still ahead
                turns = int((now - at) // self.interval) + 1
                heapq.heappush(self._due, (at + turns * self.interval, next(self._order), name))
            await self._sleep(self._tick)


class Jobs:
    """The daemon's periodic jobs under APScheduler (rollup, profiles; billing adds its
    own to `scheduler`). A stop lets the runs in flight finish, bounded, and cancels the
    rest before the store closes.

    APScheduler's `shutdown(wait=False)` cancels a running coroutine job and awaits
    nothing: the job unwound while the store closed under it and the process ended, and on
    SQLite its connection's rollback was cut off ("Exception during reset"), which could
    leave aiosqlite's worker thread, not a daemon thread, holding the process after SIGTERM.
    """

    def __init__(self) -> None:
        self.scheduler = AsyncIOScheduler(timezone=UTC)
        self._running: set[asyncio.Task[None]] = set()

    def every(
        self, seconds: float, job: Callable[[], Coroutine[Any, Any, None]], **options: Any
    ) -> None:
        """Run `job` every `seconds`, each run a task of its own that `finish` can wait for."""

        @functools.wraps(job)
        async def run() -> None:
            task = asyncio.create_task(job(), name=f"job:{job.__name__}")
            self._running.add(task)
            task.add_done_callback(self._running.discard)
            await asyncio.wait({task})
            if not task.cancelled():  # cancelled by `finish`: the stop says so, not an error
                task.result()

        self.scheduler.add_job(run, "interval", seconds=seconds, **options)

    def start(self) -> None:
        self.scheduler.start()

    def pause(self) -> None:
        """No new runs (a stop has begun)."""
        if self.scheduler.running:
            self.scheduler.pause()

    async def finish(self, grace: float) -> None:
        """Wait up to `grace` s for the runs in flight, then cancel the rest and let them
        unwind (a transaction rolls back), UNWIND_SECONDS at most, before returning."""
        for task in await finish_tasks(self._running, grace):
            log.warning("stopping: %s cut short after %g s", task.get_name(), grace)
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)


async def finish_tasks(tasks: Iterable[asyncio.Task[Any]], grace: float) -> set[asyncio.Task[Any]]:
    """Wait up to `grace` s for `tasks`, then cancel the rest and give them UNWIND_SECONDS
    to unwind (a transaction rolls back); a cleanup that shields itself must not hold a
    stop for good. Returns the tasks that were cancelled."""
    if not (tasks := set(tasks)):
        return set()
    _, pending = await asyncio.wait(tasks, timeout=grace)
    for task in pending:
        task.cancel()
    if pending:
        _, stuck = await asyncio.wait(pending, timeout=UNWIND_SECONDS)
        for task in stuck:
            log.error("stopping: %s did not unwind in %g s", task.get_name(), UNWIND_SECONDS)
    return pending
