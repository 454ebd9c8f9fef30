"""A virtual clock for code that takes `clock` and `sleep` (spectax.schedule) or `clock` and
`call_later` (spectax.gc_pacing): time moves only when a test advances it, so a test of
timing asserts exact times and never sleeps."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable


class VirtualClock:
    """`now()`, `sleep(seconds)` and `call_later(seconds, callback)` in virtual time;
    `advance(seconds)` runs every sleeper and callback that falls due in order, letting the
    tasks it wakes run before time moves on."""

    def __init__(self, start: float = 1000.0):
        self.time = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.time + max(seconds, 0.0), next(self._order), future))
        await future

    def call_later(self, seconds: float, callback: Callable[[], None]) -> asyncio.Future[None]:
        """As the event loop's: the callback runs once `advance` reaches it, unless the
        returned handle is cancelled first."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.time + max(seconds, 0.0), next(self._order), future))
        future.add_done_callback(lambda done: None if done.cancelled() else callback())
        return future

    async def advance(self, seconds: float) -> None:
        until = self.time + seconds
        await _settle()
        while self._sleepers and self._sleepers[0][0] <= until:
            at, _, future = heapq.heappop(self._sleepers)
            self.time = max(self.time, at)
            if not future.done():
                future.set_result(None)
            await _settle()
        self.time = until


async def _settle() -> None:
    """Let every task that can run, run (a woken task may start others)."""
    for _ in range(20):
        await asyncio.sleep(0)
