"""One endpoint-day's figures from its rollup rows, and an hour's point for the recommendations.

Daily rows give the sums of a day (spend, tokens, drafts, cold starts) and what the
daemon concluded about its windows, summed: their verdicts and bases counted, their
net savings, the busy time the same output would have taken without speculation (so
the day's speedup is its windows' own, at the h and B* each was assessed with), and
the draft overhead in dollars; and the counterfactual in force at its end (source,
band, step overhead). Nothing here recomputes a speedup or a share from counters: an
hour judged again with other parameters (h = 0, say) would disagree with the daemon.
Hourly rows give the hours' points for the recommendations, with the same sums.

Window-level quantities (seconds, restarts) repeat on every model's row of a
window, and a window has either model rows or one row with model "" (a page
without engine metrics): so an endpoint's value for a period is the "" row's
plus the largest of its model rows' (exact for single-model endpoints, a floor
for the rare endpoint that serves several models).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal

from spectax.economics.step_model import BASES, Basis
from spectax.report.figures import EndpointInfo, Figures, HourPoint, add_positions
from spectax.report.records import RollupRecord
from spectax.report.spend import Spend
from spectax.units import NANO


def window_level(rows: Sequence[RollupRecord], name: str) -> float:
    """An endpoint's window-level quantity (seconds, restarts, unobserved seconds) over a
    period's rows; one not recorded (None: rolled up before its column) adds nothing."""
    unnamed = sum(getattr(r, name) or 0 for r in rows if not r.model)
    named = [getattr(r, name) or 0 for r in rows if r.model]
    return float(unnamed + (max(named) if named else 0))


def estimated(rows: Sequence[RollupRecord]) -> Decimal | None:
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
    daily_rows: Sequence[RollupRecord],
    hourly_rows: Sequence[RollupRecord],
    spend: Spend | None,
    positions: bool = True,
) -> tuple[Figures, list[HourPoint]]:
    """One endpoint-day: sums, verdicts and the windows' conclusions from its daily rows.

    `positions=False` (the month before, for month over month) skips what only the month
    reported shows: the hours' points for the recommendations.
    """
    f = Figures(kinds={info.semantics})
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
    f.unobserved_seconds = window_level(daily_rows, "unobserved_seconds")
    f.cold_start_usd = _scaled(
        sum((r.cold_start_usd or Decimal(0) for r in daily_rows), Decimal(0)), factor
    )
    f.draft_load_usd = _scaled(
        sum((r.draft_load_usd or Decimal(0) for r in daily_rows), Decimal(0)), factor
    )
    # A model speculates when it counts drafts or drafted tokens: SGLang and TGI count
    # verify steps (drafts) but no drafted tokens, and speculate all the same.
    speculating_rows = [r for r in daily_rows if r.drafts is not None or r.draft_tokens is not None]
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
        if row.draft_tokens is not None:
            f.drafted_accepted_tokens += row.accepted_tokens or 0
        f.accepted_per_position = add_positions(
            f.accepted_per_position, json.loads(row.accepted_per_position)
        )
        if row.speculation_savings_usd is not None and estimate is not None:
            key = info.semantics
            f.savings_by[key] = f.savings_by.get(key, 0.0) + row.speculation_savings_usd * ratio
    for row in speculating_rows:
        _count_verdicts(f, row)
        if row.assessed_busy_seconds is not None:
            _add_assessed(f, row, ratio)
        else:  # a day with an hour not recorded: the hours that were, and that one's windows
            for hour in hourly_rows:
                if hour.model == row.model:
                    _add_assessed(f, hour, ratio)
    for row in concurrency_rows:
        f.running_seconds += row.running_seconds
        f.model_seconds += row.seconds
    latest = max(speculating_rows, key=lambda r: r.end, default=None)
    if latest is not None:
        f.parameters_at = latest.end
        f.draft_cost_ratio = latest.draft_cost_ratio or 0.0
        f.ridge_batch = latest.ridge_batch_requests
        f.model_source = latest.ridge_batch_source
        low, high = latest.speedup_low_ratio, latest.speedup_high_ratio
        f.speedup_band = (low, high) if low is not None and high is not None else None
        f.step_overhead = latest.step_overhead_ratio
    fraction = info.vram_fraction
    if fraction is not None and f.speculating and f.priced:
        f.vram_usd = float(f.spend) * fraction

    points: list[HourPoint] = []
    f.hours_monitored = len({r.start for r in hourly_rows})
    if positions:  # the month reported only
        points = [_point(row, ratio) for row in hourly_rows if row.draft_tokens is not None]
    return f, points


