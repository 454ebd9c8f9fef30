"""Full garbage-collector passes come shortly after a /metrics read, or on a timer, never
on Python's own schedule (spectax.gc_pacing), so a read rarely meets one."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest

from spectax.gc_pacing import NEVER, FullCollections


@pytest.fixture
def full_passes() -> Iterator[list[int]]:
    """The generation of each collector pass that starts, as Python reports them."""
    seen: list[int] = []

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(callback)
    try:
        yield seen
    finally:
        gc.callbacks.remove(callback)


def churn(objects: int) -> None:
    """Long-lived objects replaced all the time, as snapshots are: each survives a while."""
    kept: list[Any] = []
    for i in range(objects):
        node: dict[str, Any] = {"i": i}
        node["self"] = node  # a cycle: only the collector frees it
        kept.append(node)
        if len(kept) > 20_000:
            del kept[:10_000]


async def test_no_full_pass_of_its_own_one_after_a_read_and_the_old_schedule_back(
    full_passes: list[int],
) -> None:
    before = gc.get_threshold()
    collections = FullCollections(min_gap=0.0, max_gap=3600.0)
    collections.start()
    try:
        assert gc.get_threshold() == (before[0], before[1], NEVER)
        churn(600_000)  # with Python's thresholds: several full passes
        assert 2 not in full_passes, "Python ran a full pass of its own"
        collections.after_read()
        collections.after_read()  # one pass for reads that come together
        assert 2 not in full_passes, "not during the read"
        assert await until(lambda: collections.passes >= 1, 10.0)
        await asyncio.sleep(0.6)
        assert full_passes.count(2) == 1 and collections.passes == 1
    finally:
        collections.stop()
    assert gc.get_threshold() == before
    full_passes.clear()
    churn(600_000)
    assert 2 in full_passes, "Python's own schedule is back"


async def until(condition: Any, seconds: float) -> bool:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def test_a_read_soon_after_a_pass_waits_and_nobody_reading_still_gets_one(
    full_passes: list[int],
) -> None:
    soon = FullCollections(min_gap=60.0, max_gap=3600.0)
    soon.start()  # counts as the last pass
    try:
        soon.after_read()  # less than min_gap since: no pass of its own
        await asyncio.sleep(1.0)  # twice the wait after a read
        assert soon.passes == 0 and 2 not in full_passes
    finally:
        soon.stop()
    idle = FullCollections(min_gap=60.0, max_gap=0.5)
    idle.start()
    try:  # nobody reads: the timer, 0.5 s after start, then 0.5 s after the last pass
        assert await until(lambda: idle.passes >= 2, 10.0)
        assert full_passes.count(2) == idle.passes
    finally:
        idle.stop()
    passes = idle.passes
    await asyncio.sleep(1.0)
    assert idle.passes == passes, "stopped: no more passes"


async def test_a_second_pacer_leaves_python_its_schedule_on_stop() -> None:
    """Two daemons in one process (tests): whichever stops last, the threshold is Python's."""
    before = gc.get_threshold()
    first, second = FullCollections(), FullCollections()
    first.start()
    second.start()
    second.stop()
    first.stop()
    assert gc.get_threshold() == before
    first.start()
    second.start()
    first.stop()
    second.stop()
    assert gc.get_threshold() == before
