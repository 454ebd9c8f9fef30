"""The report's numbers, recomputed from the store's rollup sums.

Nothing here averages a ratio: every ratio (cost per million, acceptance,
concurrency, break-even, speedup) is recomputed from the sums of the span it
describes, whether that span is an hour, a day, a month, an endpoint or the
whole fleet. Daily rows give the sums of a day (spend, tokens, drafts, stored
savings, cold starts); hourly rows give the hour-by-hour verdicts (S recomputed
from the hour's sums with the hour's draft cost ratio and ridge batch) and the
draft overhead by kind (the hour's shares times its busy spend).

Window-level quantities (seconds, restarts) repeat on every model's row of a
window, and a window has either model rows or one row with model "" (a page
without engine metrics): so an endpoint's value for a period is the "" row's
plus the largest of its model rows' (exact for single-model endpoints, a floor
for the rare endpoint that serves several models).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from operator import itemgetter
from typing import NamedTuple

from sqlalchemy.orm.attributes import instance_dict

from spectax import economics
from spectax.report.spend import Spend, combined_basis
from spectax.store.models import Sums
from spectax.units import NANO

SEMANTICS = {"provisioned": "capacity", "serverless": "invoice"}


class Rec(NamedTuple):
    """The columns of a stored `Sums` row (hourly or daily) that the report reads.

    Plain tuples: reading an attribute of an ORM instance goes through its
    descriptor, which over a few hundred thousand rows costs seconds.
    """

    endpoint: str
    model: str
    start: datetime
    end: datetime
    seconds: float
    restarts: int
    output_tokens: int
    prompt_tokens: int
    drafts: int | None
    draft_tokens: int | None
    accepted_tokens: int | None
    accepted_per_position: str
    running_seconds: float
    spend_usd: Decimal | None
    busy_spend_usd: Decimal | None
    cold_start_usd: Decimal | None
    draft_load_usd: Decimal | None
    speculation_savings_usd: float | None
    draft_cost_ratio: float | None
    ridge_batch_requests: float


_FIELDS = itemgetter(*Rec._fields)


def record(row: Sums) -> Rec:
    """A stored row as a `Rec`, read straight from the instance's loaded state."""
    try:
        return Rec._make(_FIELDS(instance_dict(row)))
    except KeyError:  # an attribute not loaded (expired): go through the descriptors
        return Rec._make(getattr(row, name) for name in Rec._fields)


@dataclass(frozen=True, slots=True)
class EndpointInfo:
    """What the configuration says about an endpoint (defaults when it is not configured)."""

    name: str
    configured: bool = False
    billing_mode: str | None = None
    method: str | None = None
    draft_weight_bytes: int | None = None
    gpu_memory_bytes: int | None = None
    control: str | None = None

    @property
    def semantics(self) -> str:
        """What speculation's savings are: `capacity` freed, `invoice` money, or `unknown`."""
        return SEMANTICS.get(self.billing_mode or "", "unknown")

    @property
    def vram_fraction(self) -> float | None:
        """Share of GPU memory the draft's weights hold, when both sizes are configured."""
        if not self.draft_weight_bytes or not self.gpu_memory_bytes:
            return None
        return self.draft_weight_bytes / self.gpu_memory_bytes


class HourPoint(NamedTuple):
    """One hour of one speculating model, with its speedup recomputed from the hour's sums."""

    endpoint: str
    model: str
    start: datetime
    output_tokens: int
    accepted_tokens: int
    draft_tokens: int
    drafts: int
    positions: tuple[int, ...]
    seconds: float
    concurrency: float
    ridge_batch: float
    draft_cost_ratio: float
    busy_usd: float | None  # scaled to the day's spend basis; None when unpriced
    draft_load_usd: float
    speedup: float | None  # None: no output or no drafts in the hour

    @property
    def drafting(self) -> bool:
        return self.speedup is not None

    @property
    def verdict(self) -> str:
        """paid | tax | no_drafts | idle (the daemon's rule: S > 1 pays, else it is a tax)."""
        if self.output_tokens <= 0:
            return "idle"
        if self.speedup is None:
            return "no_drafts"
        return "paid" if self.speedup > 1.0 else "tax"

    @property
    def acceptance(self) -> float | None:
        if not self.drafting:
            return None
        return economics.acceptance_ratio(self.accepted_tokens, self.draft_tokens)

    @property
    def breakeven(self) -> float:
        return economics.breakeven_acceptance(
            self.concurrency, self.ridge_batch, self.draft_cost_ratio
        )

    @property
    def modelled_savings(self) -> float | None:
        """busy $ x (S - 1) - draft-load $: the hour's net savings at its recomputed S."""
        if self.speedup is None or self.busy_usd is None:
            return None
        return economics.speculation_savings_usd(self.busy_usd, self.speedup, self.draft_load_usd)

    @property
    def relative_batch(self) -> float:
        return economics.relative_batch(self.ridge_batch, self.concurrency)


