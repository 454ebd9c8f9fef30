"""What to change, with the evidence, its basis and confidence, and the dollars at stake.

Every figure an hour brings is what the daemon concluded about its windows, summed by
the rollups: their verdicts counted, their speedup (busy time without speculation over
busy time), their net savings, and the step overhead h and ridge batch B* they were
assessed with. Nothing is judged again from an hour's counters; only the what-ifs (a
crossover concurrency, another draft length) are modelled, and with the windows' own h
and B* (§3b), never h = 0. The reference acceptance is that of the hours that paid (or
were uncertain with S > 1): what the endpoint's traffic accepts when speculation works.
Its crossover concurrency B_x splits the tax hours in two: above B_x the load is the
cause, at or below it the traffic is.

- `disable_above`: hours above B_x (the GPU compute-bound). Stake: their net tax.
  Not advised where `schedule_k` is: the schedule's K = 0 above its crossover is the same
  cap, applied by vLLM itself, and counting both would count those hours twice.
- `route_high_temperature`: tax hours at or below B_x, whose acceptance fell
  under break-even (typically sampling at high temperature). Stake: their net tax.
- `change_k`: on the hours that stay speculative after those two, a shorter draft
  length N predicts a higher speedup than the K that ran, from the positions observed
  (a position never drafted is a guess: a longer K is never advised). Stake: the
  modelled difference, hour by hour.
- `schedule_k` (vLLM): a K per batch range from the month's load curve (the drafting hours'
  windows binned by mean running requests: `HourPoint.load_samples`), where it changes K
  with the load. Stake: each bin's busy spend times the predicted speedup minus the one in
  force. It also supersedes `change_k` (its K per bin is the K change at every load).
- `turn_off`: no hour paid, or the month was a net tax that the fixes above
  (the load cap or the K schedule, and routing) do not turn around. Stake: the month's
  net tax.
- `keep`: nothing above is worth doing. Stake: the month's net savings, which
  turning speculation off would give up.

Each carries its basis (the windows' verdict bases: measured, calibrated, profile,
default) and a confidence; one resting on verdicts that were mostly uncertain, or on
defaults alone, says it is a guess and what would settle it.

A fix is advised when it is worth at least MIN_STAKE_USD and MIN_STAKE_SHARE of
the spend. Dollars at stake are those of the month reported (the part of it
that was monitored, not extrapolated), on its spend basis; on provisioned
endpoints they are GPU capacity, not invoice money.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from spectax import economics
from spectax.economics.draft_schedule import (
    PER_BATCH_ENGINES,
    VLLM_SCHEDULE_KEY,
    BinDraftLength,
    draft_schedule,
)
from spectax.economics.load_curve import LoadCurve
from spectax.economics.step_model import BASES
from spectax.load_curve_text import ranges_text, tax_sentence
from spectax.report.figures import (
    NOT_RECORDED,
    EndpointInfo,
    Figures,
    HourPoint,
    month_curve,
    verdicts_line,
)

# A fix must be worth at least this much (and this share of the spend) to be advised.
MIN_STAKE_USD = 1.0
MIN_STAKE_SHARE = 0.005
# The tax of low-acceptance hours must come from at least this share of drafting hours.
MIN_HOURS_SHARE = 0.05
# Confidence: high when at least this share of the windows was decided (pays or tax) on a
# basis better than the defaults; medium from half; else low, and the advice is a guess.
HIGH_DECIDED_SHARE = 0.9
MEDIUM_DECIDED_SHARE = 0.5
SETTLE = (
    "What would settle it, cheapest first: a `control:` endpoint serving the same model "
    "without speculation (basis measured); a sweep (`vllm bench serve` at a few "
    "concurrencies with and without speculation, then `spectax model fit --save-profile`, "
    "referenced as `profile:`); or this endpoint's own history from before speculation "
    "(run it without `speculation:` for a while: a baseline, basis calibrated)."
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Recommendation:
    endpoint: str
    action: str  # keep | change_k | schedule_k | disable_above | route_high_temperature | turn_off
    title: str
    usd_at_stake: float | None  # over the month reported; None when the endpoint has no price
    semantics: str  # capacity | invoice | unknown
    evidence: tuple[str, ...]
    basis: str = NOT_RECORDED  # the windows' commonest verdict basis (figures.BASES)
    confidence: str = "low"  # high | medium | low (low: a guess, and the evidence says so)


def recommend(
    info: EndpointInfo, month: Figures, hours: Sequence[HourPoint]
) -> list[Recommendation]:
    """The recommendations for one endpoint's month, each with its basis and confidence;
    [] when it does not speculate."""
    basis, confidence = evidence_strength(month)
    return [_qualified(r, month, basis, confidence) for r in _recommend(info, month, hours)]


def evidence_strength(month: Figures) -> tuple[str, str]:
    """(basis, confidence) of a month's verdicts. The basis is the one most windows were
    judged on (the stronger on a tie). Confidence is high when nearly all windows were
    decided (pays or tax) on a basis better than the defaults; medium when most were, or
    when nearly all were decided on defaults (the verdict held over their whole range,
    the dollars did not); low otherwise: mostly uncertain, and the advice a guess."""
    counts = {b: month.basis_windows.get(b, 0) for b in BASES}
    if not any(counts.values()):
        return NOT_RECORDED, "low"
    basis = max(BASES, key=lambda b: (counts[b], -BASES.index(b)))
    judged = month.windows_judged
    decided = (month.windows_pays + month.windows_tax) / judged if judged else 0.0
    if decided >= HIGH_DECIDED_SHARE:
        return basis, "medium" if basis == "default" else "high"
    if decided >= MEDIUM_DECIDED_SHARE and basis != "default":
        return basis, "medium"
    return basis, "low"


def _qualified(r: Recommendation, month: Figures, basis: str, confidence: str) -> Recommendation:
    """The recommendation with its basis and confidence. A low-confidence one says in its
    title that it is a guess, and in its evidence why and what would settle it; one on
    defaults says what would settle its dollars, which rest on the defaults' point."""
    shown = "not recorded" if basis == NOT_RECORDED else f"{basis} (the windows' commonest)"
    lead = f"Basis: {shown}, confidence {confidence}."
    judged = month.windows_judged
    if confidence != "low":
        extra: tuple[str, ...] = ()
        if basis == "default":
            extra = (
                "The verdict held over the defaults' whole range (B* and h), but the dollars "
                "are their point estimate: a guess until measured.",
                SETTLE,
            )
        return replace(r, evidence=(lead, *extra, *r.evidence), basis=basis, confidence=confidence)
    parts = []
    if month.windows_uncertain:
        parts.append(f"{month.windows_uncertain:,} of {judged:,} windows judged were uncertain")
    parts.append(
        {
            "default": "the verdicts rest on defaults (a configured B* and a plausible range "
            "for h, nothing measured)",
            NOT_RECORDED: "the verdicts were stored before spectax recorded how they were reached",
        }.get(basis, f"the verdicts rest on the {basis} basis")
    )
    guess = f"This is a guess: {', and '.join(parts)}."
    return replace(
        r,
        title=f"{r.title} (a guess: {basis})",
        evidence=(lead, guess, SETTLE, *r.evidence),
        basis=basis,
        confidence=confidence,
    )


