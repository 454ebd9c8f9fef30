"""One monitor per endpoint: scrape, window, assess, and publish an immutable snapshot.

Like Home Assistant's DataUpdateCoordinator, a monitor keeps the last good
data, whether the last update succeeded and why not, and logs a failure once
and the recovery once. The collector behind `/metrics` only ever reads the
snapshot the monitor last published.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from spectax.config import EndpointConfig
from spectax.economics import formulas as economics
from spectax.economics.calibration import (
    RidgeFit,
    StepHistory,
    can_fit,
    fit_ridge_batch,
    step_point,
)
from spectax.engines import get_parser
from spectax.engines.base import EngineSample, ParseError
from spectax.pipeline.windows import (
    AlignedWindows,
    Interval,
    SlidingWindow,
    Window,
    interval_between,
    speedup_against_control,
)
from spectax.scrape import ScrapeError
from spectax.store.rows import window_rows
from spectax.store.windows import Restored
from spectax.store.writer import PendingWrite
from spectax.units import NANO

log = logging.getLogger(__name__)

CALIBRATION_POINTS = 288  # a day of 5-minute windows
REFIT_EVERY = 12  # new points (an hour of 5-minute windows) between two calibration fits
# Below this many points a fit costs under ~0.1 ms (Theil-Sen is quadratic): a refused fit
# is retried at every window, so warm-up windows cannot hold a sound fit back an hour.
CHEAP_FIT_POINTS = 48
FETCH_SLACK_SECONDS = 10.0  # the longest a fetch may take (the default scrape timeout)
FULL_WINDOW_SHARE = 0.8  # a sliding window this full counts as full (scrapes jitter)


@dataclass(frozen=True, slots=True)
class EndpointSnapshot:
    """What `/metrics` shows for one endpoint. Replaced whole, never mutated."""

    config: EndpointConfig
    usd_per_hour: Decimal | None
    up: bool = False
    engine_metrics: bool = False
    scrape_duration_seconds: float | None = None
    last_success_timestamp: float | None = None
    last_error: str | None = None
    failures: dict[str, int] = field(default_factory=dict)
    spend_usd_total: Decimal = Decimal(0)
    cold_starts_total: int = 0
    cold_start_usd_total: Decimal = Decimal(0)
    last_cold_start_seconds: float | None = None
    tokens_total: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    ridge_batch: float = economics.DEFAULT_RIDGE_BATCH
    ridge_fit: RidgeFit | None = None
    assessments: dict[str, economics.Assessment] = field(default_factory=dict)
    window: Window | None = None

    @property
    def ridge_source(self) -> str:
        return "calibrated" if self.ridge_fit is not None else "configured"


ControlLookup = Callable[[], Window | None]


class EndpointMonitor:
    def __init__(
        self,
        config: EndpointConfig,
        usd_per_hour: Decimal | None,
        window_seconds: float,
        restored: Restored | None = None,
        control_window: ControlLookup | None = None,
    ):
        restored = restored or Restored()
        self.config = config
        self.usd_per_hour = usd_per_hour
        self._parse = get_parser(config.engine)
        self._last = restored.cursor
        self._sliding = SlidingWindow(window_seconds)
        self._aligned = AlignedWindows(window_seconds, restored.open_window)
        self._control_window = control_window
        self._steps = StepHistory(CALIBRATION_POINTS)
        # Refits are staggered over the hour by endpoint: windows close at the same instant
        # everywhere, and 2,000 fits at once would stall scraping for seconds.
        self._refit_phase = zlib.crc32(config.name.encode()) % REFIT_EVERY
        self._points_since_fit = self._refit_phase
        self._fit_refused = False  # the last fit was computed and found unsound
        self._failing = False
        self.snapshot = EndpointSnapshot(
            config,
            usd_per_hour,
            spend_usd_total=restored.spend_usd_total,
            cold_start_usd_total=restored.cold_start_usd_total,
            ridge_batch=config.ridge_batch,
        )
        self._calibrate(restored.recent_windows)

    @property
    def parameters(self) -> economics.Parameters:
        spec = self.config.speculation
        return economics.Parameters(
            draft_cost_ratio=spec.cost_ratio if spec else 0.0,
            ridge_batch=self.snapshot.ridge_batch,
            draft_weight_bytes=spec.draft_weight_bytes if spec else None,
            gpu_memory_bytes=self.config.gpu_memory_bytes,
        )

    # ------------------------------------------------------------ feeding

    def observe_page(self, now: float, text: str, duration: float) -> PendingWrite | None:
        """Feed one successfully fetched page; returns what the store must write, if anything."""
        try:
            sample = self._parse(text)
        except ParseError as exc:
            self.observe_failure(ScrapeError("parse", f"malformed /metrics page: {exc}"), duration)
            return None
        if self._failing:
            log.info("endpoint %s: scraping again", self.config.name)
            self._failing = False
        if not sample.has_engine_metrics and (self.snapshot.engine_metrics or not self.snapshot.up):
            log.warning(
                "endpoint %s: the page has no engine metrics (is vLLM running with "
                "--disable-log-stats?); spend is still accrued",
                self.config.name,
            )
        previous = self._last
        closed = self._observe(now, sample)
        self._publish(now, sample, duration)
        if previous is None:  # the baseline: a crash before the first window closes resumes here
            return PendingWrite(self.config.name, [], (now, sample))
        if not closed:
            return None
        # The interval that closed them lies in the new open window: the stored history
        # reaches up to the previous sample, so that is where a restart must resume.
        return PendingWrite(self.config.name, [r for w in closed for r in self.rows(w)], previous)

    def observe_failure(self, error: ScrapeError, duration: float) -> None:
        if not self._failing:
            log.warning(
                "endpoint %s: scrape failed (%s): %s", self.config.name, error.reason, error
            )
            self._failing = True
        failures = dict(self.snapshot.failures)
        failures[error.reason] = failures.get(error.reason, 0) + 1
        self.snapshot = replace(
            self.snapshot,
            up=False,
            scrape_duration_seconds=duration,
            last_error=str(error),
            failures=failures,
        )

    def flush(self) -> PendingWrite | None:
        """The open (partial) window and the cursor, for a graceful stop."""
        if self._aligned.open is None or self._last is None:
            return None
        return PendingWrite(self.config.name, self.rows(self._aligned.open), self._last)

    def close_due(self, now: float) -> PendingWrite | None:
        """Close the open window once its end has passed although no scrape succeeded."""
        closed = self._aligned.due(now)
        if not closed or self._last is None:
            return None
        self._calibrate(closed)
        return PendingWrite(self.config.name, [r for w in closed for r in self.rows(w)], self._last)

    # ------------------------------------------------------------ economics

    def rows(self, window: Window) -> list[dict[str, Any]]:
        money = self.split_money(window) if self.usd_per_hour is not None else {}
        spec = self.config.speculation
        return window_rows(
            self.config.name,
            window,
            self.assess(window, money=money),
            money,
            self.snapshot.ridge_batch,
            self.snapshot.ridge_source,
            spec.cost_ratio if spec else None,
        )

    def assess(
        self,
        window: Window,
        control: Window | None = None,
        money: dict[str, tuple[Decimal, Decimal, Decimal, Decimal]] | None = None,
    ) -> dict[str, economics.Assessment]:
        """Per model; `money` is `split_money(window)` when the caller has it already."""
        if money is None:
            money = self.split_money(window) if self.usd_per_hour is not None else {}
        params = self.parameters
        result = {}
        for model, counts in window.models.items():
            traffic = economics.Traffic(
                output_tokens=counts.generation_tokens,
                prompt_tokens=counts.prompt_tokens,
                concurrency=window.concurrency(model),
                drafts=counts.drafts,
                draft_tokens=counts.draft_tokens,
                accepted_tokens=counts.accepted_tokens,
                accepted_per_position=counts.accepted_per_position,
                restarted=window.restarts > 0,
            )
            spend = money.get(model)
            result[model] = economics.assess(
                model,
                traffic,
                params,
                economics.Money(
                    window.seconds,
                    float(spend[0]) if spend else None,
                    float(spend[1]) if spend else None,
                    float(spend[2]) if spend else 0.0,
                ),
                measured_speedup=speedup_against_control(window, control, model),
            )
        return result

    def split_money(self, window: Window) -> dict[str, tuple[Decimal, Decimal, Decimal, Decimal]]:
        """(spend, busy, draft-load, cold-start spend) per model, split by output tokens.

        Evenly when there were no tokens. The last model takes the rounding
        remainder, so the parts sum to the window's amounts exactly.
        """
        models = list(window.models) or [""]
        busy_fraction = (
            Decimal(window.busy_seconds / window.seconds) if window.seconds > 0 else Decimal(0)
        )
        running = window.spend_usd - window.cold_start_usd
        busy = running if self.config.billing_mode == "serverless" else running * busy_fraction
        totals = (
            window.spend_usd,
            busy.quantize(NANO),
            window.draft_load_usd,
            window.cold_start_usd,
        )
        tokens = [window.models[m].generation_tokens if m in window.models else 0.0 for m in models]
        weights = tokens if sum(tokens) > 0 else [1.0] * len(models)
        result: dict[str, tuple[Decimal, Decimal, Decimal, Decimal]] = {}
        given = [Decimal(0)] * len(totals)
        for i, model in enumerate(models):
            if i == len(models) - 1:
                parts = [total - g for total, g in zip(totals, given, strict=True)]
            else:
                share = Decimal(weights[i] / sum(weights))
                parts = [(total * share).quantize(NANO) for total in totals]
            given = [g + p for g, p in zip(given, parts, strict=True)]
            result[model] = (parts[0], parts[1], parts[2], parts[3])
        return result

    # ------------------------------------------------------------ internals

    def _observe(self, now: float, sample: EngineSample) -> list[Window]:
        """Add the interval since the last sample; returns the history windows it closed."""
        last, self._last = self._last, (now, sample)
        if last is None:
            return []
        interval = self._priced(interval_between(last[1], sample, last[0], now), sample, now)
        self._sliding.add(interval)
        totals = dict(self.snapshot.tokens_total)
        for model, counts in interval.models.items():
            before = totals.get(model, (0.0, 0.0, 0.0))
            totals[model] = (
                before[0] + counts.generation_tokens,
                before[1] + (counts.draft_tokens or 0.0),
                before[2] + (counts.accepted_tokens or 0.0),
            )
        self.snapshot = replace(
            self.snapshot,
            spend_usd_total=self.snapshot.spend_usd_total + interval.spend_usd,
            cold_start_usd_total=self.snapshot.cold_start_usd_total + interval.cold_start_usd,
            cold_starts_total=self.snapshot.cold_starts_total + int(interval.restarted),
            tokens_total=totals,
        )
        closed = self._aligned.add(interval)
        self._calibrate(closed)
        return closed

    def _priced(self, interval: Interval, sample: EngineSample, now: float) -> Interval:
        """The interval with its estimated spend, cold-start cost included.

        Provisioned GPUs bill every second; serverless ones only busy seconds,
        plus the load time of each cold start, of which the draft's weights'
        load time is speculation's share.
        """
        spend = self._cost(interval.seconds) if self._billed(interval) else Decimal(0)
        if not interval.restarted:
            return replace(interval, spend_usd=spend)
        seconds = self._cold_start_seconds(sample, now, interval.start)
        self.snapshot = replace(self.snapshot, last_cold_start_seconds=seconds)
        log.info(
            "endpoint %s: engine restarted (cold start%s)",
            self.config.name,
            f", {seconds:.1f} s" if seconds is not None else "",
        )
        cold = draft = Decimal(0)
        if self.config.billing_mode == "serverless" and seconds is not None:
            cold = self._cost(seconds)
            spec = self.config.speculation
            if spec is not None and spec.draft_weight_bytes:
                load = spec.draft_weight_bytes / self.config.weight_load_bytes_per_second
                draft = self._cost(min(seconds, load))
        return replace(interval, spend_usd=spend + cold, cold_start_usd=cold, draft_load_usd=draft)

    def _billed(self, interval: Interval) -> bool:
        return self.config.billing_mode == "provisioned" or interval.busy

    def _cost(self, seconds: float) -> Decimal:
        if self.usd_per_hour is None:
            return Decimal(0)
        hours = Decimal(repr(seconds)) / 3600
        return (self.usd_per_hour * self.config.gpus * hours).quantize(NANO)

    def _cold_start_seconds(
        self, sample: EngineSample, now: float, previous: float
    ) -> float | None:
        """First successful scrape minus the new process's start, when the start fell between
        the two scrapes; otherwise the configured duration (or None: unknown).

        A scrape is stamped when its answer has arrived, so the old process's last page
        may carry a stamp up to one fetch later than the moment it was rendered: a restart
        inside that fetch still counts as between the two scrapes.
        """
        started = sample.process_start_time_seconds
        if started is not None and previous - FETCH_SLACK_SECONDS <= started <= now:
            return now - started
        return self.config.cold_start_seconds

    def _calibrate(self, windows: Iterable[Window]) -> None:
        """Add the windows' step points; fit at every window until a fit holds, then hourly.
        A refused fit (as on CPU vLLM's implausible B*) is retried hourly too once the
        history is large: 2,000 endpoints refitting a day of points at each window
        boundary would stall the event loop ~24 s."""
        points = [p for p in map(step_point, windows) if p is not None]
        if not points:
            return
        self._steps.extend(points)
        self._points_since_fit += len(points)
        refused = self._fit_refused and len(self._steps) >= CHEAP_FIT_POINTS
        if self.snapshot.ridge_fit is not None or refused:
            if self._points_since_fit < REFIT_EVERY:
                return
            self._points_since_fit = 0
        else:
            # Until a fit is computed, at every window; the hourly cadence then starts at
            # this endpoint's phase (a restart restores every endpoint's day of points at
            # once: counted from there, all of them would refit at the same window).
            self._points_since_fit = self._refit_phase
        history = self._steps.points()
        min_windows = self.config.calibration_min_windows
        fit = fit_ridge_batch(history, min_windows)
        self._fit_refused = fit is None and can_fit(history, min_windows)
        ridge = fit.ridge_batch if fit is not None else self.config.ridge_batch
        if (fit is None) != (self.snapshot.ridge_fit is None):
            log.info(
                "endpoint %s: ridge batch B* = %.1f (%s)",
                self.config.name,
                ridge,
                "calibrated" if fit else "configured",
            )
        self.snapshot = replace(self.snapshot, ridge_batch=ridge, ridge_fit=fit)

    def _publish(self, now: float, sample: EngineSample, duration: float) -> None:
        window = self._sliding.total()
        control = self._control_window() if self._control_window is not None else None
        # Measure against the control only over full windows on both sides: just after a
        # (re)start, the few requests that finished say more about warm-up than speculation.
        full = FULL_WINDOW_SHARE * self._sliding.length
        if window is None or window.seconds < full or control is None or control.seconds < full:
            control = None
        self.snapshot = replace(
            self.snapshot,
            up=True,
            engine_metrics=sample.has_engine_metrics,
            scrape_duration_seconds=duration,
            last_success_timestamp=now,
            last_error=None,
            window=window,
            assessments=self.assess(window, control) if window is not None else {},
        )