@dataclass(slots=True)
class Figures:
    """Additive sums over a span (an endpoint-day, a month, the fleet), ratios derived on read."""

    priced: bool = False
    spend: Decimal = Decimal(0)  # on the reported basis
    estimated_spend: Decimal = Decimal(0)
    bases: set[str] = field(default_factory=set)
    busy_spend: Decimal = Decimal(0)
    output_tokens: int = 0
    priced_output_tokens: int = 0  # of the days with a spend: what cost per million divides
    prompt_tokens: int = 0
    speculating: bool = False
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    running_seconds: float = 0.0  # of the speculating models' rows (all models' when none)
    model_seconds: float = 0.0
    savings_by: dict[str, float] = field(default_factory=dict)  # semantics -> net savings
    cold_starts: int = 0
    cold_start_usd: Decimal = Decimal(0)
    draft_load_usd: Decimal = Decimal(0)
    overhead_priced: bool = False
    draft_compute_usd: float = 0.0
    rejected_usd: float = 0.0
    vram_usd: float | None = None
    hours_paid: int = 0
    hours_tax: int = 0
    hours_no_drafts: int = 0
    hours_monitored: int = 0
    days_monitored: int = 0
    draft_cost_ratio: float | None = None  # the latest in the span (a parameter, not a sum)
    ridge_batch: float | None = None
    parameters_at: datetime | None = None
    single_endpoint: bool = True  # False once endpoints are added up: no break-even then

    # ------------------------------------------------------------ derived

    @property
    def basis(self) -> str:
        return combined_basis(self.bases)

    @property
    def savings(self) -> float | None:
        """Net savings (negative: tax), whatever they mean; None without drafts or price."""
        return sum(self.savings_by.values()) if self.savings_by else None

    @property
    def cost_per_million(self) -> float | None:
        if not self.priced:
            return None
        return economics.cost_per_million(float(self.spend), self.priced_output_tokens)

    @property
    def cost_per_million_without_speculation(self) -> float | None:
        """($ + net savings) / G x 1e6: the same output without speculation (ECONOMICS.md §4)."""
        savings = self.savings
        if not self.priced or savings is None:
            return None
        return economics.cost_per_million(float(self.spend) + savings, self.priced_output_tokens)

    @property
    def acceptance(self) -> float | None:
        """Token-weighted acceptance over the span: sum A / sum Dt."""
        if not self.speculating or self.output_tokens <= 0:
            return None
        return economics.acceptance_ratio(self.accepted_tokens, self.draft_tokens)

    @property
    def position_acceptance(self) -> tuple[float, ...]:
        return economics.position_acceptance(self.accepted_per_position, self.drafts)

    @property
    def mean_draft_length(self) -> float | None:
        return self.draft_tokens / self.drafts if self.drafts > 0 else None

    @property
    def concurrency(self) -> float | None:
        if self.model_seconds <= 0:
            return None
        return self.running_seconds / self.model_seconds

    @property
    def breakeven(self) -> float | None:
        """alpha* at the span's mean concurrency, with the latest c and B* (one endpoint only)."""
        b = self.concurrency
        if (
            not self.single_endpoint
            or not self.speculating
            or b is None
            or self.ridge_batch is None
            or self.draft_cost_ratio is None
        ):
            return None
        return economics.breakeven_acceptance(b, self.ridge_batch, self.draft_cost_ratio)

    @property
    def hours_with_traffic(self) -> int:
        return self.hours_paid + self.hours_tax + self.hours_no_drafts

    @property
    def share_paid(self) -> float | None:
        n = self.hours_with_traffic
        return self.hours_paid / n if n else None

    @property
    def share_tax(self) -> float | None:
        n = self.hours_with_traffic
        return self.hours_tax / n if n else None

    @property
    def draft_compute(self) -> float | None:
        return self.draft_compute_usd if self.overhead_priced else None

    @property
    def rejected(self) -> float | None:
        return self.rejected_usd if self.overhead_priced else None

    @property
    def empty(self) -> bool:
        return self.hours_monitored == 0 and self.days_monitored == 0

    # ------------------------------------------------------------ adding up

    def add(self, other: Figures, same_endpoint: bool = True) -> None:
        self.priced = self.priced or other.priced
        self.spend += other.spend
        self.estimated_spend += other.estimated_spend
        self.bases |= other.bases
        self.busy_spend += other.busy_spend
        self.output_tokens += other.output_tokens
        self.priced_output_tokens += other.priced_output_tokens
        self.prompt_tokens += other.prompt_tokens
        self.speculating = self.speculating or other.speculating
        self.drafts += other.drafts
        self.draft_tokens += other.draft_tokens
        self.accepted_tokens += other.accepted_tokens
        self.accepted_per_position = _add_positions(
            self.accepted_per_position, other.accepted_per_position
        )
        self.running_seconds += other.running_seconds
        self.model_seconds += other.model_seconds
        for key, value in other.savings_by.items():
            self.savings_by[key] = self.savings_by.get(key, 0.0) + value
        self.cold_starts += other.cold_starts
        self.cold_start_usd += other.cold_start_usd
        self.draft_load_usd += other.draft_load_usd
        self.overhead_priced = self.overhead_priced or other.overhead_priced
        self.draft_compute_usd += other.draft_compute_usd
        self.rejected_usd += other.rejected_usd
        if other.vram_usd is not None:
            self.vram_usd = (self.vram_usd or 0.0) + other.vram_usd
        self.hours_paid += other.hours_paid
        self.hours_tax += other.hours_tax
        self.hours_no_drafts += other.hours_no_drafts
        self.hours_monitored += other.hours_monitored
        self.days_monitored += other.days_monitored
        if not same_endpoint:
            self.single_endpoint = False
        if other.parameters_at is not None and (
            self.parameters_at is None or other.parameters_at >= self.parameters_at
        ):
            self.parameters_at = other.parameters_at
            self.draft_cost_ratio = other.draft_cost_ratio
            self.ridge_batch = other.ridge_batch