@dataclass(frozen=True)
class _Evidence:
    """What every action's rule reads of the month: computed once, in `_evidence`."""

    info: EndpointInfo
    month: Figures
    drafting: list[HourPoint]
    curve: LoadCurve  # the month's load curve, idle hours included (`figures.month_curve`)
    paying: list[HourPoint]  # the hours that paid (an uncertain hour that gains counts)
    reference: float | None  # the paying hours' pooled acceptance: what the traffic accepts
    crossover: float | None  # B_x at the reference acceptance
    above: list[HourPoint]  # drafting hours above B_x, and at or below it
    below: list[HourPoint]
    c: float
    ridge: float
    threshold: float  # the least dollars at stake a fix must be worth
    base: tuple[str, ...]


def _recommend(
    info: EndpointInfo, month: Figures, hours: Sequence[HourPoint]
) -> list[Recommendation]:
    """The month's advice for one endpoint, one rule per action: the partial fixes (a load
    cap, routing, another K) first; speculation off when none of them makes it pay."""
    if not month.speculating:
        return []
    drafting = [h for h in hours if h.drafting]
    with_traffic = [h for h in hours if h.output_tokens > 0]
    if not drafting:
        return _nothing_drafted(info, month, with_traffic) if with_traffic else []
    curve = month_curve(hours)
    assert curve is not None  # an hour drafted
    e = _evidence(info, month, drafting, curve)
    # On vLLM a K schedule supersedes the load cap and the one K: its K = 0 from the curve's
    # crossover up is the cap, applied by the engine itself, and its K per bin is the K
    # change at every load, so the same tax hours are never counted in two stakes.
    schedule = _schedule_k(e)
    fixes = [f for f in (schedule or _disable_above(e), _route_high_temperature(e)) if f]
    if schedule is None:
        # The draft length, judged on the hours that stay speculative after the fixes above.
        moved = {
            id(h) for f in fixes for h in (e.above if f.action == "disable_above" else _low(e))
        }
        kept = [h for h in drafting if id(h) not in moved]
        k_now = len(month.position_acceptance) or round(month.mean_draft_length or 0)
        change = _change_k(info.name, info.semantics, kept, k_now, e.threshold)
        if change is not None:
            fixes.append(change)
    off = _turn_off(e, fixes)
    if off is not None:
        return [off]
    if fixes:
        return sorted(fixes, key=lambda r: -(r.usd_at_stake or 0.0))
    return [_keep(e)]


