"""One coordinator per endpoint: a fetched page in, closed windows and a snapshot out.

Like Home Assistant's DataUpdateCoordinator, a monitor keeps the last good
data, whether the last update succeeded and why not, and logs a failure once
and the recovery once. It takes the clock and the page as arguments and does
no I/O. The collector behind `/metrics` only ever reads the snapshot the
monitor last published; each closed window leaves assessed, in an `Observed`
value (spectax.observed), for whoever keeps the history: the monitor never
knows who persists it, and is resumed from a `Resume` value.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from spectax import economics, logs
from spectax.counterfactual.in_force import (
    ControlLookup,
    Counterfactual,
    CurveLookup,
    ProfileLookup,
)
from spectax.economics import AssessedWindow, Assessment, Capacity, StepModel
from spectax.endpoint_config import EndpointConfig
from spectax.engines import new_reader
from spectax.engines.base import EngineSample, ParseError
from spectax.gpus import GpuSpec
from spectax.health import LogOnce, ScrapeError
from spectax.observed import Observed, Resume
from spectax.pipeline.intervals import Interval, interval_between
from spectax.pipeline.model_ledger import Admission, ModelLedger
from spectax.pipeline.packing import Cursor, interval_fields
from spectax.pipeline.windows import AlignedWindows, SlidingWindow, Window
from spectax.tariffs import gpu_named, tariff_of

# The logger keeps the name it had before the module was renamed: log filters and alerting
# on JSON logs select by it.
log = logging.getLogger("spectax.monitor")

FULL_WINDOW_SHARE = 0.8  # a sliding window this full counts as full (scrapes jitter)


@dataclass(frozen=True, slots=True, kw_only=True)
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
    unobserved_seconds_total: float = 0.0  # restarts' spans no scrape saw (economics.restart_sight)
    tokens_total: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    step_model: StepModel = field(default_factory=StepModel)  # the counterfactual in force
    assessments: dict[str, Assessment] = field(default_factory=dict)
    capacities: dict[str, Capacity] = field(default_factory=dict)  # the KV cache, per model
    models_dropped: dict[str, int] = field(default_factory=dict)  # by reason (model_ledger)


class EndpointMonitor:
    def __init__(
        self,
        config: EndpointConfig,
        usd_per_hour: Decimal | None,
        window_seconds: float,
        resume: Resume | None = None,
        control_window: ControlLookup | None = None,
        control_curve: CurveLookup | None = None,
        profile: ProfileLookup | None = None,
        baseline: ProfileLookup | None = None,
        gpu: GpuSpec | None = None,
    ):
        resume = resume or Resume()
        self.config = config
        self.usd_per_hour = usd_per_hour
        self._parse = new_reader(config.engine)
        self._tariff = tariff_of(config, usd_per_hour)
        self._health = LogOnce(log, "endpoint", config.name)
        self._clean_models: frozenset[str] = frozenset()  # checked for secrets ...
        self._clean_against = -1  # ... when this many secrets were registered
        self._last = Cursor.of(*resume.cursor) if resume.cursor is not None else None
        # From the stored cursor until the first page: a restart seen then happened while
        # spectax was not running (the restart log says so).
        self._resumed = resume.cursor is not None
        self._sliding = SlidingWindow(window_seconds)
        # The models held over time, forgotten after a window on no page (pipeline.model_ledger).
        self._models = ModelLedger(window_seconds)
        if resume.cursor is not None:
            self._models.admit(resume.cursor[0], resume.cursor[1].models)
        self._told_churn = False
        self._aligned = AlignedWindows(window_seconds, resume.open_window)
        # The open window and the cursor as the last page left them, for the flush that
        # follows it (Daemon._scrape) to hand the store without unpacking both again; the
        # flush takes them, so they are not kept between scrapes (packed, they are a tenth).
        self._unflushed: tuple[Window, tuple[float, EngineSample]] | None = None
        # Which plain curve, B* and h its windows are assessed under, and their sources.
        self.counterfactual = Counterfactual(
            config,
            control_window=control_window,
            control_curve=control_curve,
            profile=profile,
            baseline=baseline,
            gpu=gpu,
            gpu_name=gpu_named(config),
        )
        self.snapshot = EndpointSnapshot(
            config=config,
            usd_per_hour=usd_per_hour,
            spend_usd_total=resume.spend_usd_total,
            cold_start_usd_total=resume.cold_start_usd_total,
        )
        self.counterfactual.calibrate(resume.recent_windows)

    def step_model(self, window: Window | None = None) -> StepModel:
        """The counterfactual in force (spectax.counterfactual.in_force), its roofline read
        from `window` (the sliding one by default)."""
        return self.counterfactual.step_model(window or self._sliding.total())

    def window(self) -> Window | None:
        """The sliding window's sum, what the live gauges are of: unpacked at each call (it
        waits packed between scrapes), so not kept in the snapshot."""
        return self._sliding.total()

    def parameters(self, window: Window | None = None) -> economics.Parameters:
        """The parameters to assess `window` under (its own roofline, if it is the source)."""
        spec = self.config.speculation
        overhead = self._last.draft_overhead if self._last is not None else None
        return economics.Parameters(
            draft_cost_ratio=economics.draft_cost_in_force(
                spec.cost_ratio if spec else 0.0, [overhead], window
            ),
            step_model=self.step_model(window),
            draft_weight_bytes=spec.draft_weight_bytes if spec else None,
            gpu_memory_bytes=self.config.gpu_memory_bytes,
            schedule=spec.schedule if spec else None,
        )

    # ------------------------------------------------------------ feeding

    def observe_page(self, now: float, text: str, duration: float) -> Observed | None:
        """Feed one successfully fetched page; returns the windows it closed, if any (the first
        page: none, with its cursor, where a crash before the first window closes resumes)."""
        try:
            sample = self._parse(text)
        except ParseError as exc:
            self.observe_failure(ScrapeError("parse", f"malformed /metrics page: {exc}"), duration)
            return None
        if self._reflects_a_secret(sample):
            self.observe_failure(
                ScrapeError(
                    "parse",
                    "refused /metrics page: a model_name holds a credential spectax holds "
                    "(the target echoes a secret it was sent); nothing of it is exported or "
                    "stored: fix the target",
                ),
                duration,
            )
            return None
        self._health.recovered("scraping again")
        if not sample.has_engine_metrics and (self.snapshot.engine_metrics or not self.snapshot.up):
            log.warning(
                "endpoint %s: the page has no engine metrics (is vLLM running with "
                "--disable-log-stats?); spend is still accrued",
                self.config.name,
            )
        first = self._last is None
        held = self._held(now, sample)
        previous, closed, window, open_window = self._observe(now, held, None)
        if open_window is not None:
            self._unflushed = (open_window, (now, held))
        self._publish(now, sample, duration, window)
        if first:  # the baseline: a crash before the first window closes resumes here
            return Observed(self.config.name, (), (now, held))
        if not closed:
            return None
        # The interval that closed them lies in the new open window: the stored history
        # reaches up to the previous sample, so that is where a restart must resume.
        return Observed(self.config.name, [self._assessed(w) for w in closed], previous)

    def observe_interval(self, interval: Interval, sample: EngineSample) -> Observed | None:
        """Feed a whole window (fleet mode); one the store already has is skipped."""
        if self._last is not None and interval.end <= self._last.time:
            return None
        self._health.recovered("read from its source again")  # the next failure is told
        held = self._held(interval.end, sample)
        if held is not sample:
            interval = replace(interval, models=_only(interval.models, held.models.keys()))
        _, closed, window, _ = self._observe(interval.end, held, interval)
        self.counterfactual.calibrate(due := self._aligned.due(interval.end))
        self._publish(interval.end, sample, 0.0, window)
        return Observed(self.config.name, [self._assessed(w) for w in closed + due], self.cursor())

    def observe_failure(self, error: ScrapeError, duration: float, told: bool = False) -> None:
        """`told`: the failure is already logged (a fleet source's, once for all its
        endpoints): the endpoint only shows it."""
        if not told:
            self._health.failed("scrape failed (%s): %s", error.reason, error)
        failures = dict(self.snapshot.failures)
        failures[error.reason] = failures.get(error.reason, 0) + 1
        self.snapshot = replace(
            self.snapshot,
            up=False,
            scrape_duration_seconds=duration,
            last_error=logs.blank_secrets(str(error)),  # a ParseError quotes the page's line
            failures=failures,
        )

    def flush(self) -> Observed | None:
        """The open (partial) window and the cursor: for the store after every scrape, so that
        a restart (kill -9, a reboot) resumes the window where the last scrape left it even
        when the engine restarted meanwhile, and at a graceful stop."""
        unflushed, self._unflushed = self._unflushed, None
        if unflushed is not None:
            open_window, cursor = unflushed
            return Observed(self.config.name, (), cursor, self._assessed(open_window, False))
        current = self._aligned.open
        if current is None or self._last is None:
            return None
        return Observed(self.config.name, (), self.cursor(), self._assessed(current, False))

    def close_due(self, now: float) -> Observed | None:
        """Close the open window once its end has passed although no scrape succeeded."""
        self._unflushed = None
        closed = self._aligned.due(now)
        if not closed or self._last is None:
            return None
        self.counterfactual.calibrate(closed)
        return Observed(self.config.name, [self._assessed(w) for w in closed], self.cursor())

    # ------------------------------------------------------------ internals

    def _reflects_a_secret(self, sample: EngineSample) -> bool:
        """Whether a model name holds a registered secret. Model names become labels in
        /metrics and rows in the store, where no log filter blanks them. A page's names are
        few (at most 64) and the same from scrape to scrape, so each is checked once, and
        again only when a secret is added (a reload)."""
        registered = logs.secrets_registered()
        if registered != self._clean_against:
            self._clean_models, self._clean_against = frozenset(), registered
        names = sample.models.keys()
        if names <= self._clean_models:
            return False
        if any(logs.holds_secret(name) for name in names - self._clean_models):
            return True
        self._clean_models = frozenset(names)
        return False

    def _held(self, now: float, sample: EngineSample) -> EngineSample:
        """`sample` with only the models this endpoint holds (pipeline.model_ledger): a target
        rotating its model names would otherwise grow its counters, windows and rows without
        end. What is dropped is counted (spectax_models_dropped_total) and told once."""
        admission = self._models.admit(now, sample.models)
        if admission.expired:
            totals = dict(self.snapshot.tokens_total)
            for name in admission.expired:
                totals.pop(name, None)
            self.snapshot = replace(self.snapshot, tokens_total=totals)
        if admission.refused or admission.expired:
            self._count_dropped(admission)
        if admission.kept is None:
            return sample
        return replace(sample, models=_only(sample.models, admission.kept))

    def _count_dropped(self, admission: Admission) -> None:
        dropped = dict(self.snapshot.models_dropped)
        for reason, count in (("limit", admission.refused), ("expired", len(admission.expired))):
            if count:
                dropped[reason] = dropped.get(reason, 0) + count
        self.snapshot = replace(self.snapshot, models_dropped=dropped)
        if admission.refused and not self._told_churn:
            self._told_churn = True  # said once: a rotating target refuses names every scrape
            log.warning(
                "endpoint %s: more than %d model names within %.0f s (does the target put a "
                "request or session id in model_name?); new names are not exported or stored "
                "until held ones are on no page for %.0f s; "
                'spectax_models_dropped_total{reason="limit"} counts them',
                self.config.name,
                self._models.limit,
                self._models.expiry,
                self._models.expiry,
            )

    def cursor(self) -> tuple[float, EngineSample] | None:
        """The last page's time and sample, where a restart resumes: unpacked at each call."""
        return None if self._last is None else self._last.unpacked()

    @property
    def cursor_time(self) -> float | None:
        """The cursor's time alone, without unpacking its sample (a fleet source asks it of
        every endpoint each window)."""
        return None if self._last is None else self._last.time

    def _observe(
        self, now: float, sample: EngineSample, fed: Interval | None
    ) -> tuple[tuple[float, EngineSample] | None, list[Window], Window | None, Window | None]:
        """Add the interval since the last sample, or `fed`; returns the last sample (the
        cursor before), the windows it closed, the sliding window's sum and the open window
        (both None before the second sample)."""
        self._unflushed = None
        last = self.cursor()
        self._last = Cursor.of(now, sample)
        if last is None and fed is None:
            return None, [], None, None
        interval = fed or interval_between(last[1], sample, last[0], now)  # type: ignore[index]
        cold_start = None
        if interval.restarted:
            interval, cold_start = self._restarted(interval, sample, self._resumed)
        self._resumed = False
        interval = economics.price_interval(interval, self._tariff, cold_start)
        fields = interval_fields(interval)  # packed once, for both windows
        window = self._sliding.add(interval, fields)
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
        closed, open_window = self._aligned.add_keeping(interval, fields)
        self.counterfactual.calibrate(closed)
        return last, closed, window, open_window

    def _restarted(
        self, interval: Interval, sample: EngineSample, resumed: bool
    ) -> tuple[Interval, float | None]:
        """The restart's unobserved span on the interval, and the load seconds to bill.

        What the old process served after the last scrape that saw it is lost: the span is
        counted (the history's unobserved_seconds, spectax_unobserved_seconds_total) and told
        once, so a review can say how much went unseen. `resumed`: the last scrape is the
        stored cursor of an earlier run, i.e. vLLM restarted while spectax was not running.
        """
        start = sample.process_start_time_seconds
        sight = economics.restart_sight(start, interval.start, interval.end)
        cold_start = economics.billed_cold_start_seconds(self._tariff, sight)
        self.snapshot = replace(
            self.snapshot,
            last_cold_start_seconds=cold_start,
            unobserved_seconds_total=self.snapshot.unobserved_seconds_total
            + sight.unobserved_seconds,
        )
        when = "while spectax was not running" if resumed else "between two scrapes"
        if sight.age_at_first_sight is None:
            age = "the page gives no process start between the two scrapes: the whole gap counts"
        else:
            age = f"the new process was {sight.age_at_first_sight:.1f} s old at first sight"
        log.info(
            "endpoint %s: engine restarted %s: %.1f s unobserved (what the old process served "
            "after spectax's last scrape of it is lost); %s",
            self.config.name,
            when,
            sight.unobserved_seconds,
            age,
        )
        return replace(interval, unobserved_seconds=sight.unobserved_seconds), cold_start

    def _assessed(self, window: Window, closed: bool = True) -> AssessedWindow:
        """A history window with its economics, under the parameters now in force; a closed
        one also adds the step overhead it implied to what this endpoint's profile learns."""
        spend = economics.spend_by_model(window, self._tariff)
        spec = self.config.speculation
        params = self.parameters(window)
        # No latency: the store keeps the buckets, not the quantiles (issue 31).
        assessments = economics.assess_window(window, params, spend, latency=False)
        if closed:
            self.counterfactual.learn(assessments.values())
        return AssessedWindow(
            window=window,
            assessments=assessments,
            spend=spend,
            step_model=params.step_model,
            draft_cost_ratio=spec.cost_ratio if spec else None,
        )

    def _publish(
        self, now: float, sample: EngineSample, duration: float, window: Window | None
    ) -> None:
        control = self.counterfactual.control_window()
        # Measure against the control only over full windows on both sides: just after a
        # (re)start, the few requests that finished say more about warm-up than speculation.
        full = FULL_WINDOW_SHARE * self._sliding.length
        if window is None or window.seconds < full or control is None or control.seconds < full:
            control = None
        assessments, capacities = {}, {}
        params = self.parameters(window)
        if window is not None:
            spend = economics.spend_by_model(window, self._tariff)
            assessments = economics.assess_window(window, params, spend, control)
            capacities = economics.window_capacities(
                window, control, params.draft_weight_bytes, params.gpu_memory_bytes
            )
        self.snapshot = replace(
            self.snapshot,
            up=True,
            engine_metrics=sample.has_engine_metrics,
            scrape_duration_seconds=duration,
            last_success_timestamp=now,
            last_error=None,
            assessments=assessments,
            capacities=capacities,
            step_model=params.step_model,
        )


def _only(models: Mapping[str, Any], names: Collection[str]) -> dict[str, Any]:
    """`models` restricted to `names` (the page's or interval's models an endpoint holds),
    in their order."""
    return {name: value for name, value in models.items() if name in names}