def total(figures: Iterable[Figures]) -> Figures:
    """The sum over several endpoints (break-even is not defined for a sum of endpoints)."""
    result = Figures(single_endpoint=False)
    for f in figures:
        result.add(f, same_endpoint=False)
    return result


# ---------------------------------------------------------------- from rows


def window_level(rows: Sequence[Rec], name: str) -> float:
    """An endpoint's window-level quantity (seconds, restarts) over a period's rows."""
    unnamed = sum(getattr(r, name) for r in rows if not r.model)
    named = [getattr(r, name) for r in rows if r.model]
    return float(unnamed + (max(named) if named else 0))


def estimated(rows: Sequence[Rec]) -> Decimal | None:
    """The stored estimate of a period's spend; None when no row was priced."""
    amounts = [r.spend_usd for r in rows if r.spend_usd is not None]
    return sum(amounts, Decimal(0)) if amounts else None


def scale_factor(spend: Spend | None, estimate: Decimal | None) -> Decimal:
    """Billed over estimated spend: every money figure of the day is scaled by it."""
    if spend is None or estimate is None or estimate == 0:
        return Decimal(1)
    return spend.amount / estimate


def day_figures(
    info: EndpointInfo,
    daily_rows: Sequence[Rec],
    hourly_rows: Sequence[Rec],
    spend: Spend | None,
    positions: bool = True,
) -> tuple[Figures, list[HourPoint]]:
    """One endpoint-day: sums from its daily rows, verdicts and overhead from its hourly rows.

    `positions=False` (the month before, for month over month) skips what only the month
    reported shows: the hours' points for the recommendations and the draft overhead.
    """
    f = Figures()
    estimate = estimated(daily_rows)
    factor = scale_factor(spend, estimate)
    ratio = float(factor)
    if estimate is not None or spend is not None:
        f.priced = True
        f.estimated_spend = estimate or Decimal(0)
        f.spend = spend.amount if spend is not None else (estimate or Decimal(0))
        f.bases.add(spend.basis if spend is not None else "estimated")
        busy = sum((r.busy_spend_usd or Decimal(0) for r in daily_rows), Decimal(0))
        f.busy_spend = _scaled(busy, factor)
    f.days_monitored = 1 if daily_rows else 0
    f.cold_starts = round(window_level(daily_rows, "restarts"))
    f.cold_start_usd = _scaled(
        sum((r.cold_start_usd or Decimal(0) for r in daily_rows), Decimal(0)), factor
    )
    f.draft_load_usd = _scaled(
        sum((r.draft_load_usd or Decimal(0) for r in daily_rows), Decimal(0)), factor
    )
    speculating_rows = [r for r in daily_rows if r.draft_tokens is not None]
    concurrency_rows = speculating_rows or [r for r in daily_rows if r.model]
    for row in daily_rows:
        f.output_tokens += row.output_tokens
        f.prompt_tokens += row.prompt_tokens
    if f.priced:
        f.priced_output_tokens = f.output_tokens
    for row in speculating_rows:
        f.speculating = True
        f.drafts += row.drafts or 0
        f.draft_tokens += row.draft_tokens or 0
        f.accepted_tokens += row.accepted_tokens or 0
        f.accepted_per_position = _add_positions(
            f.accepted_per_position, json.loads(row.accepted_per_position)
        )
        if row.speculation_savings_usd is not None and estimate is not None:
            key = info.semantics
            f.savings_by[key] = f.savings_by.get(key, 0.0) + row.speculation_savings_usd * ratio
    for row in concurrency_rows:
        f.running_seconds += row.running_seconds
        f.model_seconds += row.seconds
    latest = max(speculating_rows, key=lambda r: r.end, default=None)
    if latest is not None:
        f.parameters_at = latest.end
        f.draft_cost_ratio = latest.draft_cost_ratio or 0.0
        f.ridge_batch = latest.ridge_batch_requests
    fraction = info.vram_fraction
    if fraction is not None and f.speculating and f.priced:
        f.vram_usd = float(f.spend) * fraction

    points: list[HourPoint] = []
    f.hours_monitored = len({r.start for r in hourly_rows})
    speedup_of, compute_share, rejected_of = (
        economics.modelled_speedup,
        economics.draft_compute_share,
        economics.rejected_share,
    )
    for row in hourly_rows:
        if row.draft_tokens is None:
            continue
        g, dt, a = row.output_tokens, row.draft_tokens, row.accepted_tokens or 0
        concurrency = row.running_seconds / row.seconds if row.seconds > 0 else 0.0
        c, ridge = row.draft_cost_ratio or 0.0, row.ridge_batch_requests
        speedup = None
        if g > 0 and dt <= 0:
            f.hours_no_drafts += 1
        elif g > 0:
            speedup = speedup_of(g, a, dt, concurrency, ridge, c)
            if speedup is not None and speedup > 1.0:
                f.hours_paid += 1
            else:
                f.hours_tax += 1
            if positions and row.busy_spend_usd is not None:  # the month reported only
                busy_usd = float(row.busy_spend_usd) * ratio
                r = ridge / (concurrency if concurrency > 1.0 else 1.0)  # relative_batch
                f.overhead_priced = True
                f.draft_compute_usd += busy_usd * compute_share(g, a, dt, r, c)
                f.rejected_usd += busy_usd * rejected_of(g, a, dt, r, c)
        if positions:
            points.append(_point(row, ratio, concurrency, c, speedup))
    return f, points