def _nothing_drafted(
    info: EndpointInfo, month: Figures, with_traffic: Sequence[HourPoint]
) -> list[Recommendation]:
    tax = -month.savings if month.savings is not None and month.savings < 0 else 0.0
    stake = (month.vram_usd or 0.0) + tax if month.priced else None
    return [
        Recommendation(
            endpoint=info.name,
            action="turn_off",
            title="Turn speculation off: it proposed no drafts",
            usd_at_stake=stake,
            semantics=info.semantics,
            evidence=(
                f"{len(with_traffic)} hour(s) with output and not one draft token proposed "
                "(n-gram drafting that never finds a match, or a drafter that is not running).",
                "Every step still paid the proposer's cost with nothing to show for it "
                '(docs/economics.md, "The floor under h": S = (r + 1)/(r(1 + h) + 1), '
                "below 1 for any h > 0), besides the draft's memory and load time.",
                verdicts_line(month),
            ),
        )
    ]


def _evidence(
    info: EndpointInfo, month: Figures, drafting: list[HourPoint], curve: LoadCurve
) -> _Evidence:
    alpha = month.acceptance
    c = month.draft_cost_ratio or 0.0
    ridge = month.ridge_batch or economics.DEFAULT_RIDGE_BATCH
    h = month.step_overhead  # the latest window's: what the verdicts were reached with
    # An uncertain hour (its band straddles 1, typically on the default basis) is not evidence
    # of a tax: it counts as paying when its point estimate does, so that no basis too weak to
    # tell turns speculation off. Only hours judged a tax are evidence for the fixes.
    paying = [x for x in drafting if x.verdict == "pays" or (x.verdict == "uncertain" and x.gains)]
    # The reference acceptance is that of the hours that paid: what this endpoint's traffic
    # accepts when it works. Above its crossover B_x even that traffic is a tax (the load is
    # the cause); at or below it, a tax hour is one whose traffic accepted too little.
    reference = _pooled_acceptance(paying) if paying else alpha
    crossover = None
    if reference is not None and h is not None:  # never h = 0 in place of the windows' own
        q = _steps_per_draft_token(paying or drafting)
        crossover = economics.crossover_concurrency(reference, ridge, c, h, q)
    bounded = crossover is not None and crossover != float("inf")
    above = [x for x in drafting if bounded and x.concurrency > (crossover or 0.0)]
    return _Evidence(
        info=info,
        month=month,
        drafting=drafting,
        curve=curve,
        paying=paying,
        reference=reference,
        crossover=crossover,
        above=above,
        below=[x for x in drafting if not (bounded and x.concurrency > (crossover or 0.0))],
        c=c,
        ridge=ridge,
        threshold=max(MIN_STAKE_USD, MIN_STAKE_SHARE * float(month.spend)),
        base=_base_evidence(month, alpha, month.breakeven, month.concurrency, c, ridge),
    )


