"""Plain-curve calibration (the counterfactual, ECONOMICS.md §3b), cold-start money and the
measured speedup inside a monitor."""

from __future__ import annotations

import dataclasses
import itertools
import random
from datetime import UTC, datetime
from decimal import Decimal
from types import SimpleNamespace

import pytest

from builders import monitor_of, ngram_settings, scrape_write
from recorded_pages import page
from spectax.config import validate
from spectax.counterfactual.in_force import CALIBRATION_POINTS
from spectax.economics import PlainCurve, fit_plain_curve, plain_point
from spectax.economics.calibration import (
    CHEAP_FIT_POINTS,
    PLAIN_POINT_FIELDS,
    REFIT_EVERY,
    StepPoint,
)
from spectax.economics.step_model import fit_or_refusal
from spectax.endpoint import EndpointMonitor
from spectax.engines.base import Histogram
from spectax.observed import Resume
from spectax.pipeline.counts import Counts
from spectax.pipeline.windows import Window
from spectax.store.rows import counter_columns, window_from_rows


def points_on_line(
    a: float, b: float, xs: list[float], noise: float = 0.0
) -> list[tuple[float, float]]:
    rng = random.Random(7)
    return [(x, a + b * x + rng.gauss(0, noise)) for x in xs]


def test_theil_sen_recovers_a_line_despite_outliers() -> None:
    points = points_on_line(0.016, 0.0005, [float(x) for x in range(4, 100, 4)])
    points[3] = (points[3][0], 5.0)  # a compile pause
    points[10] = (points[10][0], 0.0)
    fit = fit_plain_curve(points, 8, 1.5)
    assert fit is not None
    assert fit.fixed_seconds == pytest.approx(0.016, rel=1e-9)
    assert fit.per_token_seconds == pytest.approx(0.0005, rel=1e-9)
    # the two outliers are outside the 10th-90th percentile band of residuals
    assert fit.residuals == (pytest.approx(0.0, abs=1e-9), pytest.approx(0.0, abs=1e-9))


def test_sound_fit_gives_b_star_and_its_spread() -> None:
    xs = [8.0, 12, 16, 24, 32, 48, 64, 96, 128, 20]
    fit = fit_plain_curve(points_on_line(0.016, 0.0005, xs, noise=0.0002), 8, 1.5)
    assert fit is not None
    assert fit.ridge_batch == pytest.approx(32, rel=0.15)
    low, high = fit.residuals
    assert -0.05 < low < 0 < high < 0.05
    assert fit.covers(8.0 / 2) and fit.covers(128.0 * 2) and not fit.covers(128.0 * 2.1)


def test_points_at_one_load_are_refused_not_stored_as_a_flat_curve() -> None:
    """A control at constant load says what plain decoding costs at that load, not how it
    grows: a flat line has B* = inf, which the demo once logged as "plain curve fitted" and
    showed as a source. It is refused, with why."""
    points = points_on_line(0.02, 0.0, [31.0, 32, 33, 34] * 3)
    assert fit_plain_curve(points, 8, 1.5) is None
    why = fit_or_refusal(points, 8, 1.5)
    assert isinstance(why, str) and "did not spread" in why and "31.0-34.0" in why
    level = points_on_line(0.02, 0.0, [8.0, 12, 16, 24, 32, 48, 64, 96, 128])  # slope 0
    assert isinstance(fit_or_refusal(level, 8, 1.5), str)


@pytest.mark.parametrize(
    ("xs", "a", "b", "why"),
    [
        ([8.0, 12, 16, 24, 32, 48, 64], 0.016, 0.0005, "too few windows"),
        ([8.0, 12, 16, 24, 32, 48, 64, 96, 128], -0.01, 0.0005, "negative intercept"),
        ([8.0, 12, 16, 24, 32, 48, 64, 96, 128], 0.016, -0.0001, "negative slope"),
    ],
)
def test_unsound_fits_are_refused(xs, a, b, why) -> None:
    assert fit_plain_curve(points_on_line(a, b, xs), 8, 1.5) is None, why


