"""The scrape schedule: each endpoint on its own phase of the interval, no drift, no overlap."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict

import pytest

from spectax.schedule import ScrapeSchedule

INTERVAL = 0.4
TICK = 0.01
SLACK = 0.15  # a loaded CI machine may wake the tick late; never by a whole interval


async def test_scrapes_spread_over_the_interval_and_keep_their_phase() -> None:
    loop = asyncio.get_running_loop()
    starts: dict[str, list[float]] = defaultdict(list)

    async def scrape(name: str) -> None:
        starts[name].append(loop.time())
        await asyncio.sleep(0.05)  # a scrape takes time; the grid does not shift with it

    schedule = ScrapeSchedule(scrape, INTERVAL, tick=TICK)
    began = loop.time()
    schedule.start(["a", "b", "c", "d"])
    await asyncio.sleep(3 * INTERVAL + 0.05)
    await schedule.stop()
    for i, name in enumerate("abcd"):
        times = starts[name]
        assert len(times) >= 3, (name, times)
        offset = times[0] - began
        assert abs(offset - INTERVAL * i / 4) < SLACK, (name, offset)
        for k, t in enumerate(times):  # on its own grid: late wake-ups do not accumulate
            assert abs(t - (times[0] + k * INTERVAL)) < SLACK, (name, k, t - times[0])


async def test_a_scrape_still_running_is_not_started_again() -> None:
    running = 0
    most = 0
    started = 0

    async def slow(name: str) -> None:
        nonlocal running, most, started
        running += 1
        started += 1
        most = max(most, running)
        await asyncio.sleep(2.5 * INTERVAL)
        running -= 1

    schedule = ScrapeSchedule(slow, INTERVAL, tick=TICK)
    schedule.start(["slow"])
    await asyncio.sleep(4 * INTERVAL)
    await schedule.stop()
    assert most == 1
    assert 1 < started <= 2  # turns that fell due while it ran were skipped
    await asyncio.gather(*schedule.in_flight)


async def test_a_crashing_scrape_is_logged_and_comes_back_next_turn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0

    async def broken(name: str) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("bug")

    schedule = ScrapeSchedule(broken, INTERVAL, tick=TICK)
    with caplog.at_level(logging.ERROR, logger="spectax.schedule"):
        schedule.start(["x"])
        await asyncio.sleep(1.5 * INTERVAL)
        await schedule.stop()
    assert calls == 2
    assert "endpoint x: scrape crashed" in caplog.text and "RuntimeError: bug" in caplog.text


async def test_stop_and_replace() -> None:
    """After stop nothing starts; replace (a reload) schedules the new set, none pauses."""
    seen: list[str] = []

    async def scrape(name: str) -> None:
        seen.append(name)

    schedule = ScrapeSchedule(scrape, INTERVAL, tick=TICK)
    schedule.start(["a"])
    await asyncio.sleep(TICK * 5)
    schedule.replace([], INTERVAL)
    await asyncio.sleep(INTERVAL + SLACK)
    assert seen == ["a"]
    schedule.replace(["b"], INTERVAL / 2)
    await asyncio.sleep(INTERVAL / 2 + SLACK)
    await schedule.stop()
    count = len(seen)
    await asyncio.sleep(INTERVAL)
    assert seen[0] == "a" and set(seen[1:]) == {"b"} and len(seen) == count >= 2