def _low(e: _Evidence) -> list[HourPoint]:
    """The tax hours at or below B_x: their traffic, not the load, made them a tax."""
    return [x for x in e.below if x.verdict == "tax"]


def _disable_above(e: _Evidence) -> Recommendation | None:
    stake = _net_tax(e.above)
    if not (e.above and e.below and _worth(stake, e.threshold, e.above)):
        return None
    assert e.crossover is not None and e.reference is not None
    h = e.month.step_overhead
    return Recommendation(
        endpoint=e.info.name,
        action="disable_above",
        title=f"Disable speculation above {e.crossover:.0f} concurrent requests",
        usd_at_stake=stake,
        semantics=e.info.semantics,
        evidence=(
            "Crossover concurrency B_x = B*(alpha - c - h*q)/(1 - alpha + c) = "
            f"{e.crossover:.1f} requests at acceptance {e.reference:.3f} (that of the hours "
            f"that paid; c = {e.c:g}, B* = {e.ridge:.1f}, h = {h:.3g} as the windows were "
            "assessed): above it the GPU is compute-bound and "
            "speculation is a tax even when drafts are accepted as usual.",
            _hours_line(e.above, f"above {e.crossover:.0f} requests"),
            _hours_line(e.below, f"at or below {e.crossover:.0f} requests"),
            _load_switch(e.info.engine, e.crossover),
        ),
    )


#: The flag that caps an engine's running batch, for the engines that cannot switch
#: speculation by load themselves.
_BATCH_CAP = {
    "sglang": "--max-running-requests",
    "trtllm": "--max_batch_size",
    "tgi": "--max-batch-size",
    "llamacpp": "--parallel",
}


def _load_switch(engine: str, crossover: float) -> str:
    """How the engine turns speculation off above B_x: vLLM itself, with a K of 0 for the
    batches above it (Dynamic Speculative Decoding, vLLM PR 32374); the others cannot, so
    the load above it is routed away or capped."""
    first_off = int(crossover) + 1
    if engine in PER_BATCH_ENGINES:
        return (
            f"vLLM switches speculation by load itself: a `{VLLM_SCHEDULE_KEY}` in its "
            f"--speculative-config with K = 0 from batch {first_off} (Dynamic Speculative "
            "Decoding; the K schedule gives the K for every batch); or route overflow traffic "
            "to replicas without speculation."
        )
    cap = _BATCH_CAP.get(engine, "the engine's largest batch")
    return (
        f"{engine} cannot switch speculation by load on its own: route overflow traffic to "
        f"replicas without speculation, or cap {cap} near B_x."
    )


