"""The scrape schedule: each endpoint on its own phase of the interval, no drift, no overlap.

On a virtual clock (tests/virtual_clock.py): time moves only when the test advances it, so
each test asserts the exact times of the scrapes, and none sleeps (a loaded machine woke a
real tick late, which the tests had to allow for)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from spectax.schedule import ScrapeSchedule
from virtual_clock import VirtualClock

INTERVAL = 4.0
TICK = 0.05


def schedule_on(
    clock: VirtualClock, scrape: Callable[[str], Coroutine[Any, Any, None]]
) -> ScrapeSchedule:
    return ScrapeSchedule(scrape, INTERVAL, tick=TICK, clock=clock.now, sleep=clock.sleep)


async def test_scrapes_spread_over_the_interval_and_keep_their_phase() -> None:
    clock = VirtualClock()
    starts: dict[str, list[float]] = defaultdict(list)

    async def scrape(name: str) -> None:
        starts[name].append(clock.now())
        await clock.sleep(0.5)  # a scrape takes time; the grid does not shift with it

    schedule = schedule_on(clock, scrape)
    began = clock.now()
    schedule.start(["a", "b", "c", "d"])
    await clock.advance(3 * INTERVAL - TICK / 2)
    await schedule.stop()
    for i, name in enumerate("abcd"):
        expected = [began + INTERVAL * (i / 4 + k) for k in range(3)]
        # Each on its own grid, at most a tick late, and late wake-ups never accumulate.
        assert starts[name] == pytest.approx(expected, abs=TICK + 1e-9), (name, starts[name])


async def test_a_scrape_still_running_is_not_started_again() -> None:
    clock = VirtualClock()
    running = most = started = 0

    async def slow(name: str) -> None:
        nonlocal running, most, started
        running += 1
        started += 1
        most = max(most, running)
        await clock.sleep(2.5 * INTERVAL)
        running -= 1

    schedule = schedule_on(clock, slow)
    schedule.start(["slow"])
    await clock.advance(4 * INTERVAL)
    await schedule.stop()
    # Started at 0 and at 3 intervals (it ran until 2.5): the turns at 1 and 2 were skipped.
    assert (most, started) == (1, 2)
    await clock.advance(3 * INTERVAL)
    assert not schedule.in_flight


async def test_a_crashing_scrape_is_logged_and_comes_back_next_turn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = VirtualClock()
    calls = 0

    async def broken(name: str) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("bug")

    schedule = schedule_on(clock, broken)
    with caplog.at_level(logging.ERROR, logger="spectax.schedule"):
        schedule.start(["x"])
        await clock.advance(1.5 * INTERVAL)
        await schedule.stop()
    assert calls == 2
    assert "endpoint x: scrape crashed" in caplog.text and "RuntimeError: bug" in caplog.text


async def test_stop_and_replace() -> None:
    """After stop nothing starts; replace (a reload) schedules the new set, none pauses."""
    clock = VirtualClock()
    seen: list[tuple[str, float]] = []

    async def scrape(name: str) -> None:
        seen.append((name, clock.now()))

    schedule = schedule_on(clock, scrape)
    began = clock.now()
    schedule.start(["a"])
    await clock.advance(TICK * 5)
    schedule.replace([], INTERVAL)
    await clock.advance(2 * INTERVAL)
    assert seen == [("a", began)]
    replaced = clock.now()
    schedule.replace(["b"], INTERVAL / 2)
    await clock.advance(INTERVAL - TICK / 2)
    await schedule.stop()
    # From the next tick on, every half interval.
    assert [name for name, _ in seen[1:]] == ["b", "b"]
    times = [at for _, at in seen[1:]]
    assert times == pytest.approx([replaced, replaced + INTERVAL / 2], abs=TICK + 1e-9)
    await clock.advance(2 * INTERVAL)
    assert len(seen) == 3