def test_only_windows_without_speculation_are_plain_points() -> None:
    """A speculating window's time per token is not what the same output costs without
    speculation (§3b): it gives no point. A plain one gives (B(1 + P/G), TPOT)."""
    plain = Counts(
        generation_tokens=1000,
        prompt_tokens=500,
        running_seconds=1200.0,
        time_per_output_token=Histogram(sum=0.4, count=20),
    )
    window = Window(start=0, end=300, seconds=300, busy_seconds=300, models={"m": plain})
    assert plain_point(window) == StepPoint(tokens_per_step=4.0 * 1.5, step_seconds=0.02)
    # Busy a third of its span, it ran the same steps: the batch of its busy seconds,
    # not the time-average over the idle ones too (4 / 3, which floors to one request).
    third = Window(start=0, end=900, seconds=900, busy_seconds=300, models={"m": plain})
    assert third.concurrency("m") == pytest.approx(4 / 3)
    assert plain_point(third) == StepPoint(tokens_per_step=4.0 * 1.5, step_seconds=0.02)
    speculating = Counts(
        generation_tokens=1000,
        draft_tokens=800,
        accepted_tokens=600,
        time_per_output_token=Histogram(sum=0.4, count=20),
    )
    assert (
        plain_point(
            Window(start=0, end=300, seconds=300, busy_seconds=300, models={"m": speculating})
        )
        is None
    )
    # SGLang and TGI count verify steps but no drafted tokens: they speculate all the same
    steps_only = Counts(
        generation_tokens=1000, drafts=300, time_per_output_token=Histogram(sum=0.4, count=20)
    )
    assert (
        plain_point(
            Window(start=0, end=300, seconds=300, busy_seconds=300, models={"m": steps_only})
        )
        is None
    )
    few = Counts(generation_tokens=10, time_per_output_token=Histogram(sum=0.1, count=3))
    assert (
        plain_point(Window(start=0, end=300, seconds=300, busy_seconds=300, models={"m": few}))
        is None
    )


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
    window = m.window()
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


def plain_window(i: int, batch: float, a: float, b: float) -> Window:
    """A closed 5-minute window without speculation whose time per output token lies on
    a + b * tokens per step, at `batch` running requests (no prompt tokens: n = B)."""
    counts = Counts(
        generation_tokens=1000,
        running_seconds=batch * 300,
        time_per_output_token=Histogram(sum=(a + b * batch) * 20, count=20),
    )
    return Window(
        start=i * 300, end=(i + 1) * 300, seconds=300, busy_seconds=300, models={"m": counts}
    )


def curve_of(m: EndpointMonitor) -> PlainCurve | None:
    return m.counterfactual.calibration.fit


def test_a_baseline_survives_a_restart_and_becomes_the_counterfactual() -> None:
    """The endpoint's own windows from before speculation, restored from the store, give its
    plain curve at once: the counterfactual's source is `baseline`, B* = a/b."""
    windows = [
        plain_window(i, x, 0.016, 0.0005) for i, x in enumerate([8, 12, 16, 24, 32, 48, 64, 96])
    ]
    fresh = monitor()
    assert (
        fresh.step_model().source == "configured"
        and fresh.parameters().step_model.ridge_batch == 32
    )
    m = EndpointMonitor(
        fresh.config, fresh.usd_per_hour, 300.0, Resume(recent_windows=tuple(windows))
    )
    model = m.step_model()
    assert model.source == "baseline" and model.basis == "calibrated"
    assert model.ridge_batch == pytest.approx(32.0)