def _route_high_temperature(e: _Evidence) -> Recommendation | None:
    low = _low(e)
    stake = _net_tax(low)
    if not (
        low
        and e.paying
        and len(low) >= MIN_HOURS_SHARE * len(e.drafting)
        and _worth(stake, e.threshold, low)
    ):
        return None
    assert e.reference is not None
    where = (
        f"to {e.info.control}, which serves the same model without speculation"
        if e.info.control
        else "to replicas without speculation"
    )
    return Recommendation(
        endpoint=e.info.name,
        action="route_high_temperature",
        title="Route high-temperature traffic to plain decoding",
        usd_at_stake=stake,
        semantics=e.info.semantics,
        evidence=(
            f"In {len(low)} of {len(e.drafting)} drafting hours acceptance fell to "
            f"{_pooled_acceptance(low):.3f}, under those hours' break-even "
            f"({_mean(x.breakeven for x in low if x.breakeven is not None):.3f} on "
            "average), at a concurrency where "
            f"the hours that paid (acceptance {e.reference:.3f}) would have paid: the "
            "traffic, not the load, made them a tax.",
            "Acceptance falls as sampling temperature rises: send requests sampled at "
            f"high temperature (say above 0.7) {where}.",
            _hours_line(low, "with low acceptance"),
        ),
    )


def _schedule_k(e: _Evidence) -> Recommendation | None:
    """A draft length per batch range from the month's load curve (`economics.load_curve`,
    `economics.draft_schedule`): advised on vLLM (the engine with a per-batch K) when the
    schedule changes K with the load (one K everywhere is keep, change_k or turn_off) and
    is worth the threshold. Stake: each bin's busy spend times its predicted speedup minus
    the one in force, over the month's hours."""
    if e.info.engine not in PER_BATCH_ENGINES:
        return None  # no per-batch knob: disable_above says where to turn it off
    curve = e.curve
    schedule = draft_schedule(curve, engine=e.info.engine, method=e.info.method)
    config = schedule.vllm_config
    if not config or VLLM_SCHEDULE_KEY not in config or not schedule.changes_seen_loads:
        return None  # the loads that ran keep their K: the rest is the model's, unspent
    if not _worth(schedule.at_stake_usd, e.threshold, e.drafting):
        return None
    ranges = ranges_text(schedule.ranges)
    sentence = tax_sentence(curve, "the hours", _usd)
    tax = [f"{sentence[0].upper()}{sentence[1:]}."] if sentence else []
    return Recommendation(
        endpoint=e.info.name,
        action="schedule_k",
        title=f"Run K by batch size: K = {ranges}",
        usd_at_stake=schedule.at_stake_usd,
        semantics=e.info.semantics,
        evidence=(
            "The month's load curve (windows binned by mean running requests; speedup as the "
            "windows concluded it, summed):",
            *(_bin_line(x) for x in schedule.lengths),
            *tax,
            "Each bin's K is the window advice's at the bin's load, with the h its own speedup "
            'implies (docs/economics.md, "The load curve and the K schedule"); a batch size '
            "no hour ran at is priced by the model with the acceptance and h of the bin below.",
            "Apply with `--speculative-config '" + json.dumps(config) + "'` (vLLM 0.32; keep "
            "your other keys; vLLM ignores the per-batch list with data parallelism).",
        ),
    )


def _bin_line(x: BinDraftLength) -> str:
    """One bin of the curve and its K: load, time share, speedup with its basis, acceptance,
    net savings, and its evidence when thin."""
    b = x.bin
    speedup = "no speedup" if b.speedup is None else f"speedup {b.speedup:.3f} (basis {b.basis})"
    acceptance = "" if b.acceptance is None else f", acceptance {b.acceptance:.3f}"
    net = "" if b.savings_usd is None else f", net {_usd(b.savings_usd)}"
    thin = f" (thin: {b.windows} window(s))" if b.thin else ""
    k = "" if x.k is None else f"; K = {x.k} (ran {x.k_running})"
    return (
        f"{b.label} requests: {b.time_share:.0%} of the time, {speedup}{acceptance}{net}{thin}{k}."
    )


