"""Profiles (ECONOMICS.md §3b): one A/B teaches a profile; endpoints without a control use it.

An endpoint with a `control:` and a `profile:` learns the control's plain curve and the
step overhead its own windows imply against it; spectax stores it; an endpoint of the same
kind without a control names the same profile and gets its verdict on basis `profile`
instead of `default`.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from builders import queued
from recorded_pages import page
from spectax.config import validate
from spectax.counterfactual.profile_book import ProfileBook, baseline_profile_name, learned_profiles
from spectax.economics import PlainCurve
from spectax.endpoint import EndpointMonitor
from spectax.store import Store, StoreError

PROFILE = "tiny-llama-cpu-ngram"
# The control's plain curve: 1.2 ms per output token plus 0.06 ms per token per step, what
# the live tier's control showed (bench/README.md); fitted without a range to stay in.
CONTROL_CURVE = PlainCurve(0.0012, 0.00006, 40, (-0.05, 0.05))
PAGES = ["spec_ngram_0_before_traffic.txt", "spec_ngram_3_after.txt"]


def endpoints(*extra: dict) -> dict:
    spec = {"speculation": {"method": "ngram"}, "price": {"usd_per_hour": 4}}
    return validate(
        {
            "window": "1m",
            "endpoints": [
                {"name": "control", "url": "http://h:1"},
                {
                    "name": "teacher",
                    "url": "http://h:2",
                    "control": "control",
                    "profile": PROFILE,
                    **spec,
                },
                {"name": "student", "url": "http://h:3", "profile": PROFILE, **spec},
                *extra,
            ],
        }
    ).config.endpoints


def feed(monitor: EndpointMonitor) -> dict:
    """A window of traffic, closed by the next page: the stored row of the closed window."""
    monitor.observe_page(0, page(PAGES[0]), 0.01)
    monitor.observe_page(60, page(PAGES[1]), 0.01)
    write = queued(monitor.observe_page(120, page(PAGES[1]), 0.01))
    assert write is not None
    (row,) = [r for r in write.rows if r["output_tokens"]]
    return row


@pytest.fixture
async def store(database_url: str):
    store = await Store.open(database_url)
    yield store
    await store.close()


async def test_one_ab_teaches_a_profile_that_an_endpoint_without_a_control_uses(store) -> None:
    _, teacher_config, student_config = endpoints()
    book = ProfileBook()
    teacher = EndpointMonitor(
        teacher_config,
        None,
        60.0,
        control_curve=lambda: CONTROL_CURVE,
        profile=book.lookup(PROFILE),
    )
    student = EndpointMonitor(student_config, None, 60.0, profile=book.lookup(PROFILE))
    assert student.step_model().source == "configured"  # nothing learned yet
    taught = feed(teacher)
    (learned,) = learned_profiles(teacher.counterfactual)  # it has no baseline of its own
    assert learned.name == PROFILE and learned.source == "control"
    assert learned.plain == CONTROL_CURVE
    assert (taught["verdict_basis"], taught["ridge_batch_source"]) == ("calibrated", "control")
    assert learned.step_overhead_ratio == pytest.approx(taught["step_overhead_ratio"])

    await book.refresh(store, [teacher.counterfactual, student.counterfactual], datetime.now(UTC))
    stored = (await store.profiles())[PROFILE]
    assert stored.step_overhead_ratio == pytest.approx(learned.step_overhead_ratio)
    assert stored.plain is not None
    assert stored.plain.fixed_seconds == pytest.approx(CONTROL_CURVE.fixed_seconds)

    model = student.step_model()
    assert (model.source, model.basis, model.profile) == ("profile", "profile", PROFILE)
    seen = feed(student)
    assert (seen["verdict_basis"], seen["ridge_batch_source"]) == ("profile", "profile")
    # the same traffic, the same curve: the student's verdict is the teacher's
    assert seen["speedup_ratio"] == pytest.approx(taught["speedup_ratio"])
    assert seen["verdict"] == taught["verdict"]


async def test_a_profile_nobody_teaches_is_said_once_and_the_basis_stays_default(
    store, caplog
) -> None:
    *_, student_config = endpoints()
    book = ProfileBook()
    student = EndpointMonitor(student_config, None, 60.0, profile=book.lookup(PROFILE))
    for _ in range(2):
        await book.refresh(store, [student.counterfactual], datetime.now(UTC))
    said = [r for r in caplog.records if "is not stored yet" in r.getMessage()]
    assert len(said) == 1 and "spectax model fit" in said[0].getMessage()
    assert feed(student)["verdict_basis"] == "default"


async def test_a_store_outage_keeps_the_profiles_known(store, caplog) -> None:
    _, teacher_config, _ = endpoints()
    book = ProfileBook()
    teacher = EndpointMonitor(teacher_config, None, 60.0, control_curve=lambda: CONTROL_CURVE)
    feed(teacher)
    await book.refresh(store, [teacher.counterfactual], datetime.now(UTC))
    assert PROFILE in book.known

    class Down:  # the database goes away (its own outages are tests/test_faults.py's)
        async def save_profile(self, *_: object) -> None:
            raise StoreError("cannot write profile: connection refused")

    await book.refresh(Down(), [teacher.counterfactual], datetime.now(UTC))  # type: ignore[arg-type]
    assert PROFILE in book.known  # the last profiles read stay in force
    assert any("cannot refresh step-time profiles" in r.getMessage() for r in caplog.records)


def plain_window(i: int, batch: float, a: float, b: float):
    from spectax.engines.base import Histogram
    from spectax.pipeline.counts import Counts
    from spectax.pipeline.windows import Window

    counts = Counts(
        generation_tokens=1000,
        running_seconds=batch * 60,
        time_per_output_token=Histogram(sum=(a + b * batch) * 20, count=20),
    )
    return Window(start=i * 60, end=(i + 1) * 60, seconds=60, busy_seconds=60, models={"m": counts})


async def test_a_baseline_outlives_the_day_of_windows_a_restart_restores(store) -> None:
    """An endpoint's windows from before speculation give its plain curve; the store keeps it
    as `baseline/NAME`, so a restart a week later (restored windows reach back a day, all of
    them speculating by then) still prices against it, on basis calibrated."""
    from spectax.observed import Resume

    *_, student_config = endpoints()
    before = [plain_window(i, x, 0.004, 0.0002) for i, x in enumerate([1, 2, 4, 8, 12, 16, 2, 4])]
    book = ProfileBook()
    first = EndpointMonitor(student_config, None, 60.0, Resume(recent_windows=tuple(before)))
    assert first.step_model().source == "baseline"
    await book.refresh(store, [first.counterfactual], datetime.now(UTC))
    assert baseline_profile_name("student") in await store.profiles()

    later = EndpointMonitor(
        student_config, None, 60.0, baseline=book.lookup(baseline_profile_name("student"))
    )
    model = later.step_model()
    assert (model.source, model.basis) == ("baseline", "calibrated")
    assert model.ridge_batch == pytest.approx(20.0)
    assert feed(later)["verdict_basis"] == "calibrated"