def test_the_control_comes_before_the_baseline_and_a_profile_before_the_configuration() -> None:
    from spectax.economics import Profile

    control_curve = PlainCurve(0.004, 0.0001, 10, (0.0, 0.0), (1.0, 10.0))
    profile = Profile("llama-8b-h100-eagle3", "control", "endpoint x", 50.0, 0.6)
    windows = tuple(
        plain_window(i, x, 0.016, 0.0005) for i, x in enumerate([8, 12, 16, 24, 32, 48, 64, 96])
    )
    config = monitor(profile="llama-8b-h100-eagle3").config
    both = EndpointMonitor(
        config,
        None,
        300.0,
        Resume(recent_windows=windows),
        control_curve=lambda: control_curve,
        profile=lambda: profile,
    )
    assert both.step_model().source == "control" and both.step_model().ridge_batch == pytest.approx(
        40
    )
    only_profile = EndpointMonitor(config, None, 300.0, profile=lambda: profile)
    model = only_profile.step_model()
    assert (model.source, model.basis, model.profile) == (
        "profile",
        "profile",
        "llama-8b-h100-eagle3",
    )
    assert (model.ridge_batch, model.step_overhead_ratio) == (50.0, 0.6)
    nothing = EndpointMonitor(config, None, 300.0, profile=lambda: None)
    assert nothing.step_model().source == "configured"


def test_calibration_fits_once_there_are_enough_windows_then_hourly_and_keeps_a_day() -> None:
    """Theil-Sen over a day of windows costs ~12 ms, and 2,000 endpoints close their windows
    together: after the first fit a monitor refits every 12 windows (staggered by endpoint),
    on the last 288 windows only."""
    xs = [8.0, 12, 16, 24, 32, 48, 64, 96]
    base = Resume(recent_windows=tuple(plain_window(i, x, 0.016, 0.0005) for i, x in enumerate(xs)))
    fresh = monitor()
    m = EndpointMonitor(fresh.config, fresh.usd_per_hour, 300.0, base)
    assert m.step_model().ridge_batch == pytest.approx(32.0)  # 8 windows: the first fit at once
    # the GPU changes: TPOT = 0.032 + 0.0005 tokens (B* = 64), one window at a time
    refits = []
    for i in range(8, 8 + 2 * REFIT_EVERY + 1):
        before = curve_of(m)
        m.counterfactual.calibrate([plain_window(i, xs[i % len(xs)], 0.032, 0.0005)])
        if curve_of(m) is not before:
            refits.append(i)
    assert len(refits) >= 2
    assert all(b - a == REFIT_EVERY for a, b in itertools.pairwise(refits))
    assert m.step_model().ridge_batch > 32.0  # the new windows pull B* toward 64
    for i in range(8, 8 + CALIBRATION_POINTS + 50):
        m.counterfactual.calibrate([plain_window(i, xs[i % len(xs)], 0.032, 0.0005)])
    assert len(m.counterfactual.calibration) == CALIBRATION_POINTS
    assert m.step_model().ridge_batch == pytest.approx(64.0)  # the old day has left the fit


def test_an_uncalibrated_monitor_fits_as_soon_as_the_data_allows() -> None:
    m = monitor()
    for i in range(7):
        m.counterfactual.calibrate([plain_window(i, 8.0, 0.016, 0.0005)])
    assert m.step_model().source == "configured"
    m.counterfactual.calibrate([plain_window(7, 64.0, 0.016, 0.0005)])
    assert m.step_model().source == "baseline"


def test_a_refused_fit_is_retried_hourly_once_the_history_is_large() -> None:
    """A fit that keeps being refused (here: time per token falling with load, a negative
    slope) must not cost a fit over a day of points at every window; while the history is
    small (cheap fits) it keeps trying, so warm-up windows cannot hold a sound fit back."""
    xs = [8.0, 12, 16, 24, 32, 48, 64, 96]
    m = monitor()
    cheap = CHEAP_FIT_POINTS
    tried = []
    for i in range(cheap + 3 * REFIT_EVERY):
        before = m.counterfactual.calibration.fits
        m.counterfactual.calibrate([plain_window(i, xs[i % len(xs)], 0.1, -0.0005)])
        tried.append(m.counterfactual.calibration.fits - before)
    assert m.step_model().source == "configured"
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
            before = curve_of(m)
            m.counterfactual.calibrate([plain_window(i, xs[i % len(xs)], 0.016, 0.0005)])
            if curve_of(m) is not before:
                fits += 1
                if fits == 2:
                    second_fit.add(i)
                    break
    assert len(second_fit) >= 4, second_fit