def _turn_off(e: _Evidence, fixes: Sequence[Recommendation]) -> Recommendation | None:
    """Speculation off when not one hour paid, or when no partial fix recovers the tax."""
    month, savings = e.month, e.month.savings
    recovered = sum(
        f.usd_at_stake or 0.0
        for f in fixes
        if f.action in ("disable_above", "schedule_k", "route_high_temperature")
    )
    off = not e.paying or (savings is not None and savings < 0 and savings + recovered <= 0)
    if savings is None and month.speedup is not None and month.speedup < 1.0 and not fixes:
        off = True  # the windows' own speedup, summed
    if not off:
        return None
    why = (
        "Not one hour paid"
        if not e.paying
        else "No partial fix (a load cap, routing, another K) makes it pay"
    )
    net = f" The month's net: {_usd(savings)}." if savings is not None else ""
    control = e.info.control
    memory = f"The draft's weights also hold {_usd(month.vram_usd)} of GPU memory."
    plain = f"{control} serves the same model without speculation already."
    return Recommendation(
        endpoint=e.info.name,
        action="turn_off",
        title="Turn speculation off",
        usd_at_stake=-savings if savings is not None else None,
        semantics=e.info.semantics,
        evidence=(
            *e.base,
            f"{why}.{net}",
            verdicts_line(month),
            *([memory] if month.vram_usd else []),
            *([plain] if control else []),
        ),
    )


def _keep(e: _Evidence) -> Recommendation:
    return Recommendation(
        endpoint=e.info.name,
        action="keep",
        title="Keep speculation as it is",
        usd_at_stake=e.month.savings,
        semantics=e.info.semantics,
        evidence=(
            *e.base,
            verdicts_line(e.month),
            "The dollars at stake are what turning speculation off would give up.",
        ),
    )


def _change_k(
    name: str,
    semantics: str,
    hours: Sequence[HourPoint],
    k_now: int,
    threshold: float,
) -> Recommendation | None:
    """Change K to N < K when, from the positions observed, N predicts a higher speedup over
    `hours` than K (each hour modelled at its own concurrency, B* and h, as its windows
    were assessed). Only observed positions count: a longer K would rest on the acceptance
    of a position never drafted, a guess, so it is never advised (ECONOMICS.md §3)."""
    hours = [h for h in hours if h.step_overhead is not None]
    drafts = sum(h.drafts for h in hours)
    if not hours or drafts <= 0 or k_now <= 0:
        return None
    totals: list[int] = []
    for h in hours:
        for i, a in enumerate(h.positions):
            if i == len(totals):
                totals.append(0)
            totals[i] += a
    observed = min(len(totals), k_now)
    if observed <= 0:
        return None
    predicted = {k: _predicted(hours, k) for k in range(1, observed + 1)}
    now = _predicted(hours, k_now)
    k_best = max(predicted, key=lambda k: (predicted[k], -k))
    if k_best == k_now or predicted[k_best] <= now:
        return None
    stake = _stake_change_k(hours, k_now, k_best)
    if not _worth(stake, threshold, hours):
        return None
    positions = economics.position_acceptance(totals, drafts)
    shown = ", ".join(f"{p:.2f}" for p in positions)
    steps = [h.step_overhead for h in hours if h.step_overhead is not None]
    overhead = (
        f"{min(steps):.3g}" if min(steps) == max(steps) else f"{min(steps):.3g}-{max(steps):.3g}"
    )
    return Recommendation(
        endpoint=name,
        action="change_k",
        title=f"Change num_speculative_tokens (K) from {k_now} to {k_best}",
        usd_at_stake=stake,
        semantics=semantics,
        evidence=(
            f"Per-position acceptance p_k = {shown}, all observed (over the {len(hours)} hours "
            f"that stay speculative): with h = {overhead} as the windows were assessed, "
            f"K = {k_best} predicts a speedup of {predicted[k_best]:.3f} against "
            f"{now:.3f} at K = {k_now} (busy-time weighted).",
            f"Each hour's speedup modelled with K = {k_best} against K = {k_now}, at that "
            "hour's concurrency, B*, h and per-position acceptance"
            + (", valued at its busy spend." if stake is not None else " (no price: no dollars)."),
        ),
    )


