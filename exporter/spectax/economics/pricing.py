"""What an endpoint's GPU time costs: interval spend, cold starts, and the per-model split.

Provisioned GPUs bill every second; serverless ones only busy seconds, plus
the load time of each cold start, of which the draft's weights' load time is
speculation's share. Amounts are Decimals quantized to the nano-dollar, so
the sums reported later are exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Literal

from spectax.pipeline.intervals import Interval
from spectax.pipeline.windows import Window
from spectax.units import NANO

BillingMode = Literal["provisioned", "serverless"]

FETCH_SLACK_SECONDS = 10.0  # the longest a fetch may take (the default scrape timeout)
ZERO = Decimal(0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Tariff:
    """How one endpoint is billed. No price (`usd_per_hour` None): nothing is priced."""

    usd_per_hour: Decimal | None
    gpus: int
    billing_mode: BillingMode
    cold_start_seconds: float | None = None  # configured: used when it cannot be measured
    draft_load_seconds: float | None = None  # loading the draft's weights at a cold start

    @property
    def priced(self) -> bool:
        return self.usd_per_hour is not None

    def cost(self, seconds: float) -> Decimal:
        """GPU price x GPUs x time."""
        if self.usd_per_hour is None:
            return ZERO
        hours = Decimal(repr(seconds)) / 3600
        return (self.usd_per_hour * self.gpus * hours).quantize(NANO)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpend:
    """One model's share of a window's spend: all of it, the part spent while busy, the
    part spent loading the draft's weights at cold starts, and the cold starts' part."""

    spend_usd: Decimal
    busy_usd: Decimal
    draft_load_usd: Decimal
    cold_start_usd: Decimal


@dataclass(frozen=True, slots=True)
class RestartSight:
    """What spectax saw of a restart between two scrapes (issue 30, item 10).

    `unobserved_seconds`: from the last scrape of the old process to the new process's
    start, the latest the old one can have lived. What it served then is lost: no scrape
    saw it and its counters died with it. The new process's own traffic is not lost (its
    counters count from zero). `age_at_first_sight`: the new process's age when first
    scraped; None when its start is not on the page or not between the two scrapes, and
    then the whole gap is counted unobserved (nothing bounds it better).

    The age is not a cold start's length: the process may have loaded in a fraction of it
    and served since (which its counters show). It only bounds the load from above.
    """

    unobserved_seconds: float
    age_at_first_sight: float | None


def restart_sight(process_start: float | None, previous: float, now: float) -> RestartSight:
    """The unobserved span and the new process's age, for a restart between the scrapes at
    `previous` and `now`.

    A scrape is stamped when its answer has arrived, so the old process's last page
    may carry a stamp up to one fetch later than the moment it was rendered: a restart
    inside that fetch still counts as between the two scrapes (and as 0 s unobserved).
    """
    if process_start is not None and previous - FETCH_SLACK_SECONDS <= process_start <= now:
        return RestartSight(max(0.0, process_start - previous), now - process_start)
    return RestartSight(max(0.0, now - previous), None)


def billed_cold_start_seconds(tariff: Tariff, sight: RestartSight) -> float | None:
    """The seconds a serverless restart is billed for loading: the new process's age at first
    sight when measured (an upper bound of the load: billing it errs on the side of cost),
    else the configured duration, else None (unknown, not billed)."""
    if sight.age_at_first_sight is not None:
        return sight.age_at_first_sight
    return tariff.cold_start_seconds


def price_interval(interval: Interval, tariff: Tariff, cold_start: float | None = None) -> Interval:
    """The interval with its estimated spend; `cold_start` is the load seconds billed for the
    restart it spans (billed_cold_start_seconds; None: none, or of unknown length), billed on
    serverless endpoints."""
    billed = tariff.billing_mode == "provisioned" or interval.busy
    spend = tariff.cost(interval.seconds) if billed else ZERO
    if not interval.restarted:
        return replace(interval, spend_usd=spend)
    cold = draft = ZERO
    if tariff.billing_mode == "serverless" and cold_start is not None:
        cold = tariff.cost(cold_start)
        if tariff.draft_load_seconds is not None:
            draft = tariff.cost(min(cold_start, tariff.draft_load_seconds))
    return replace(interval, spend_usd=spend + cold, cold_start_usd=cold, draft_load_usd=draft)


def spend_by_model(window: Window, tariff: Tariff) -> dict[str, ModelSpend]:
    """The window's money per model, split by output tokens (evenly when there were none);
    empty for an endpoint without a price. Keyed "" when the window saw no model."""
    if not tariff.priced:
        return {}
    models = list(window.models) or [""]
    busy_fraction = (
        Decimal(window.busy_seconds / window.seconds) if window.seconds > 0 else Decimal(0)
    )
    running = window.spend_usd - window.cold_start_usd
    busy = running if tariff.billing_mode == "serverless" else running * busy_fraction
    tokens = [window.models[m].generation_tokens if m in window.models else 0.0 for m in models]
    weights = tokens if sum(tokens) > 0 else [1.0] * len(models)
    fractions = [Decimal(weight / sum(weights)) for weight in weights]
    spend = split_exactly(window.spend_usd, fractions)
    busy_spend = split_exactly(busy.quantize(NANO), fractions)
    draft_load = split_exactly(window.draft_load_usd, fractions)
    cold_start = split_exactly(window.cold_start_usd, fractions)
    return {
        model: ModelSpend(
            spend_usd=spend[i],
            busy_usd=busy_spend[i],
            draft_load_usd=draft_load[i],
            cold_start_usd=cold_start[i],
        )
        for i, model in enumerate(models)
    }


def split_exactly(
    amount: Decimal, weights: Sequence[Decimal], total: Decimal = Decimal(1)
) -> list[Decimal]:
    """`amount` shared in proportion to `weights` (out of `total`; by default the weights
    are fractions), each share but the last rounded to the nano-dollar and the last taking
    the rounding remainder: the shares add up to `amount` exactly."""
    shares = [
        (amount * weight / total).quantize(NANO) if total else ZERO for weight in weights[:-1]
    ]
    return [*shares, amount - sum(shares, ZERO)]