def test_refits_stay_staggered_after_a_restart() -> None:
    """A restart restores every endpoint's day of points at the same instant; their hourly
    refits must still fall on different windows."""
    xs = [8.0, 12, 16, 24, 32, 48, 64, 96]
    day = tuple(plain_window(i, xs[i % len(xs)], 0.016, 0.0005) for i in range(288))
    names = [f"replica-{i}" for i in range(12)]
    settings = validate(
        {"window": "5m", "endpoints": [{"name": n, "url": "http://127.0.0.1:1"} for n in names]}
    )
    first_refit = set()
    for config in settings.config.endpoints:
        m = EndpointMonitor(config, None, 300.0, Resume(recent_windows=day))
        assert curve_of(m) is not None
        for i in range(288, 288 + REFIT_EVERY):
            before = curve_of(m)
            m.counterfactual.calibrate([plain_window(i, xs[i % len(xs)], 0.016, 0.0005)])
            if curve_of(m) is not before:
                first_refit.add(i)
                break
    assert len(first_refit) >= 4, first_refit


def test_measured_speedup_reads_the_control_window() -> None:
    control = monitor(billing_mode="provisioned")
    m = EndpointMonitor(monitor().config, Decimal(1), 60.0, control_window=control.window)
    early = EndpointMonitor(  # a 5-minute window, only a minute of it seen yet
        monitor().config, Decimal(1), 300.0, control_window=control.window
    )
    control.observe_page(0, page("nospec_0_before_traffic.txt"), 0.01)
    control.observe_page(60, page("nospec_3_after.txt"), 0.01)
    for monitor_ in (m, early):
        monitor_.observe_page(0, page("spec_ngram_0_before_traffic.txt"), 0.01)
        monitor_.observe_page(60, page("spec_ngram_3_after.txt"), 0.01)
    assert early.snapshot.assessments["tiny-llama"].speedup_measured_ratio is None
    ours, theirs = m.window(), control.window()
    assert ours is not None and theirs is not None
    ours_tpot = ours.time_per_output_token("tiny-llama")
    theirs_tpot = theirs.time_per_output_token("tiny-llama")
    a = m.snapshot.assessments["tiny-llama"]
    assert a.speedup_measured_ratio == pytest.approx(theirs_tpot / ours_tpot)
    assert a.verdict == ("pays" if theirs_tpot / ours_tpot > 1 else "tax")


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


def test_a_profile_of_another_method_lends_only_its_ridge_batch_and_curve(caplog) -> None:
    """h and c are the method's: a draft model's profile says nothing of what an EAGLE
    head's step costs. The endpoint keeps its own h and the h range of its defaults (its
    band is not narrowed by another method's fit), and the log says so once."""
    from spectax.economics import Profile

    curve = PlainCurve(0.004, 0.0001, 10, (-0.05, 0.05), None)
    drafted = Profile("llama", "sweep", "a sweep", 50.0, 2.3, 0.4, curve, 12, 0.02, "draft_model")
    config = monitor(profile="llama").config  # speculation: eagle
    other = EndpointMonitor(config, None, 300.0, profile=lambda: drafted)
    with caplog.at_level("WARNING", logger="spectax.monitor"):
        model = other.step_model()
        other.step_model()
    assert (model.source, model.ridge_batch, model.curve) == ("sweep", 50.0, curve)
    assert model.step_overhead_ratio == config.step_overhead_ratio  # not the profile's 2.3
    assert not model.overhead_known and model.step_overhead_range()[1] >= 3.0
    told = [r for r in caplog.records if "learned with draft_model" in r.getMessage()]
    assert len(told) == 1 and "eagle" in told[0].getMessage()
    same = EndpointMonitor(
        config, None, 300.0, profile=lambda: dataclasses.replace(drafted, method="eagle")
    )
    assert same.step_model().step_overhead_ratio == 2.3 and same.step_model().overhead_known