def _predicted(hours: Sequence[HourPoint], k: int) -> float:
    """The speedup `hours` would have had at draft length k, weighted by their seconds."""
    pairs = [(h.seconds, speedup_with_k(h, k)) for h in hours]
    weight = sum(w for w, s in pairs if s is not None)
    return sum(w * s for w, s in pairs if s is not None) / weight if weight else 0.0


def _worth(stake: float | None, threshold: float, hours: Sequence[HourPoint]) -> bool:
    """A change is worth advising when it is worth the threshold; without a price, when the
    hours it concerns were mostly a tax (a K change: always, the model decides)."""
    if stake is not None:
        return stake > threshold
    return bool(hours)


def speedup_with_k(hour: HourPoint, k: int) -> float | None:
    """The hour's modelled speedup had it drafted k tokens: `economics.speedup_at_draft_length`
    (the rule the daemon's recommended K follows) at the hour's concurrency, its per-position
    acceptance and the h and B* its windows were assessed with. None when h was not
    recorded, or k is beyond the positions observed. At the hour's own K it gives back the
    hour's modelled speedup."""
    steps = hour.output_tokens - hour.accepted_tokens
    h = hour.step_overhead
    if not hour.drafting or steps <= 0 or hour.drafts <= 0 or h is None or not hour.positions:
        return None
    p = [x / hour.drafts for x in hour.positions]
    return economics.speedup_at_draft_length(
        p,
        k,
        hour.concurrency,
        hour.ridge_batch,
        hour.draft_cost_ratio,
        h,
        hour.drafts / steps,
        hour.draft_tokens / (hour.drafts * len(p)),
    )


def _stake_change_k(hours: Sequence[HourPoint], k_now: int, k_new: int) -> float | None:
    total = 0.0
    for h in hours:
        if h.busy_usd is None:
            return None
        now, new = speedup_with_k(h, k_now), speedup_with_k(h, k_new)
        if now is not None and new is not None:
            total += h.busy_usd * (new - now)
    return total


def _net_tax(hours: Sequence[HourPoint]) -> float | None:
    """What not speculating in these hours would have saved: minus their windows' net savings."""
    total = 0.0
    for h in hours:
        savings = h.savings_usd
        if savings is None:
            return None
        total -= savings
    return total


def _base_evidence(
    month: Figures,
    alpha: float | None,
    breakeven: float | None,
    concurrency: float | None,
    c: float,
    ridge: float,
) -> tuple[str, ...]:
    if alpha is None or breakeven is None or concurrency is None:
        return ()
    side = "above" if alpha > breakeven else "below"
    h = month.step_overhead
    overhead = f", h = {h:.3g}" if h is not None else ""
    return (
        f"Acceptance {alpha:.3f} (token-weighted over the month) is {side} the break-even "
        f"{breakeven:.3f} at the month's mean concurrency {concurrency:.1f} "
        f"(c = {c:g}, B* = {ridge:.1f}{overhead}, as the latest window was assessed).",
    )


def _hours_line(hours: Sequence[HourPoint], label: str) -> str:
    tax = sum(1 for h in hours if h.verdict == "tax")
    net = [h.savings_usd for h in hours]
    money = ""
    if net and all(n is not None for n in net):
        money = f", net {_usd(sum(n for n in net if n is not None))}"
    return f"{len(hours)} hour(s) {label}: a tax in {tax}{money}."


def _steps_per_draft_token(hours: Sequence[HourPoint]) -> float:
    """q = (G - A)/Dt pooled over `hours`: break-even's and the crossover's h term (§3b)."""
    dt = sum(h.draft_tokens for h in hours)
    return sum(h.output_tokens - h.accepted_tokens for h in hours) / dt if dt else 0.0


def _pooled_acceptance(hours: Sequence[HourPoint]) -> float:
    dt = sum(h.draft_tokens for h in hours)
    return sum(h.accepted_tokens for h in hours) / dt if dt else 0.0


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else 0.0


def _usd(value: float | None) -> str:
    if value is None:
        return "n/a"
    sign = "-" if value < 0 else ""
    return f"{sign}${abs(value):,.2f}"
