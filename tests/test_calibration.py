"""Ridge batch calibration, cold-start money and the measured speedup inside a monitor."""

from __future__ import annotations

import itertools
import random
from decimal import Decimal

import pytest

from conftest import page
from spectax.config import validate
from spectax.economics.calibration import (
    CHEAP_FIT_POINTS,
    REFIT_EVERY,
    StepPoint,
    fit_ridge_batch,
    step_point,
    theil_sen,
)
from spectax.endpoint import CALIBRATION_POINTS, EndpointMonitor
from spectax.engines.base import Histogram
from spectax.pipeline.counts import Counts
from spectax.pipeline.windows import Window
from spectax.store import Restored


def points_on_line(a: float, b: float, xs: list[float], noise: float = 0.0) -> list[StepPoint]:
    rng = random.Random(7)
    return [StepPoint(x, a + b * x + rng.gauss(0, noise)) for x in xs]


def test_theil_sen_recovers_a_line_despite_outliers() -> None:
    points = points_on_line(0.016, 0.0005, [float(x) for x in range(4, 100, 4)])
    points[3] = StepPoint(points[3].tokens_per_step, 5.0)  # a compile pause
    points[10] = StepPoint(points[10].tokens_per_step, 0.0)
    fit = theil_sen(points)
    assert fit is not None
    assert fit[0] == pytest.approx(0.016, rel=1e-9) and fit[1] == pytest.approx(0.0005, rel=1e-9)


def test_sound_fit_gives_b_star() -> None:
    xs = [8.0, 12, 16, 24, 32, 48, 64, 96, 128, 20]
    fit = fit_ridge_batch(points_on_line(0.016, 0.0005, xs, noise=0.0002))
    assert fit is not None
    assert fit.ridge_batch == pytest.approx(32, rel=0.15)


@pytest.mark.parametrize(
    ("xs", "a", "b", "why"),
    [
        ([8.0, 12, 16, 24, 32, 48, 64], 0.016, 0.0005, "too few windows"),
        ([30.0, 31, 32, 33, 34, 35, 36, 37, 38, 39], 0.016, 0.0005, "no spread"),
        ([8.0, 12, 16, 24, 32, 48, 64, 96, 128], -0.01, 0.0005, "negative intercept"),
        ([8.0, 12, 16, 24, 32, 48, 64, 96, 128], 0.016, -0.0001, "negative slope"),
        ([8.0, 12, 16, 24, 32, 48, 64, 96, 128], 0.016, 1e-12, "flat: B* = 1.6e10"),
    ],
)
def test_unsound_fits_are_refused(xs, a, b, why) -> None:
    assert fit_ridge_batch(points_on_line(a, b, xs)) is None, why


def test_step_point_counts_the_rejected_drafts_the_gpu_verified() -> None:
    counts = Counts(
        generation_tokens=1000,
        draft_tokens=800,
        accepted_tokens=600,
        iteration_tokens=Histogram(sum=3000, count=100),
        inter_token_latency=Histogram(sum=4.0, count=200),
    )
    point = step_point(Window(start=0, end=300, seconds=300, models={"m": counts}))
    assert point == StepPoint(tokens_per_step=(3000 + 200) / 100, step_seconds=0.02)


def monitor(billing_mode: str = "serverless", **endpoint: object) -> EndpointMonitor:
    settings = validate(
        {
            "window": "5m",
            "endpoints": [
                {
                    "name": "e",
                    "url": "http://127.0.0.1:1",
                    "price": {"usd_per_hour": 36},
                    "gpus": 2,
                    "billing_mode": billing_mode,
                    "speculation": {"method": "eagle", "draft_weight_bytes": 4 * 10**9},
                    "weight_load_bytes_per_second": 10**9,
                    **endpoint,
                }
            ],
        }
    )
    config = settings.config.endpoints[0]
    return EndpointMonitor(config, settings.usd_per_hour["e"], 300.0)


def test_cold_start_on_serverless_is_timed_and_priced() -> None:
    m = monitor()
    before, after = page("spec_ngram_3_after.txt"), page("spec_ngram_restart_2_mid.txt")
    from spectax.engines import get_parser

    started = get_parser("vllm")(after).process_start_time_seconds
    assert started is not None
    m.observe_page(started - 30, before, 0.01)
    m.observe_page(started + 12, after, 0.01)  # first scrape of the new process, 12 s after it
    snap = m.snapshot
    assert snap.cold_starts_total == 1
    assert snap.last_cold_start_seconds == pytest.approx(12)
    # 12 s x 2 GPUs x 36 USD/h = 0.24 USD, of which loading the 4 GB draft took 4 s: 0.08 USD
    assert snap.cold_start_usd_total == Decimal("0.24")
    window = snap.window
    assert window is not None and window.draft_load_usd == Decimal("0.08")
    # the busy interval (42 s) and the cold start are both on the invoice
    assert snap.spend_usd_total == Decimal("0.84") + Decimal("0.24")
    a = snap.assessments["tiny-llama"]
    assert a.speculation_savings_usd == pytest.approx(
        a.busy_spend_usd * (a.speedup_ratio - 1) - 0.08
    )


