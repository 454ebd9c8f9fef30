"""One monitor per endpoint: scrape, window, assess, and publish an immutable snapshot.

Like Home Assistant's DataUpdateCoordinator, a monitor keeps the last good
data, whether the last update succeeded and why not, and logs a failure once
and the recovery once. The collector behind `/metrics` only ever reads the
snapshot the monitor last published.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from spectax import economics
from spectax.config import EndpointConfig
from spectax.engines import get_parser
from spectax.engines.base import EngineSample, ParseError
from spectax.scrape import Reason, ScrapeError
from spectax.store.repository import window_rows
from spectax.windows import AlignedWindows, SlidingWindow, Window, interval_between

log = logging.getLogger(__name__)
NANO = Decimal("0.000000001")


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
    tokens_total: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    assessments: dict[str, economics.Assessment] = field(default_factory=dict)
    window: Window | None = None


@dataclass(frozen=True, slots=True)
class PendingWrite:
    """Windows closed by a scrape, and the cursor that goes with them, for the store."""

    endpoint: str
    rows: list[dict[str, Any]]
    cursor: tuple[float, EngineSample] | None


class EndpointMonitor:
    def __init__(
        self,
        config: EndpointConfig,
        usd_per_hour: Decimal | None,
        window_seconds: float,
        spend_total: Decimal = Decimal(0),
        cursor: tuple[float, EngineSample] | None = None,
        open_window: Window | None = None,
    ):
        self.config = config
        self.usd_per_hour = usd_per_hour
        self._parse = get_parser(config.engine)
        self._last = cursor
        self._sliding = SlidingWindow(window_seconds)
        self._aligned = AlignedWindows(window_seconds, open_window)
        self._failing = False
        self.snapshot = EndpointSnapshot(config, usd_per_hour, spend_usd_total=spend_total)

    @property
    def parameters(self) -> economics.Parameters:
        spec = self.config.speculation
        return economics.Parameters(
            draft_cost_ratio=spec.cost_ratio if spec else 0.0,
            ridge_batch=self.config.ridge_batch,
            draft_weight_bytes=spec.draft_weight_bytes if spec else None,
            gpu_memory_bytes=self.config.gpu_memory_bytes,
        )

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
        first = self._last is None
        closed = self._observe(now, sample)
        self._publish(now, sample, duration)
        if first:  # the baseline: a crash before the first window closes resumes from here
            return PendingWrite(self.config.name, [], (now, sample))
        if not closed:
            return None
        return PendingWrite(
            self.config.name, [r for w in closed for r in self.rows(w)], (now, sample)
        )

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
        return PendingWrite(self.config.name, [r for w in closed for r in self.rows(w)], self._last)

    def rows(self, window: Window) -> list[dict[str, Any]]:
        spend = self.split_spend(window) if self.usd_per_hour is not None else {}
        spec = self.config.speculation
        return window_rows(
            self.config.name,
            window,
            self.assess(window, spend),
            spend,
            self.config.ridge_batch,
            spec.cost_ratio if spec else None,
        )

    def assess(
        self, window: Window, spend: dict[str, tuple[Decimal, Decimal]] | None = None
    ) -> dict[str, economics.Assessment]:
        spend = spend if spend is not None else self.split_spend(window)
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
            money = economics.Money(window.seconds, None, None)
            if self.usd_per_hour is not None:
                spend_usd, busy_usd = spend[model]
                money = economics.Money(window.seconds, float(spend_usd), float(busy_usd))
            result[model] = economics.assess(model, traffic, params, money)
        return result

    def split_spend(self, window: Window) -> dict[str, tuple[Decimal, Decimal]]:
        """Spend and busy spend per model, split by output tokens (evenly when there were none).

        The last model takes the rounding remainder, so the parts sum to the
        window's spend exactly.
        """
        models = list(window.models) or [""]
        total = window.spend_usd
        busy_fraction = (
            Decimal(window.busy_seconds / window.seconds) if window.seconds > 0 else Decimal(0)
        )
        busy_total = total if self.config.billing_mode == "serverless" else total * busy_fraction
        tokens = [window.models[m].generation_tokens if m in window.models else 0.0 for m in models]
        weights = tokens if sum(tokens) > 0 else [1.0] * len(models)
        result: dict[str, tuple[Decimal, Decimal]] = {}
        spent = busy = Decimal(0)
        for i, model in enumerate(models):
            if i == len(models) - 1:
                share_spend, share_busy = total - spent, busy_total.quantize(NANO) - busy
            else:
                share = Decimal(weights[i] / sum(weights))
                share_spend = (total * share).quantize(NANO)
                share_busy = (busy_total * share).quantize(NANO)
            spent += share_spend
            busy += share_busy
            result[model] = (share_spend, share_busy)
        return result

    def _observe(self, now: float, sample: EngineSample) -> list[Window]:
        """Add the interval since the last sample; returns the history windows it closed."""
        last, self._last = self._last, (now, sample)
        if last is None:
            return []
        interval = interval_between(last[1], sample, last[0], now)
        interval = replace(interval, spend_usd=self._spend(interval.seconds, interval.busy))
        self._sliding.add(interval)
        totals = dict(self.snapshot.tokens_total)
        for model, counts in interval.models.items():
            before = totals.get(model, (0.0, 0.0, 0.0))
            totals[model] = (
                before[0] + counts.generation_tokens,
                before[1] + (counts.draft_tokens or 0.0),
                before[2] + (counts.accepted_tokens or 0.0),
            )
        if interval.restarted:
            log.info("endpoint %s: engine restarted (cold start)", self.config.name)
        self.snapshot = replace(
            self.snapshot,
            spend_usd_total=self.snapshot.spend_usd_total + interval.spend_usd,
            cold_starts_total=self.snapshot.cold_starts_total + int(interval.restarted),
            tokens_total=totals,
        )
        return self._aligned.add(interval)

    def _spend(self, seconds: float, busy: bool) -> Decimal:
        """Estimated spend: provisioned GPUs bill every second, serverless only busy ones."""
        if self.usd_per_hour is None:
            return Decimal(0)
        if self.config.billing_mode == "serverless" and not busy:
            return Decimal(0)
        hours = Decimal(repr(seconds)) / 3600
        return (self.usd_per_hour * self.config.gpus * hours).quantize(NANO)

    def _publish(self, now: float, sample: EngineSample, duration: float) -> None:
        window = self._sliding.total()
        self.snapshot = replace(
            self.snapshot,
            up=True,
            engine_metrics=sample.has_engine_metrics,
            scrape_duration_seconds=duration,
            last_success_timestamp=now,
            last_error=None,
            window=window,
            assessments=self.assess(window) if window is not None else {},
        )


__all__ = ["EndpointMonitor", "EndpointSnapshot", "PendingWrite", "Reason"]
