"""`spectax demo --history 30d`: a month of simulated history, written fast, for the report.

The demo endpoints' simulators (`spectax.simulate`, the mixed fleet) run in fast
mode, one window at a time, all endpoints abreast, and their pages go through the
daemon's own code path: `EndpointMonitor.observe_page` turns them into windows
with spend and assessments, the row codec (`store.rows`) into window rows,
`Store.save` writes them, `Store.rollup` sums them into hours and days, once a
simulated day for the whole fleet. A few engine restarts
(cold starts) are spread over the span; traffic follows a daily cycle. Everything is
seeded: the same span gives the same history. The step-time histograms' sums are
left out of the stored rows: the fast path makes them from steady-state means, and a
daemon started later on this store must not calibrate its ridge batch on them.

Each window carries its verdict, band and basis as the daemon's do (the
monitor assesses it). The daemon prices an endpoint with a `control:` on the
plain curve it fits to the control's windows; the fast path's means are no
material for that fit, so the demo hands the monitor the curve the fit would
converge to, the control simulator's own a + b*n (exact: no residual spread).
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from spectax.config import Settings
from spectax.economics import PlainCurve, Profile
from spectax.endpoint import EndpointMonitor
from spectax.endpoint_config import EndpointConfig
from spectax.observed import Observed
from spectax.report.period import Month
from spectax.simulate.bench_sweep import simulated_profile
from spectax.simulate.demo_fleet import DEMO_METHODS, DEMO_URLS, demo_settings
from spectax.simulate.sim_profiles import DEMO_PROFILES, SimProfile
from spectax.simulate.vllm_engine import SimulatedVllm
from spectax.store import Store
from spectax.store.rows import pending_write
from spectax.units import from_timestamp

WINDOW_SECONDS = 3600.0
DAY = 86400.0
MAX_SPAN = 400 * DAY
# Daily traffic cycle per demo endpoint (amplitude of the diurnal load).
DIURNAL = {
    "code-assistant": 0.5,
    "chat-creative": 0.3,
    "chat-control": 0.3,
    "support-bot": 0.4,
    "summarizer": 0.2,
    "docs-qa": 0.5,
    "edge-assistant": 0.6,
    "office-chat": 0.9,  # 4 requests at night, 76 at the day's peak: across its crossover
}
RESTARTS_PER_WEEK = 1.5
NO_CALIBRATION = 10**9  # more windows than a monitor keeps: the fit never runs
_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(h|d|w)\s*$")
_UNIT = {"h": 3600.0, "d": DAY, "w": 7 * DAY}


@dataclass(frozen=True, slots=True)
class HistoryWritten:
    start: float
    end: float
    windows: int
    cold_starts: int
    endpoints: tuple[str, ...]
    window_seconds: float = WINDOW_SECONDS

    @property
    def main_month(self) -> Month:
        """The calendar month holding most of the span: the one to report on."""
        covered: dict[Month, float] = {}
        t = self.start
        while t < self.end:
            month = Month.of(from_timestamp(t))
            stop = min(self.end, month.end.timestamp())
            covered[month] = covered.get(month, 0.0) + (stop - t)
            t = stop
        return max(covered, key=lambda m: (covered[m], m))


def parse_span(text: str) -> float:
    """`30d`, `720h`, `6w` -> seconds (at least one hour, at most 400 days)."""
    match = _SPAN.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a span of history: give hours, days or weeks, e.g. 30d")
    seconds = float(match.group(1)) * _UNIT[match.group(2)]
    if not 3600.0 <= seconds <= MAX_SPAN:
        raise ValueError(f"{text!r}: the history span must be between 1h and 400d")
    return seconds


def history_profile(name: str, profile: SimProfile) -> SimProfile:
    """The endpoint's traffic over a day (the live demo's cycle may be minutes long)."""
    return replace(
        profile, diurnal_amplitude=DIURNAL.get(name, 0.0), cycle_seconds=DAY, cycle_from_start=False
    )


async def write_demo_history(
    base: Settings,
    span_seconds: float,
    now: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    window_seconds: float = WINDOW_SECONDS,
    restarts_per_week: float = RESTARTS_PER_WEEK,
    swept: Mapping[str, str] | None = None,
) -> HistoryWritten:
    """Simulate `span_seconds` of the demo endpoints up to `now` and store it, rolled up.

    Windows are an hour long by default: the report reads hourly and daily rollups,
    which are the same whatever the window length, and the store writes an hour's
    window once instead of twelve 5-minute ones. `swept` (endpoint -> profile name, as
    `DEMO_SWEPT`): endpoints judged on the profile a simulated sweep of their model
    teaches, stored with the history, as the live demo does.
    """
    swept = swept or {}
    settings = demo_settings(base, DEMO_URLS, swept)
    profiles = {
        endpoint: simulated_profile(name, endpoint, DEMO_PROFILES[endpoint], DEMO_METHODS[endpoint])
        for endpoint, name in swept.items()
    }
    now = time.time() if now is None else now
    end = (now // window_seconds) * window_seconds
    windows = int(span_seconds // window_seconds)
    start = end - windows * window_seconds
    boundaries = [start + k * window_seconds for k in range(1, windows + 1)]
    store = await Store.open(settings.config.database_url)
    try:
        with _quiet_monitors():
            return await _simulate(store, settings, profiles, (start, boundaries),
                                   window_seconds, restarts_per_week, progress)  # fmt: skip
    finally:
        await store.close()


@contextlib.contextmanager
def _quiet_monitors() -> Iterator[None]:
    """The monitors' INFO lines off while history is simulated: each simulated restart said
    "engine restarted" (35 lines for 30 days), when the summary counts them all at the end."""
    monitor = logging.getLogger("spectax.monitor")
    level = monitor.level
    monitor.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        monitor.setLevel(level)


async def _simulate(
    store: Store,
    settings: Settings,
    profiles: Mapping[str, Profile],
    span: tuple[float, list[float]],
    window_seconds: float,
    restarts_per_week: float,
    progress: Callable[[int, int], None] | None,
) -> HistoryWritten:
    """Run every endpoint's simulator and monitor from `span`'s start over its window ends,
    storing a UTC day at once."""
    start, boundaries = span
    end = boundaries[-1] if boundaries else start
    endpoints = settings.config.endpoints
    steps = sum(1 for t in boundaries if t % DAY == 0 or t == end)
    done = 0
    for profile in profiles.values():
        await store.save_profile(profile, from_timestamp(start))
    runs = [_EndpointRun.start(endpoint, settings, start, end, window_seconds,
                               restarts_per_week, profiles.get(endpoint.name))
            for endpoint in endpoints]  # fmt: skip
    cold_starts = sum(len(run.restarts) for run in runs)
    for t in boundaries:
        for run in runs:
            run.step_to(t)
        if t % DAY == 0 or t == end:  # a UTC day is stored, then rolled up once for all
            for run in runs:
                if t == end:
                    run.pending += _rows(run.monitor.flush())  # the last window, at `end`
                await store.save(run.monitor.config.name, run.pending, None)
                run.pending = []
            await store.rollup()
            done += 1
            if progress is not None:
                progress(done, steps)
    return HistoryWritten(
        start, end, len(boundaries), cold_starts, tuple(e.name for e in endpoints), window_seconds
    )


@dataclass
class _EndpointRun:
    """One demo endpoint's simulator, monitor, restart times and unsaved windows."""

    sim: SimulatedVllm
    monitor: EndpointMonitor
    restarts: list[float]
    pending: list[dict[str, Any]]

    @classmethod
    def start(
        cls,
        endpoint: EndpointConfig,
        settings: Settings,
        start: float,
        end: float,
        window_seconds: float,
        restarts_per_week: float,
        swept: Profile | None = None,
    ) -> _EndpointRun:
        profile = history_profile(endpoint.name, DEMO_PROFILES[endpoint.name])
        sim = SimulatedVllm(profile, start)
        # B* stays the configured one, which is the simulator's own a/b: the fast path's
        # steady-state latency means are no material for the Theil-Sen calibration.
        config = endpoint.model_copy(update={"calibration_min_windows": NO_CALIBRATION})
        monitor = EndpointMonitor(
            config,
            settings.usd_per_hour.get(endpoint.name),
            window_seconds,
            control_curve=_control_curve(endpoint),
            profile=(lambda: swept) if swept is not None else None,
        )
        rng = random.Random(profile.seed * 7919 + int(start // DAY))
        restarts = _restart_times(rng, start, end, window_seconds, restarts_per_week)
        monitor.observe_page(start, sim.render(), 0.01)  # the baseline scrape
        return cls(sim, monitor, restarts, [])

    def step_to(self, t: float) -> None:
        """Simulate up to the window boundary `t` (restarting on the way) and scrape there."""
        sim, monitor = self.sim, self.monitor
        while self.restarts and self.restarts[0] < t:
            at = self.restarts.pop(0)
            sim.advance(max(0.0, at - sim.now), fast=True)
            sim.restart()
            # The daemon's next scrape succeeds once the engine is up again.
            sim.advance(sim.profile.cold_start_s + 1.0, fast=True)
            if sim.now < t:
                self.pending += _rows(monitor.observe_page(sim.now, sim.render(), 0.01))
        sim.advance(max(0.0, t - sim.now), fast=True)
        self.pending += _rows(monitor.observe_page(t, sim.render(), 0.01))


# The fast path's per-step figures are steady-state means, not measurements: kept out of the
# store, so that a daemon started on this history does not calibrate its ridge batch on them.
_STEP_COLUMNS = (
    "iteration_tokens_sum",
    "iteration_tokens_count",
    "inter_token_latency_sum",
    "inter_token_latency_count",
)


def _rows(observed: Observed | None) -> list[dict[str, Any]]:
    if observed is None:
        return []
    return [{**row, **dict.fromkeys(_STEP_COLUMNS)} for row in pending_write(observed).rows]


def _control_curve(endpoint: EndpointConfig) -> Callable[[], PlainCurve | None] | None:
    """The control's plain curve, as the daemon would have fitted it: its simulator's step time
    a + b*n, which is plain decoding's time per output token at n tokens a step."""
    control = DEMO_PROFILES.get(endpoint.control or "")
    if control is None:
        return None
    curve = PlainCurve(control.step_a, control.step_b, points=1)
    return lambda: curve


def _restart_times(
    rng: random.Random, start: float, end: float, window_seconds: float, per_week: float
) -> list[float]:
    """Engine restarts at random times, `per_week` a week on average, never in the first hour."""
    if per_week <= 0:
        return []
    rate = per_week / (7 * DAY)
    times: list[float] = []
    t = start + 3600.0
    while True:
        t += rng.expovariate(rate)
        if t >= end - window_seconds:
            return times
        times.append(t)