def test_cold_start_on_provisioned_costs_nothing_extra() -> None:
    m = monitor("provisioned", cold_start_seconds="20s")
    m.observe_page(1000, page("spec_ngram_3_after.txt"), 0.01)
    m.observe_page(1015, page("spec_ngram_restart_2_mid.txt"), 0.01)  # start time not in between
    assert m.snapshot.cold_starts_total == 1
    assert m.snapshot.last_cold_start_seconds == 20  # configured, since it cannot be measured
    assert m.snapshot.cold_start_usd_total == 0
    assert m.snapshot.spend_usd_total == Decimal("0.3")  # 15 s x 2 x 36/h


def test_calibration_survives_a_restart() -> None:
    """Closed windows from the store feed the fit at start-up: B* is calibrated at once."""
    windows = []
    for i, tokens_per_step in enumerate([8, 12, 16, 24, 32, 48, 64, 96]):
        step = 0.016 + 0.0005 * tokens_per_step
        counts = Counts(
            generation_tokens=1000,
            iteration_tokens=Histogram(sum=tokens_per_step * 100, count=100),
            inter_token_latency=Histogram(sum=step * 100, count=100),
        )
        windows.append(Window(start=i * 300, end=(i + 1) * 300, seconds=300, models={"m": counts}))
    fresh = monitor()
    assert fresh.snapshot.ridge_source == "configured" and fresh.parameters.ridge_batch == 32
    m = EndpointMonitor(
        fresh.config, fresh.usd_per_hour, 300.0, Restored(recent_windows=tuple(windows))
    )
    assert m.snapshot.ridge_source == "calibrated"
    assert m.parameters.ridge_batch == pytest.approx(32.0)


def step_window(i: int, tokens_per_step: float, a: float, b: float) -> Window:
    """A closed 5-minute window whose mean step time lies on step = a + b * tokens."""
    counts = Counts(
        generation_tokens=1000,
        iteration_tokens=Histogram(sum=tokens_per_step * 100, count=100),
        inter_token_latency=Histogram(sum=(a + b * tokens_per_step) * 100, count=100),
    )
    return Window(start=i * 300, end=(i + 1) * 300, seconds=300, models={"m": counts})


def test_calibration_fits_once_there_are_enough_windows_then_hourly_and_keeps_a_day() -> None:
    """Theil-Sen over a day of windows costs ~12 ms, and 2,000 endpoints close their windows
    together: after the first fit a monitor refits every 12 windows (staggered by endpoint),
    on the last 288 windows only."""
    xs = [8.0, 12, 16, 24, 32, 48, 64, 96]
    base = Restored(
        recent_windows=tuple(step_window(i, x, 0.016, 0.0005) for i, x in enumerate(xs))
    )
    fresh = monitor()
    m = EndpointMonitor(fresh.config, fresh.usd_per_hour, 300.0, base)
    assert m.snapshot.ridge_batch == pytest.approx(32.0)  # 8 windows: the first fit at once
    # the GPU changes: step = 0.032 + 0.0005 tokens (B* = 64), one window at a time
    refits = []
    for i in range(8, 8 + 2 * REFIT_EVERY + 1):
        before = m.snapshot.ridge_fit
        m.calibrate([step_window(i, xs[i % len(xs)], 0.032, 0.0005)])
        if m.snapshot.ridge_fit is not before:
            refits.append(i)
    assert len(refits) >= 2
    assert all(b - a == REFIT_EVERY for a, b in itertools.pairwise(refits))
    assert m.snapshot.ridge_batch > 32.0  # the new windows pull B* toward 64
    for i in range(8, 8 + CALIBRATION_POINTS + 50):
        m.calibrate([step_window(i, xs[i % len(xs)], 0.032, 0.0005)])
    assert len(m.calibration) == CALIBRATION_POINTS
    assert m.snapshot.ridge_batch == pytest.approx(64.0)  # the old day has left the fit


def test_an_uncalibrated_monitor_fits_as_soon_as_the_data_allows() -> None:
    """The live-vLLM tier's case: windows at one concurrency first (no spread: no fit), then
    at another. The fit must hold at the first window that gives it spread, not an hour on."""
    m = monitor()
    for i in range(9):
        m.calibrate([step_window(i, 8.0, 0.016, 0.0005)])
    assert m.snapshot.ridge_source == "configured"
    m.calibrate([step_window(9, 64.0, 0.016, 0.0005)])
    assert m.snapshot.ridge_source == "calibrated"