@pytest.mark.parametrize(
    "pages",
    [
        ("nospec_0_before_traffic.txt", "nospec_2_mid.txt", "nospec_3_after.txt"),
        ("nospec_chat_t07_c4_before.txt", "nospec_chat_t07_c4_after.txt"),
        ("spec_ngram_0_before_traffic.txt", "spec_ngram_2_mid.txt", "spec_ngram_3_after.txt"),
    ],
)
def test_the_fields_a_restart_reads_give_the_calibration_the_same_points(pages) -> None:
    """A restart reads only PLAIN_POINT_FIELDS of its day of stored windows: each recorded
    window's plain point from those alone is its point from the whole window (a plain point
    for the plain pages, none for the speculating ones). Fails once plain_point reads a
    field the list lacks."""
    m = monitor_of(ngram_settings(), 60.0)
    writes = [w for i, name in enumerate(pages) for w in scrape_write(m, 100.0 * i, page(name))]
    windows: dict[object, list[SimpleNamespace]] = {}
    for write in writes:
        for row in write.rows:  # the last write of a window is the one stored
            windows.setdefault(row["start"], []).append(SimpleNamespace(**row))
    points = []
    for rows in windows.values():
        last = rows[-len({r.model for r in rows}) :]
        whole, part = window_from_rows(last), window_from_rows(last, PLAIN_POINT_FIELDS)
        assert plain_point(part, min_requests=1) == plain_point(whole, min_requests=1)
        points.append(plain_point(whole, min_requests=1))
    speculating = pages[0].startswith("spec_")
    assert any(p is not None for p in points) != speculating


@pytest.mark.parametrize(
    "counts",
    [
        Counts(  # eight requests at a time over the busy half, prompts prefilled alongside
            generation_tokens=4000,
            prompt_tokens=1000,
            requests_finished=40,
            running_seconds=8 * 150,
            time_per_output_token=Histogram(0.9, 40, [(0.025, 30), (float("inf"), 40)]),
        ),
        Counts(  # SGLang's and TGI's way: drafts counted, drafted tokens not
            generation_tokens=4000,
            drafts=900,
            running_seconds=8 * 150,
            time_per_output_token=Histogram(0.9, 40),
        ),
        Counts(  # drafted tokens counted, drafts not
            generation_tokens=4000,
            draft_tokens=2700,
            running_seconds=8 * 150,
            time_per_output_token=Histogram(0.9, 40),
        ),
    ],
)
def test_a_restarts_fields_give_every_counts_point(counts: Counts) -> None:
    """As above, on counts the recorded pages lack: a batch above one, and drafts or drafted
    tokens counted without the other."""
    columns = {
        "endpoint": "e",
        "model": "m",
        "start": datetime(2026, 12, 1, tzinfo=UTC),
        "end": datetime(2026, 12, 1, 0, 5, tzinfo=UTC),
        "seconds": 300.0,
        "busy_seconds": 150.0,
        "restarts": 0,
        "unobserved_seconds": 0.0,
        "spend_usd": None,
        "cold_start_usd": None,
        "draft_load_usd": None,
    }
    row = SimpleNamespace(**columns, **counter_columns(counts))
    whole, part = window_from_rows([row]), window_from_rows([row], PLAIN_POINT_FIELDS)
    assert whole.models["m"] == counts
    assert plain_point(part, min_requests=1) == plain_point(whole, min_requests=1)
