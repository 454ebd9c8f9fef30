"""Python's full garbage-collector passes, moved off the `/metrics` request path.

A full pass stops the event loop while it walks every tracked object: at 2,000 endpoints
120–200 ms, about every 10 s. Each scrape replaces an endpoint's snapshot, so objects
reach the oldest generation fast and Python's rule (a full pass once a quarter of it is
new) fires often. A `/metrics` read that meets one is late by that much, and a few such
reads are the p99 (bench/README.md, "Direct mode's memory at 2,000 endpoints").

So the daemon turns automatic full passes off and runs them itself: shortly after a
`/metrics` response, when the next read is usually seconds away (Prometheus reads every
15 s), at most every `min_gap` seconds, and every `max_gap` seconds when nobody reads.
The young generations are collected by Python as before. Cyclic garbage that reached the
oldest generation now waits for the next pass: up to `max_gap` (30 s) when nobody reads,
against ~10 s on Python's schedule at 2,000 endpoints.

The clock and the timer are the monotonic clock and the event loop's `call_later` unless
given: a test gives a virtual clock's, and advances time instead of waiting for it.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from typing import Protocol

# A full pass only when gen 2's count exceeds this: never, in practice (it counts gen-1
# passes, ~1 a second here). Python's own default is 10.
NEVER = 2**31 - 1
AFTER_READ_SECONDS = 0.5  # a scrape's response (0.5 MB gzipped) is written by then, mostly


class Cancellable(Protocol):
    def cancel(self) -> object: ...


CallLater = Callable[[float, Callable[[], None]], Cancellable]


def _loop_call_later(delay: float, callback: Callable[[], None]) -> Cancellable:
    return asyncio.get_running_loop().call_later(delay, callback)


class FullCollections:
    def __init__(
        self,
        min_gap: float = 10.0,
        max_gap: float = 30.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        call_later: CallLater = _loop_call_later,
    ):
        self._min_gap, self._max_gap = min_gap, max_gap
        self._clock, self._call_later = clock, call_later
        self._last = clock()
        self._saved: tuple[int, int, int] | None = None
        self._timer: Cancellable | None = None
        self._soon: Cancellable | None = None
        self.passes = 0

    def start(self) -> None:
        """From now on, full passes only here (Python's young-generation passes go on)."""
        young, middle, oldest = gc.get_threshold()
        if oldest == NEVER:  # another instance paces already (a test's second daemon)
            return
        self._saved = (young, middle, oldest)
        gc.set_threshold(young, middle, NEVER)
        self._arm()

    def stop(self) -> None:
        """Python's own schedule back (a stopped daemon may still run in a test's process)."""
        for handle in (self._timer, self._soon):
            if handle is not None:
                handle.cancel()
        self._timer = self._soon = None
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None

    def after_read(self) -> None:
        """A `/metrics` response is on its way: a full pass shortly, if one is due."""
        if self._saved is None or self._soon is not None:
            return
        if self._clock() - self._last >= self._min_gap:
            self._soon = self._call_later(AFTER_READ_SECONDS, self._collect)

    def _collect(self) -> None:
        if self._soon is not None:  # the timer's pass: an after-read one would be a second
            self._soon.cancel()
        self._soon = None
        gc.collect()
        self.passes += 1
        self._last = self._clock()
        self._arm()

    def _arm(self) -> None:
        """The pass that comes when nobody reads: `max_gap` after the last."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._call_later(self._max_gap, self._collect)