def _add_assessed(f: Figures, row: RollupRecord, ratio: float) -> None:
    """Add what a speculating row's windows concluded (store.models.Sums, 0009): the busy
    time without speculation and the busy seconds it divides, the draft overhead in dollars
    (scaled to the day's spend basis). A row rolled up before they were recorded adds its
    windows with output to the not recorded ones: nothing is recomputed for it."""
    if row.assessed_busy_seconds is None:
        if row.output_tokens > 0:
            f.windows_assessment_unrecorded += row.windows
        return
    f.assessed_busy_seconds += row.assessed_busy_seconds
    f.plain_busy_seconds += row.plain_busy_seconds or 0.0
    if row.draft_compute_usd is not None or row.rejected_usd is not None:
        f.overhead_priced = True
        f.draft_compute_usd += (row.draft_compute_usd or 0.0) * ratio
        f.rejected_usd += (row.rejected_usd or 0.0) * ratio


def _count_verdicts(f: Figures, row: RollupRecord) -> None:
    """Add a speculating model's row's counted verdicts and bases to `f`; a row rolled up
    before they were counted adds its windows with traffic to the unrecorded ones."""
    if row.windows_pays is None or row.windows_tax is None or row.windows_uncertain is None:
        if row.output_tokens > 0:
            f.windows_unrecorded += row.windows
        return
    f.windows_pays += row.windows_pays
    f.windows_tax += row.windows_tax
    f.windows_uncertain += row.windows_uncertain
    for basis in BASES:
        n = getattr(row, f"windows_basis_{basis}")
        if n:
            f.basis_windows[basis] = f.basis_windows.get(basis, 0) + n


def _judged(row: RollupRecord) -> tuple[int, int, int] | None:
    pays, tax, uncertain = row.windows_pays, row.windows_tax, row.windows_uncertain
    if pays is None or tax is None or uncertain is None:
        return None
    return (pays, tax, uncertain)


def _point(row: RollupRecord, ratio: float) -> HourPoint:
    """An hourly row of a speculating model: its counters, and what its windows concluded
    (speedup, net savings, the step overhead and B* they were assessed with)."""
    plain, assessed = row.plain_busy_seconds, row.assessed_busy_seconds
    savings = row.speculation_savings_usd
    return HourPoint(
        endpoint=row.endpoint,
        model=row.model,
        start=row.start,
        output_tokens=row.output_tokens,
        accepted_tokens=row.accepted_tokens or 0,
        draft_tokens=row.draft_tokens or 0,
        drafts=row.drafts or 0,
        positions=tuple(json.loads(row.accepted_per_position)),
        seconds=row.seconds,
        concurrency=row.running_seconds / row.seconds if row.seconds > 0 else 0.0,
        ridge_batch=row.ridge_batch_requests,
        draft_cost_ratio=row.draft_cost_ratio or 0.0,
        busy_usd=float(row.busy_spend_usd) * ratio if row.busy_spend_usd is not None else None,
        draft_load_usd=float(row.draft_load_usd or 0) * ratio,
        speedup=plain / assessed if plain is not None and assessed else None,
        judged=_judged(row),
        savings_usd=savings * ratio if savings is not None else None,
        step_overhead=row.step_overhead_ratio,
        assessed_busy_seconds=assessed,
        speedup_band=(
            (row.speedup_low_ratio, row.speedup_high_ratio)
            if row.speedup_low_ratio is not None and row.speedup_high_ratio is not None
            else None
        ),
        basis=_weakest_basis(row),
    )


def _weakest_basis(row: RollupRecord) -> Basis | None:
    """The weakest basis the hour's windows were judged on (a load bin is as strong as its
    weakest window); None before the store counted bases (migration 0005)."""
    for basis in reversed(BASES):  # BASES is strongest first
        if getattr(row, f"windows_basis_{basis}"):
            return basis
    return None


def _scaled(amount: Decimal, factor: Decimal) -> Decimal:
    return amount if factor == 1 else (amount * factor).quantize(NANO)
