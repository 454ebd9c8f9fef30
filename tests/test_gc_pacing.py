"""Full garbage-collector passes come shortly after a /metrics read, or on a timer, never
on Python's own schedule (spectax.gc_pacing), so a read rarely meets one."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from spectax.gc_pacing import AFTER_READ_SECONDS, NEVER, FullCollections
from virtual_clock import VirtualClock

CHURNED = 20_000  # at the thresholds of `small_heap`: 6 full passes on Python's schedule


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


@pytest.fixture
def small_heap() -> Iterator[None]:
    """Python's schedule of full passes, shown on thousands of objects, not 600,000: the
    process's heap is frozen (Python runs a full pass only once the oldest generation grew
    by a quarter of what the last one kept: in the whole suite's process that took 600,000
    objects, 2.7 s) and the thresholds lowered (a full pass every ~2,500 new objects, not
    every ~77,000)."""
    saved = gc.get_threshold()
    gc.freeze()
    gc.collect()  # what the last full pass kept, of which a quarter counts: nothing
    gc.set_threshold(100, 4, 4)
    try:
        yield
    finally:
        gc.set_threshold(*saved)
        gc.unfreeze()


def churn(objects: int) -> None:
    """Long-lived objects replaced all the time, as snapshots are: each survives a while."""
    kept: list[Any] = []
    for i in range(objects):
        node: dict[str, Any] = {"i": i}
        node["self"] = node  # a cycle: only the collector frees it
        kept.append(node)
        if len(kept) > 2_000:
            del kept[:1_000]


def paced(clock: VirtualClock, min_gap: float, max_gap: float) -> FullCollections:
    return FullCollections(min_gap, max_gap, clock=clock.now, call_later=clock.call_later)


@pytest.mark.usefixtures("small_heap")
async def test_no_full_pass_of_its_own_one_after_a_read_and_the_old_schedule_back(
    full_passes: list[int],
) -> None:
    before = gc.get_threshold()
    clock = VirtualClock()
    collections = paced(clock, min_gap=0.0, max_gap=3600.0)
    collections.start()
    try:
        assert gc.get_threshold() == (before[0], before[1], NEVER)
        churn(CHURNED)  # with Python's thresholds: several full passes (the end of this test)
        assert 2 not in full_passes, "Python ran a full pass of its own"
        collections.after_read()
        collections.after_read()  # one pass for reads that come together
        await clock.advance(AFTER_READ_SECONDS / 2)
        assert 2 not in full_passes, "not during the read"
        await clock.advance(AFTER_READ_SECONDS / 2)
        assert full_passes.count(2) == 1 and collections.passes == 1
        await clock.advance(3599.0)  # the next, nobody reading, is 3,600 s after this one
        assert full_passes.count(2) == 1 and collections.passes == 1
    finally:
        collections.stop()
    assert gc.get_threshold() == before
    full_passes.clear()
    churn(CHURNED)
    assert full_passes.count(2) >= 2, "Python's own schedule is back"


@pytest.mark.usefixtures("small_heap")  # its passes walk thousands of objects, not the heap
async def test_a_read_soon_after_a_pass_waits_and_nobody_reading_still_gets_one(
    full_passes: list[int],
) -> None:
    clock = VirtualClock()
    collections = paced(clock, min_gap=60.0, max_gap=120.0)
    collections.start()  # counts as the last pass
    try:
        await clock.advance(30.0)
        collections.after_read()  # less than min_gap since: no pass of its own
        await clock.advance(2 * AFTER_READ_SECONDS)
        assert collections.passes == 0 and 2 not in full_passes
        await clock.advance(29.0)  # 60 s since the last
        collections.after_read()
        await clock.advance(AFTER_READ_SECONDS)
        assert collections.passes == 1
        await clock.advance(119.0)  # nobody reads: the timer, 120 s after the last pass
        assert collections.passes == 1
        await clock.advance(1.0)
        assert collections.passes == 2
        await clock.advance(120.0)
        assert collections.passes == 3 and full_passes.count(2) == 3
    finally:
        collections.stop()
    await clock.advance(1000.0)
    assert collections.passes == 3, "stopped: no more passes"


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