def test_a_refused_fit_is_retried_hourly_once_the_history_is_large() -> None:
    """CPU vLLM's steps fit a line whose B* is implausible: the data is there, the fit is
    refused. Such an endpoint must not pay a fit over a day of points at every window;
    while the history is small (cheap fits) it keeps trying, so warm-up windows cannot
    hold a sound fit back an hour."""
    xs = [8.0, 12, 16, 24, 32, 48, 64, 96]
    m = monitor()
    cheap = CHEAP_FIT_POINTS
    tried = []
    for i in range(cheap + 3 * REFIT_EVERY):
        before = m.calibration.fits
        # step = 1 s + 1 us per token: B* = 1,000,000 requests, beyond any GPU
        m.calibrate([step_window(i, xs[i % len(xs)], 1.0, 0.000001)])
        tried.append(m.calibration.fits - before)
    assert m.snapshot.ridge_source == "configured"
    # every window while the history (this window's point included) is under `cheap`
    assert tried[: cheap - 1] == [1] * (cheap - 1)
    assert sum(tried[cheap - 1 :]) <= 4  # then once an hour: 37 windows


def test_refits_are_staggered_across_endpoints() -> None:
    """Endpoints close their windows at the same instants; their hourly refits must not all
    fall on the same one."""
    xs = [8.0, 12, 16, 24, 32, 48, 64, 96]
    names = [f"replica-{i}" for i in range(12)]
    settings = validate(
        {"window": "5m", "endpoints": [{"name": n, "url": "http://127.0.0.1:1"} for n in names]}
    )
    second_fit = set()
    for config in settings.config.endpoints:
        m = EndpointMonitor(config, None, 300.0)
        fits = 0
        for i in range(3 * REFIT_EVERY):
            before = m.snapshot.ridge_fit
            m.calibrate([step_window(i, xs[i % len(xs)], 0.016, 0.0005)])
            if m.snapshot.ridge_fit is not before:
                fits += 1
                if fits == 2:
                    second_fit.add(i)
                    break
    assert len(second_fit) >= 4, second_fit


def test_refits_stay_staggered_after_a_restart() -> None:
    """A restart restores every endpoint's day of points at the same instant; their hourly
    refits must still fall on different windows."""
    xs = [8.0, 12, 16, 24, 32, 48, 64, 96]
    day = tuple(step_window(i, xs[i % len(xs)], 0.016, 0.0005) for i in range(288))
    names = [f"replica-{i}" for i in range(12)]
    settings = validate(
        {"window": "5m", "endpoints": [{"name": n, "url": "http://127.0.0.1:1"} for n in names]}
    )
    first_refit = set()
    for config in settings.config.endpoints:
        m = EndpointMonitor(config, None, 300.0, Restored(recent_windows=day))
        assert m.snapshot.ridge_source == "calibrated"
        for i in range(288, 288 + REFIT_EVERY):
            before = m.snapshot.ridge_fit
            m.calibrate([step_window(i, xs[i % len(xs)], 0.016, 0.0005)])
            if m.snapshot.ridge_fit is not before:
                first_refit.add(i)
                break
    assert len(first_refit) >= 4, first_refit


def test_measured_speedup_reads_the_control_window() -> None:
    control = monitor(billing_mode="provisioned")
    m = EndpointMonitor(
        monitor().config, Decimal(1), 60.0, control_window=lambda: control.snapshot.window
    )
    early = EndpointMonitor(  # a 5-minute window, only a minute of it seen yet
        monitor().config, Decimal(1), 300.0, control_window=lambda: control.snapshot.window
    )
    control.observe_page(0, page("nospec_0_before_traffic.txt"), 0.01)
    control.observe_page(60, page("nospec_3_after.txt"), 0.01)
    for monitor_ in (m, early):
        monitor_.observe_page(0, page("spec_ngram_0_before_traffic.txt"), 0.01)
        monitor_.observe_page(60, page("spec_ngram_3_after.txt"), 0.01)
    assert early.snapshot.assessments["tiny-llama"].speedup_measured_ratio is None
    ours = m.snapshot.window.time_per_output_token("tiny-llama")
    theirs = control.snapshot.window.time_per_output_token("tiny-llama")
    a = m.snapshot.assessments["tiny-llama"]
    assert a.speedup_measured_ratio == pytest.approx(theirs / ours)
    assert a.verdict == ("pays" if theirs / ours > 1 else "tax")


def test_a_restart_during_the_last_fetch_of_the_old_process_is_still_timed() -> None:
    """The old page was rendered just before the restart but stamped when its answer arrived,
    after it: the new process's start precedes the previous stamp by less than a fetch."""
    m = monitor()
    from spectax.engines import get_parser

    after = page("spec_ngram_restart_2_mid.txt")
    started = get_parser("vllm")(after).process_start_time_seconds
    assert started is not None
    m.observe_page(started + 0.4, page("spec_ngram_3_after.txt"), 0.5)  # slow fetch
    m.observe_page(started + 3.0, after, 0.01)
    assert m.snapshot.cold_starts_total == 1
    assert m.snapshot.last_cold_start_seconds == pytest.approx(3.0)