def hour_point(row: Rec, ratio: float = 1.0) -> HourPoint:
    """An hourly row of a speculating model, with S recomputed from its sums."""
    g, dt, a = row.output_tokens, row.draft_tokens or 0, row.accepted_tokens or 0
    concurrency = row.running_seconds / row.seconds if row.seconds > 0 else 0.0
    c = row.draft_cost_ratio or 0.0
    speedup = None
    if g > 0 and dt > 0:
        speedup = economics.modelled_speedup(g, a, dt, concurrency, row.ridge_batch_requests, c)
    return _point(row, ratio, concurrency, c, speedup)


def _point(
    row: Rec, ratio: float, concurrency: float, c: float, speedup: float | None
) -> HourPoint:
    return HourPoint(
        row.endpoint,
        row.model,
        row.start,
        row.output_tokens,
        row.accepted_tokens or 0,
        row.draft_tokens or 0,
        row.drafts or 0,
        tuple(json.loads(row.accepted_per_position)),
        row.seconds,
        concurrency,
        row.ridge_batch_requests,
        c,
        float(row.busy_spend_usd) * ratio if row.busy_spend_usd is not None else None,
        float(row.draft_load_usd or 0) * ratio,
        speedup,
    )


def _scaled(amount: Decimal, factor: Decimal) -> Decimal:
    return amount if factor == 1 else (amount * factor).quantize(NANO)


def _add_positions(a: Sequence[int], b: Sequence[int]) -> list[int]:
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0) + (int(b[i]) if i < len(b) else 0) for i in range(n)]
