"""The assessment of a window: ECONOMICS.md's quantities composed per model, with a verdict.

`assess_model` composes the pure formulas for one model; `assess_window` does
it for every model of a window, with the money split by model and the speedup
measured against a control endpoint when there is one. `AssessedWindow` is
what a closed window leaves for history: the window and all that was
concluded about it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from spectax.economics.counterfactual import (
    Basis,
    Source,
    StepModel,
    estimate_speedup,
    verdict_of_band,
)
from spectax.economics.formulas import (
    acceptance_length,
    acceptance_ratio,
    breakeven_acceptance,
    cost_per_million,
    cost_per_million_without_speculation,
    crossover_concurrency,
    draft_compute_share,
    implied_step_overhead,
    position_acceptance,
    recommended_speculative_tokens,
    rejected_share,
    relative_batch,
    speculation_savings_usd,
    speedup_per_step,
    vram_opportunity_usd,
)
from spectax.economics.latency import Latency, assess_latency
from spectax.economics.measured import MIN_MEASURED_REQUESTS, measured_speedup
from spectax.economics.pricing import ModelSpend
from spectax.pipeline.counts import Counts
from spectax.pipeline.windows import Window

Verdict = Literal["pays", "tax", "uncertain", "no_speculation", "no_traffic"]

#: An implied step overhead outside this range says the other parameters (c, B*) are
#: wrong, not that a speculative step is cheaper than half a plain one or 20x dearer.
PLAUSIBLE_STEP_OVERHEAD = (-0.5, 20.0)


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


@dataclass(frozen=True, slots=True)
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
    latency: Latency | None = None  # quantiles, and speculation's effect on them

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
) -> Assessment:
    """Compose the quantities of ECONOMICS.md §2-§4 for one model over one window.

    A window without output has no speedup or savings, one without drafts no
    acceptance: those are None rather than a 0 that looks like a real value.
    The speedup is the measured one when given, else the estimate from the
    counterfactual in force (`estimate_speedup`); the verdict says which.
    """
    g, c, step = traffic.output_tokens, params.draft_cost_ratio, params.step_model
    b_star = step.ridge_batch
    # An engine without a drafted count (SGLang, TGI) speculates, but cannot be priced.
    speculating = traffic.draft_tokens is not None or traffic.drafts is not None
    dt = traffic.draft_tokens or 0.0
    a = traffic.accepted_tokens or 0.0
    dr = traffic.drafts or 0.0
    priced = traffic.draft_tokens is not None and g > 0
    drafting = priced and dt > 0

    alpha = acceptance_ratio(a, dt) if drafting else None
    tau = acceptance_length(a, dr) if speculating and g > 0 and dr > 0 else None
    positions = position_acceptance(traffic.accepted_per_position, dr) if drafting else ()
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
    speedup = estimate.speedup if estimate else None
    h = estimate.step_overhead_ratio if estimate else None
    h_or_0 = h if h is not None else step.step_overhead_ratio
    # A measured speedup speaks for speculation only in a window that had output (with or
    # without a drafted count: SGLang and TGI get a measured verdict from a control).
    if not (speculating and g > 0):
        measured_speedup = None
    in_force = measured_speedup if measured_speedup is not None else speedup
    band = None
    if measured_speedup is not None:
        band = (measured_speedup, measured_speedup)
    elif estimate is not None:
        band = (estimate.low, estimate.high)
    basis: Basis | None = "measured" if measured_speedup is not None else None
    if basis is None and estimate is not None:
        basis = estimate.basis
    if measured_speedup is not None and priced:  # h as measured: break-even, crossover agree
        h = implied_step_overhead(g, a, dt, traffic.concurrency, b_star, c, measured_speedup)
    if h is not None and not PLAUSIBLE_STEP_OVERHEAD[0] <= h <= PLAUSIBLE_STEP_OVERHEAD[1]:
        h = None  # the other parameters (c, B*) are off, not the step: do not pretend
    h_or_0 = h if h is not None else step.step_overhead_ratio

    r = relative_batch(b_star, traffic.concurrency)
    steps_per_draft = (g - a) / dt if drafting else 0.0
    breakeven = crossover = None
    if drafting:
        breakeven = breakeven_acceptance(traffic.concurrency, b_star, c, h_or_0, steps_per_draft)
        assert alpha is not None
        crossover = crossover_concurrency(alpha, b_star, c, h_or_0, steps_per_draft)
    recommended = None
    if positions:
        # Each position is worth drafting on its own merit (the marginal bar has no h: the
        # overhead is paid per step, not per position); then the whole is worth it or not.
        k = recommended_speculative_tokens(
            positions, breakeven_acceptance(traffic.concurrency, b_star, c)
        )
        tau_k = 1.0 + sum(positions[:k])
        if k and speedup_per_step(tau_k, k, traffic.concurrency, b_star, c, h_or_0) <= 1.0:
            k = 0
        recommended = k
    shares = None
    if priced:
        shares = (
            draft_compute_share(g, a, dt, r, c, h_or_0),
            rejected_share(g, a, dt, r, c, h_or_0),
        )

    spend, busy = money.spend_usd, money.busy_spend_usd
    savings = counterfactual = None
    if in_force is not None and spend is not None and busy is not None:
        savings = speculation_savings_usd(busy, in_force, money.draft_load_usd)
        counterfactual = cost_per_million_without_speculation(
            spend, busy, in_force, g, money.draft_load_usd
        )
    overhead = shares if shares and busy is not None else None
    return Assessment(
        model=model,
        output_tokens=g,
        prompt_tokens=traffic.prompt_tokens,
        drafts=traffic.drafts,
        draft_tokens=traffic.draft_tokens,
        accepted_tokens=traffic.accepted_tokens,
        concurrency_requests=traffic.concurrency,
        restarted=traffic.restarted,
        acceptance_ratio=alpha,
        acceptance_length_tokens=tau,
        position_acceptance_ratio=positions,
        breakeven_acceptance_ratio=breakeven,
        speedup_ratio=speedup,
        speedup_measured_ratio=measured_speedup,
        speedup_low_ratio=band[0] if band else None,
        speedup_high_ratio=band[1] if band else None,
        verdict_basis=basis,
        model_source=step.source,
        step_overhead_ratio=h if priced else None,
        crossover_concurrency_requests=crossover,
        recommended_speculative_tokens=recommended,
        draft_compute_share_ratio=shares[0] if shares else None,
        rejected_share_ratio=shares[1] if shares else None,
        seconds=money.seconds,
        spend_usd=spend,
        busy_spend_usd=busy,
        cost_per_million_output_tokens_usd=(
            cost_per_million(spend, g) if spend is not None else None
        ),
        cost_per_million_output_tokens_no_speculation_usd=counterfactual,
        cost_per_million_tokens_usd=(
            cost_per_million(spend, g + traffic.prompt_tokens) if spend is not None else None
        ),
        speculation_savings_usd=savings,
        draft_compute_usd=busy * overhead[0] if busy is not None and overhead else None,
        rejected_usd=busy * overhead[1] if busy is not None and overhead else None,
        vram_usd=(
            vram_opportunity_usd(spend, params.draft_weight_bytes, params.gpu_memory_bytes)
            if speculating and spend is not None
            else None
        ),
        verdict=verdict_for(traffic, band, measured_speedup),
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
) -> dict[str, Assessment]:
    """Every model of the window; `spend` is its money per model (empty when unpriced),
    `control` the control endpoint's window over the same span, if any."""
    result = {}
    for model, counts in window.models.items():
        share = spend.get(model)
        money = Money(
            window.seconds,
            float(share.spend_usd) if share else None,
            float(share.busy_usd) if share else None,
            float(share.draft_load_usd) if share else 0.0,
        )
        found = assess_model(
            model,
            traffic_of(counts, window.concurrency(model), window.restarts > 0),
            params,
            money,
            measured_speedup(window, control, model),
        )
        speculating = found.draft_tokens is not None or found.drafts is not None
        latency = assess_latency(model, counts, speculating, found.speedup_ratio, control)
        result[model] = replace(found, latency=latency)
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
