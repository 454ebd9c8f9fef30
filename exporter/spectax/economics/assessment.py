"""The assessment of a window: ECONOMICS.md's quantities composed per model, with a verdict.

`assess_model` composes the pure formulas for one model; `assess_window` does
it for every model of a window, with the money split by model and the speedup
measured against a control endpoint when there is one. `AssessedWindow` is
what a closed window leaves for history: the window and all that was
concluded about it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Literal

from spectax.economics.formulas import (
    acceptance_length,
    acceptance_ratio,
    best_speculative_tokens,
    breakeven_acceptance,
    breakeven_ridge_batch,
    breakeven_step_overhead,
    cost_per_million,
    cost_per_million_without_speculation,
    crossover_concurrency,
    draft_compute_share,
    implied_step_overhead,
    position_acceptance,
    rejected_share,
    relative_batch,
    speculation_savings_usd,
    vram_opportunity_usd,
)
from spectax.economics.k_schedule import k_at_load, window_straddles
from spectax.economics.latency import Latency, assess_latency
from spectax.economics.measured import MIN_MEASURED_REQUESTS, measured_speedup
from spectax.economics.pricing import ModelSpend
from spectax.economics.step_model import (
    VERDICT_TOLERANCE,
    Basis,
    Source,
    SpeedupEstimate,
    StepModel,
    estimate_speedup,
    verdict_of_band,
)
from spectax.pipeline.counts import Counts
from spectax.pipeline.windows import Window

Verdict = Literal["pays", "tax", "uncertain", "no_speculation", "no_traffic"]

#: The most a speculative step's fixed cost can plausibly exceed a plain one's by (20x): a
#: speedup implying more says c or B* are off, not the step. The least is the floor h_min.
MAX_STEP_OVERHEAD = 20.0


@dataclass(frozen=True, slots=True)
class Traffic:
    """The engine's side of one window: counter deltas and mean concurrency.

    Speculation counters are None when the engine does not speculate.
    """

    output_tokens: float
    prompt_tokens: float
    concurrency: float
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    accepted_per_position: tuple[float, ...] = ()
    restarted: bool = False
    #: The endpoint's own mean time per output token (None: too few finished requests).
    time_per_output_token: float | None = None


@dataclass(frozen=True, slots=True)
class Parameters:
    """Per-endpoint settings the formulas need (ECONOMICS.md §5), and the counterfactual in
    force (§3b: B*, h and where they came from)."""

    draft_cost_ratio: float = 0.0
    step_model: StepModel = field(default_factory=StepModel)
    draft_weight_bytes: int | None = None
    gpu_memory_bytes: int | None = None
    #: The K schedule the engine runs (`speculation.schedule`, vLLM's
    #: num_speculative_tokens_per_batch_size): each window is assessed at its load's K.
    schedule: tuple[tuple[int, int, int], ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Money:
    """Spend over the window: all of it, and the part spent while busy.

    None for an endpoint without a price: its money figures are then left
    out rather than shown as a $0 that looks real. `draft_load_usd` is the
    part of serverless cold-start spend spent loading the draft's weights:
    without speculation it would not have been paid.
    """

    seconds: float
    spend_usd: float | None
    busy_spend_usd: float | None
    draft_load_usd: float = 0.0


@dataclass(frozen=True, slots=True)
class Assessment:
    """Everything spectax says about one endpoint and model over one window."""

    model: str
    output_tokens: float
    prompt_tokens: float
    drafts: float | None
    draft_tokens: float | None
    accepted_tokens: float | None
    concurrency_requests: float
    restarted: bool
    acceptance_ratio: float | None
    acceptance_length_tokens: float | None
    position_acceptance_ratio: tuple[float, ...]
    breakeven_acceptance_ratio: float | None
    speedup_ratio: float | None
    speedup_measured_ratio: float | None
    speedup_low_ratio: float | None  # the band of the speedup in force
    speedup_high_ratio: float | None
    verdict_basis: Basis | None  # measured | calibrated | profile | default
    model_source: Source  # where the counterfactual came from
    step_overhead_ratio: float | None  # h in force (implied by a plain curve, or assumed)
    crossover_concurrency_requests: float | None
    recommended_speculative_tokens: int | None
    draft_compute_share_ratio: float | None
    rejected_share_ratio: float | None
    seconds: float
    spend_usd: float | None
    busy_spend_usd: float | None
    cost_per_million_output_tokens_usd: float | None
    cost_per_million_output_tokens_no_speculation_usd: float | None
    cost_per_million_tokens_usd: float | None
    speculation_savings_usd: float | None
    draft_compute_usd: float | None
    rejected_usd: float | None
    vram_usd: float | None
    verdict: Verdict
    #: The break-even acceptance would be above 1: the step overhead alone outweighs even
    #: a draft that is always accepted, at this load ("no acceptance pays here").
    no_acceptance_pays: bool = False
    #: What a verdict turns on: the h at which the modelled speedup is 1 (at the B* in
    #: force), and the B* above which it pays (at the h in force); None: not priced.
    breakeven_step_overhead_ratio: float | None = None
    breakeven_ridge_batch_requests: float | None = None
    #: The draft length the window ran (per-position counters counted), and the predicted
    #: speedup at the recommended one (equal to the speedup in force when it is "keep").
    speculative_tokens: int | None = None
    recommended_speedup_ratio: float | None = None
    latency: Latency | None = None  # quantiles, and speculation's effect on them
    #: The money at the two ends of the speedup's band (low, high): what an uncertain verdict
    #: shows instead of one precise figure; equal ends for a measured speedup.
    cost_per_million_no_speculation_band_usd: tuple[float, float] | None = None
    speculation_savings_band_usd: tuple[float, float] | None = None
    #: On an endpoint with a K schedule: the K it runs at this window's mean load (None
    #: without one), and whether the window ran two of its K (its mean in one range, its
    #: traffic in two: its figures mix them, as a load bin's spectax_load_schedule_boundary).
    scheduled_speculative_tokens: int | None = None
    schedule_boundary: bool = False

    @property
    def speedup_in_force(self) -> float | None:
        """The measured speedup when there is one, else the modelled one."""
        if self.speedup_measured_ratio is not None:
            return self.speedup_measured_ratio
        return self.speedup_ratio

    def per_hour(self, usd: float | None) -> float | None:
        """A dollar amount over this window as a rate in $/h."""
        if usd is None or self.seconds <= 0:
            return None
        return usd * 3600.0 / self.seconds


def verdict_for(
    traffic: Traffic, band: tuple[float, float] | None, measured: float | None = None
) -> Verdict:
    """pays | tax | uncertain | no_speculation | no_traffic.

    A measured speedup decides alone (above 1 pays); otherwise the band does:
    pays when even its low end is above 1, tax when even its high end is below,
    uncertain when it straddles 1. A window that proposed no drafts is priced
    like any other (§3b: its steps still paid the proposer's overhead).
    """
    if traffic.draft_tokens is None and traffic.drafts is None:
        return "no_speculation"
    if traffic.output_tokens <= 0:
        return "no_traffic"
    if measured is None and band is None:  # SGLang, TGI: no drafted count to price
        return "uncertain"
    if measured is not None:
        return "pays" if measured > 1.0 else "tax"
    assert band is not None
    return verdict_of_band(*band)


def assess_model(
    model: str,
    traffic: Traffic,
    params: Parameters,
    money: Money,
    measured_speedup: float | None = None,
    latency: Callable[[bool, float | None], Latency | None] | None = None,
) -> Assessment:
    """Compose the quantities of ECONOMICS.md §2-§4 for one model over one window.

    A window without output has no speedup or savings, one without drafts no
    acceptance: those are None rather than a 0 that looks like a real value.
    The speedup is the measured one when given, else the estimate from the
    counterfactual in force (`estimate_speedup`); the verdict says which. Every figure
    derived from it (break-even, crossover, the recommended K, the shares, the money)
    uses the h that speedup implies, so no two of them can contradict each other.
    `latency`, given whether the window speculated and the modelled speedup, gives its
    latency (assess_window's quantiles), built into the assessment rather than replaced in.
    """
    traffic, scheduled, boundary = _at_scheduled_k(traffic, params.schedule)
    g, c, step = traffic.output_tokens, params.draft_cost_ratio, params.step_model
    # An engine without a drafted count (SGLang, TGI) speculates, but cannot be priced.
    speculating = traffic.draft_tokens is not None or traffic.drafts is not None
    dt, a, dr = traffic.draft_tokens or 0.0, traffic.accepted_tokens or 0.0, traffic.drafts or 0.0
    priced = traffic.draft_tokens is not None and g > 0
    drafting = priced and dt > 0
    estimate = None
    if priced:
        estimate = estimate_speedup(
            step,
            output_tokens=g,
            accepted=a,
            draft_tokens=dt,
            prompt_tokens=traffic.prompt_tokens,
            concurrency=traffic.concurrency,
            c=c,
            time_per_output_token=traffic.time_per_output_token,
        )
    # A measured speedup speaks for speculation only in a window that had output (with or
    # without a drafted count: SGLang and TGI get a measured verdict from a control).
    if not (speculating and g > 0):
        measured_speedup = None
    band, basis = _band_and_basis(estimate, measured_speedup, speculating and g > 0)
    h = _overhead_in_force(traffic, params, estimate, measured_speedup if priced else None)
    in_force = estimate.speedup if estimate and measured_speedup is None else measured_speedup
    derived = _derived(traffic, params, h, in_force, scheduled)
    cash = _money_figures(traffic, params, money, (in_force, band), derived.shares, speculating)
    modelled = estimate.speedup if estimate else None
    return Assessment(
        model=model,
        output_tokens=g,
        prompt_tokens=traffic.prompt_tokens,
        drafts=traffic.drafts,
        draft_tokens=traffic.draft_tokens,
        accepted_tokens=traffic.accepted_tokens,
        concurrency_requests=traffic.concurrency,
        restarted=traffic.restarted,
        acceptance_ratio=acceptance_ratio(a, dt) if drafting else None,
        acceptance_length_tokens=(
            acceptance_length(a, dr) if speculating and g > 0 and dr > 0 else None
        ),
        position_acceptance_ratio=derived.positions,
        breakeven_acceptance_ratio=derived.breakeven,
        speedup_ratio=modelled,
        speedup_measured_ratio=measured_speedup,
        speedup_low_ratio=band[0] if band else None,
        speedup_high_ratio=band[1] if band else None,
        verdict_basis=basis,
        model_source=step.source,
        step_overhead_ratio=h if priced else None,
        crossover_concurrency_requests=derived.crossover,
        recommended_speculative_tokens=derived.recommended,
        draft_compute_share_ratio=derived.shares[0] if derived.shares else None,
        rejected_share_ratio=derived.shares[1] if derived.shares else None,
        verdict=verdict_for(traffic, band, measured_speedup),
        no_acceptance_pays=derived.no_acceptance_pays,
        breakeven_step_overhead_ratio=derived.breakeven_h,
        breakeven_ridge_batch_requests=derived.breakeven_b_star,
        speculative_tokens=derived.k_now,
        recommended_speedup_ratio=derived.recommended_speedup,
        seconds=money.seconds,
        spend_usd=cash.spend,
        busy_spend_usd=cash.busy,
        cost_per_million_output_tokens_usd=cash.cost_per_million,
        cost_per_million_output_tokens_no_speculation_usd=cash.cost_per_million_without,
        cost_per_million_tokens_usd=cash.cost_per_million_all,
        speculation_savings_usd=cash.savings,
        draft_compute_usd=cash.draft_compute,
        rejected_usd=cash.rejected,
        vram_usd=cash.vram,
        cost_per_million_no_speculation_band_usd=cash.cost_per_million_without_band,
        speculation_savings_band_usd=cash.savings_band,
        scheduled_speculative_tokens=scheduled,
        schedule_boundary=boundary,
        latency=latency(speculating, modelled) if latency is not None else None,
    )


def _overhead_in_force(
    traffic: Traffic, params: Parameters, estimate: SpeedupEstimate | None, measured: float | None
) -> float:
    """The h every figure uses: the one its speedup implies (as measured, when a measured
    speedup of a priced window is given: break-even and crossover then agree with it), held
    within physics: an h under the floor (or past 20) says c or B* are off, and the nearest
    h physics allows stands in for it."""
    step = params.step_model
    h = estimate.step_overhead_ratio if estimate else None
    if measured is not None:
        g, a, dt = traffic.output_tokens, traffic.accepted_tokens or 0.0, traffic.draft_tokens
        h = implied_step_overhead(
            g,
            a,
            dt or 0.0,
            traffic.concurrency,
            step.ridge_batch,
            params.draft_cost_ratio,
            measured,
        )
    h = h if h is not None else step.step_overhead
    return min(max(h, step.step_overhead_floor), MAX_STEP_OVERHEAD)


def _at_scheduled_k(
    traffic: Traffic, schedule: tuple[tuple[int, int, int], ...] | None
) -> tuple[Traffic, int | None, bool]:
    """(traffic, K, straddles): the K a schedule runs at the window's mean load, whether
    the window ran two of its K, and its traffic as a plain window's where that K is 0 and
    it drafted nothing: it ran plain, no tax (nor gain) of speculation, whatever its speed.
    Without a schedule: (traffic, None, False)."""
    if schedule is None:
        return traffic, None, False
    k = k_at_load(schedule, traffic.concurrency)
    drafted, drafts = traffic.draft_tokens or 0.0, traffic.drafts or 0.0
    boundary = window_straddles(schedule, traffic.concurrency, drafted, drafts)
    if k == 0 and drafted == 0 and drafts == 0:
        traffic = replace(
            traffic, drafts=None, draft_tokens=None, accepted_tokens=None, accepted_per_position=()
        )
    return traffic, k, boundary


def _band_and_basis(
    estimate: SpeedupEstimate | None, measured: float | None, speculated: bool
) -> tuple[tuple[float, float] | None, Basis | None]:
    """The band of the speedup in force and what it rests on: a measurement is its own band;
    an engine without a drafted count and no control is on nothing better than defaults
    (basis default, no band: uncertain), so the on-call still sees a verdict."""
    if measured is not None:
        return (measured, measured), "measured"
    if estimate is not None:
        return (estimate.low, estimate.high), estimate.basis
    return None, "default" if speculated else None


@dataclass(frozen=True, slots=True)
class _Derived:
    """What follows from the counters once the speedup and its h are settled."""

    positions: tuple[float, ...] = ()
    breakeven: float | None = None
    no_acceptance_pays: bool = False
    crossover: float | None = None
    k_now: int | None = None
    recommended: int | None = None
    recommended_speedup: float | None = None
    shares: tuple[float, float] | None = None
    breakeven_h: float | None = None
    breakeven_b_star: float | None = None


def _derived(
    traffic: Traffic, params: Parameters, h: float, in_force: float | None, scheduled: int | None
) -> _Derived:
    """Break-even, crossover, the draft length to run and the shares, all at B* and h; under
    a K schedule at the `scheduled` K: the positions past it were drafted by another load's K
    (or, never drafted at this one, count 0: no acceptance to price a longer K with)."""
    g, c, b_star = traffic.output_tokens, params.draft_cost_ratio, params.step_model.ridge_batch
    dt, a, dr = traffic.draft_tokens, traffic.accepted_tokens or 0.0, traffic.drafts or 0.0
    if dt is None or g <= 0:
        return _Derived()
    b, r = traffic.concurrency, relative_batch(b_star, traffic.concurrency)
    shares = (draft_compute_share(g, a, dt, r, c, h), rejected_share(g, a, dt, r, c, h))
    breakeven_h = breakeven_step_overhead(g, a, dt, b, b_star, c)
    breakeven_b_star = breakeven_ridge_batch(g, a, dt, b, c, h)
    if dt <= 0:
        return _Derived(shares=shares, breakeven_h=breakeven_h, breakeven_b_star=breakeven_b_star)
    steps_per_draft = (g - a) / dt
    breakeven = breakeven_acceptance(b, b_star, c, h, steps_per_draft)
    positions = position_acceptance(traffic.accepted_per_position, dr)
    if scheduled is not None:
        positions = positions[:scheduled]
    k_now = recommended = speedup = None
    if positions and in_force is not None and g > a:
        k_now = len(positions)
        recommended, speedup = recommended_draft_length(
            positions, b, b_star, c, h, drafting=(g, a, dt, dr), in_force=in_force
        )
    return _Derived(  # built once, not replaced: ~4 us a window at every scrape (issue 31)
        positions=positions,
        # Above 1 the overhead alone outweighs even a draft that is always accepted.
        breakeven=breakeven if breakeven <= 1.0 else None,
        no_acceptance_pays=breakeven > 1.0,
        crossover=crossover_concurrency(a / dt, b_star, c, h, steps_per_draft),
        k_now=k_now,
        recommended=recommended,
        recommended_speedup=speedup,
        shares=shares,
        breakeven_h=breakeven_h,
        breakeven_b_star=breakeven_b_star,
    )


def recommended_draft_length(
    positions: tuple[float, ...],
    concurrency: float,
    ridge_batch: float,
    c: float,
    h: float,
    *,
    drafting: tuple[float, float, float, float],
    in_force: float,
) -> tuple[int, float]:
    """(K, S): the draft length to run at this load, among the K observed, and the speedup
    it predicts; `drafting` is (G, A, Dt, Dr), the counts the positions came from (G > A,
    Dr > 0), `in_force` the speedup of the K that ran. A K is advised only when it beats
    what runs now: otherwise keep the K that ran when it pays, else 0 (turn it off). The one
    rule for a window's advice (`_derived`) and a load bin's (`economics.draft_schedule`)."""
    g, a, dt, dr = drafting
    k_now = len(positions)
    # The share of K a draft proposed; at most all of it: under a K schedule a window that
    # also ran a larger K drafted more per draft than the K it is assessed at.
    fill = min(1.0, dt / (dr * k_now))
    k, speedup = best_speculative_tokens(
        positions, concurrency, ridge_batch, c, h, dr / (g - a), fill
    )
    if k == 0 or speedup <= max(in_force, 1.0) * (1.0 + VERDICT_TOLERANCE):
        # Nothing observed beats what runs now: keep it when it pays, else turn it off.
        return (k_now, in_force) if in_force > 1.0 else (0, 1.0)
    return k, speedup


@dataclass(frozen=True, slots=True)
class _MoneyFigures:
    spend: float | None = None
    busy: float | None = None
    cost_per_million: float | None = None
    cost_per_million_without: float | None = None
    cost_per_million_all: float | None = None
    savings: float | None = None
    draft_compute: float | None = None
    rejected: float | None = None
    vram: float | None = None
    cost_per_million_without_band: tuple[float, float] | None = None
    savings_band: tuple[float, float] | None = None


def _money_figures(
    traffic: Traffic,
    params: Parameters,
    money: Money,
    speedups: tuple[float | None, tuple[float, float] | None],
    shares: tuple[float, float] | None,
    speculating: bool,
) -> _MoneyFigures:
    """The window's money at the speedup in force and at the ends of its band (`speedups`):
    spend, cost per million, savings, and the draft overhead in dollars (the busy spend
    times each share)."""
    g, spend, busy = traffic.output_tokens, money.spend_usd, money.busy_spend_usd
    if spend is None:
        return _MoneyFigures(busy=busy)
    in_force, band = speedups

    def at(s: float) -> tuple[float, float | None]:
        assert spend is not None and busy is not None
        return (
            speculation_savings_usd(busy, s, money.draft_load_usd),
            cost_per_million_without_speculation(spend, busy, s, g, money.draft_load_usd),
        )

    savings = counterfactual = savings_band = counterfactual_band = None
    if in_force is not None and busy is not None:
        savings, counterfactual = at(in_force)
    if band is not None and busy is not None:
        (low_savings, low_cost), (high_savings, high_cost) = at(band[0]), at(band[1])
        savings_band = (low_savings, high_savings)
        if low_cost is not None and high_cost is not None:
            counterfactual_band = (low_cost, high_cost)
    vram = None
    if speculating:
        vram = vram_opportunity_usd(spend, params.draft_weight_bytes, params.gpu_memory_bytes)
    return _MoneyFigures(
        spend=spend,
        busy=busy,
        cost_per_million=cost_per_million(spend, g),
        cost_per_million_without=counterfactual,
        cost_per_million_all=cost_per_million(spend, g + traffic.prompt_tokens),
        savings=savings,
        draft_compute=busy * shares[0] if busy is not None and shares else None,
        rejected=busy * shares[1] if busy is not None and shares else None,
        vram=vram,
        cost_per_million_without_band=counterfactual_band,
        savings_band=savings_band,
    )


def traffic_of(
    counts: Counts, concurrency: float, restarted: bool, min_requests: int = MIN_MEASURED_REQUESTS
) -> Traffic:
    """The economics' input from one model's counter deltas."""
    timing = counts.time_per_output_token
    tpot = None
    if timing is not None and timing.count >= min_requests and timing.sum > 0:
        tpot = timing.sum / timing.count
    return Traffic(
        output_tokens=counts.generation_tokens,
        prompt_tokens=counts.prompt_tokens,
        concurrency=concurrency,
        drafts=counts.drafts,
        draft_tokens=counts.draft_tokens,
        accepted_tokens=counts.accepted_tokens,
        accepted_per_position=counts.accepted_per_position,
        restarted=restarted,
        time_per_output_token=tpot,
    )


def assess_window(
    window: Window,
    params: Parameters,
    spend: dict[str, ModelSpend],
    control: Window | None = None,
    *,
    latency: bool = True,
) -> dict[str, Assessment]:
    """Every model of the window; `spend` is its money per model (empty when unpriced),
    `control` the control endpoint's window over the same span, if any. Without `latency`
    the quantiles are left out (Assessment.latency None): a window bound for the store,
    which keeps its buckets and derives them when read, need not pay for them at every
    scrape (the open window is written every second; issue 31)."""
    result = {}
    for model, counts in window.models.items():
        share = spend.get(model)
        money = Money(
            seconds=window.seconds,
            spend_usd=float(share.spend_usd) if share else None,
            busy_spend_usd=float(share.busy_usd) if share else None,
            draft_load_usd=float(share.draft_load_usd) if share else 0.0,
        )
        result[model] = assess_model(
            model,
            traffic_of(counts, window.concurrency(model), window.restarts > 0),
            params,
            money,
            measured_speedup(window, control, model),
            partial(assess_latency, model, counts, control=control) if latency else None,
        )
    return result


@dataclass(frozen=True, slots=True)
class AssessedWindow:
    """A closed window and what was concluded about it, as history keeps it: the
    assessments and money per model, and the parameters they were computed with."""

    window: Window
    assessments: dict[str, Assessment]
    spend: dict[str, ModelSpend]  # empty when the endpoint has no price
    step_model: StepModel
    draft_cost_ratio: float | None
