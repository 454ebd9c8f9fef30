"""The K schedule that follows from an endpoint's load curve: a draft length per batch range.

Each bin of the curve (`economics.load_curve`) gets the draft length the window advice
uses (`assessment.recommended_draft_length`, over `formulas.best_speculative_tokens`), priced
at the bin's own load with the h the bin's own speedup implies: at the K that ran, the
model gives back the bin's speedup, and a shorter K is advised only where the model says it
beats it. A bin where no K pays gets K = 0: above the crossover, where speculation taxes,
that is speculation off. For vLLM the ranges are written as its
`num_speculative_tokens_per_batch_size`; an engine without a per-batch knob gets the
equivalent advice: turn it off above the crossover, or route.

Pure: a curve in, values out, no clock and no I/O (issue 34).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spectax.economics.assessment import MAX_STEP_OVERHEAD, recommended_draft_length
from spectax.economics.formulas import (
    MIN_STEP_OVERHEAD_RATIO,
    best_speculative_tokens_at,
    implied_step_overhead,
)
from spectax.economics.load_curve import LoadBin, LoadCurve, bin_runs

#: vLLM 0.32.0's SpeculativeConfig (vllm/config/speculative.py) has no switch that turns
#: speculation off above a batch size; it has `num_speculative_tokens_per_batch_size`, a
#: list of inclusive [first, last, K] batch ranges, the first starting at 1, K >= 0, each
#: K capped at `num_speculative_tokens` (which must be > 0), the last range carried on to
#: `max_num_seqs` (`build_dynamic_sd_schedule_lookup` in vllm/v1/spec_decode/dynamic/utils.py).
#: spectax writes the last range out to the engine's largest batch all the same: the list then
#: says what runs at every batch, whichever way a later vLLM fills the tail.
VLLM_SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
#: The largest batch a schedule covers unless `--max-num-seqs` says: vLLM 0.32's default
#: `max_num_seqs` is 1024 on an H100/H200-class GPU and 256 on others (`EngineArgs.
#: _get_default_max_num_seqs_and_batched_tokens`); a range past the engine's largest batch
#: is cut at it by vLLM, so the larger default is right for both.
DEFAULT_MAX_NUM_SEQS = 1024
#: The engines with a draft length per batch size: vLLM's Dynamic Speculative Decoding
#: (vLLM PR 32374). The others can only turn speculation off, or have load routed away.
PER_BATCH_ENGINES = frozenset({"vllm"})


def batch_schedule(k_by_batch: Sequence[float]) -> list[list[float]]:
    """[[first, last, K], ...]: runs of equal K over batch sizes 1, 2, ..."""
    ranges: list[list[float]] = []
    for b, k in enumerate(k_by_batch, start=1):
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = b
        else:
            ranges.append([b, b, k])
    return ranges


def vllm_speculative_config(
    schedule: list[list[float]], configured_k: float, method: str | None
) -> dict[str, Any] | None:
    """The `--speculative-config` that applies the schedule; None when it is the configured
    one already, {} when speculation is to be off at every batch (start without it).

    A K per request-step that is not whole (not every step drafted) is not the server's
    configured K, so no per-batch list is written from it: only "off" (the crossover line
    says where it stops paying).
    """
    ks = {k for _, _, k in schedule}
    if ks == {0}:
        return {} if configured_k else None
    if ks == {configured_k} or configured_k != int(configured_k):
        return None
    config: dict[str, Any] = {"method": method} if method else {}
    config["num_speculative_tokens"] = int(max(ks))
    if len(ks) > 1:
        config[VLLM_SCHEDULE_KEY] = [[int(v) for v in r] for r in schedule]
    return config


@dataclass(frozen=True, slots=True)
class BinDraftLength:
    """The draft length for one bin of the curve, and what it rests on."""

    bin: LoadBin
    k_running: int | None  # the K the bin's windows ran (positions counted); None: unknown
    k: int | None  # the K to run there; None: nothing to choose from (no counts, no verdict)
    speedup: float | None  # predicted at k (1 at K = 0; the bin's own at the K that ran)
    at_stake_usd: float | None  # busy spend x (predicted - in force): what changing K is worth
    #: The h the bin's speedup implies (None: no K chosen from counts): with the bin's
    #: positions, what a batch size no window ran at is priced with.
    step_overhead: float | None = None


@dataclass(frozen=True, slots=True)
class DraftSchedule:
    """A draft length per batch range, from one endpoint and model's curve."""

    lengths: tuple[BinDraftLength, ...]  # per bin of the curve, lowest load first
    ranges: list[list[float]]  # [[first batch, last batch, K], ...] over 1..max_num_seqs
    k_running: int | None  # the largest K the endpoint ran
    at_stake_usd: float | None  # the sum over the bins: what the schedule would have saved
    per_batch: bool  # the engine takes a K per batch size (vLLM)
    #: vLLM: the `--speculative-config` that applies the ranges ({}: turn speculation off,
    #: None: keep what runs). None for an engine without a per-batch knob.
    vllm_config: dict[str, Any] | None
    advice: str  # one line: the schedule, or the equivalent for an engine without one

    @property
    def k_by_bin(self) -> dict[int, int | None]:
        """The K advised per bin of the curve, by the bin's lower edge (None: none chosen)."""
        return {x.bin.low: x.k for x in self.lengths}

    @property
    def changes_seen_loads(self) -> bool:
        """Whether it changes the K of a load the endpoint ran at. When not, a per-batch list
        differs from what runs only at batch sizes no window ran at: the model's alone, with
        nothing measured to gain, so it is not advised (the advice says keep)."""
        return changes_seen_loads(self.lengths)


def changes_seen_loads(lengths: Sequence[BinDraftLength]) -> bool:
    return any(x.k is not None and x.k != x.k_running for x in lengths)


def draft_schedule(
    curve: LoadCurve,
    *,
    engine: str,
    method: str | None = None,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
) -> DraftSchedule:
    """The schedule the curve implies, covering batches 1 to `max_num_seqs`.

    A batch size no window ran at takes the K of the nearest bin below it that has one
    (the lowest such bin for batches below every bin): a longer draft is never advised for
    a load the endpoint was not seen at, and past the crossover that K is 0.
    """
    lengths = tuple(_draft_length(curve, b) for b in curve.bins)
    chosen = {x.bin.low: x for x in lengths if x.k is not None}
    running = [x.k_running for x in lengths if x.k_running is not None]
    k_running = max(running) if running else None
    ranges = batch_schedule(_k_by_batch(curve, chosen, k_running, max(max_num_seqs, 1)))
    per_batch = engine in PER_BATCH_ENGINES
    config = None
    if per_batch and k_running is not None and chosen:
        config = vllm_speculative_config(ranges, k_running, method)
    stakes = [x.at_stake_usd for x in lengths if x.at_stake_usd is not None]
    return DraftSchedule(
        lengths=lengths,
        ranges=ranges,
        k_running=k_running,
        at_stake_usd=sum(stakes) if stakes else None,
        per_batch=per_batch,
        vllm_config=config,
        advice=_advice(curve, engine, per_batch, config, ranges, changes_seen_loads(lengths)),
    )


def _draft_length(curve: LoadCurve, load: LoadBin) -> BinDraftLength:
    """The bin's K: `recommended_draft_length` at the bin's mean load, B* and c in force, and
    the h that makes the model give the bin's own speedup at the K that ran (held within
    [h_min, 20], as the assessment holds it). A bin without per-position counts (SGLang,
    TGI) or without a speedup has no K to choose: 0 where it is a tax, else unknown."""
    g, a, dt, dr = load.output_tokens, load.accepted_tokens, load.draft_tokens, load.drafts
    positions, speedup = load.position_acceptance, load.speedup
    if not positions or speedup is None or g <= a or dr <= 0:
        k = 0 if load.verdict == "tax" else None
        return BinDraftLength(load, None, k, 1.0 if k == 0 else None, _stake(load, k, 1.0))
    b_star, c = curve.ridge_batch, curve.draft_cost_ratio
    h = implied_step_overhead(g, a, dt, load.concurrency, b_star, c, speedup)
    h = min(max(h if h is not None else 0.0, MIN_STEP_OVERHEAD_RATIO), MAX_STEP_OVERHEAD)
    k, predicted = recommended_draft_length(
        positions, load.concurrency, b_star, c, h, drafting=(g, a, dt, dr), in_force=speedup
    )
    return BinDraftLength(load, len(positions), k, predicted, _stake(load, k, predicted), h)


def _stake(load: LoadBin, k: int | None, predicted: float | None) -> float | None:
    """Busy spend x (predicted speedup - the one in force): the GPU time, in dollars, that
    running `k` instead would have freed (negative: cost) over the bin's windows."""
    if k is None or predicted is None or load.speedup is None or load.busy_usd is None:
        return None
    return load.busy_usd * (predicted - load.speedup)


def _k_by_batch(
    curve: LoadCurve, chosen: dict[int, BinDraftLength], k_running: int | None, largest: int
) -> list[float]:
    """The K for each batch size from 1 to `largest`: its bin's when a window ran there; else
    the model's at this batch (`best_speculative_tokens`, as `spectax model predict` prices
    each batch) with the per-position acceptance and h of the nearest bin below (the lowest
    bin, below every bin); a bin without counts lends its own K. The K that runs when no
    bin chose one. Batches are taken a bin's range at a time (one lender each, its
    acceptance lengths summed once: `best_speculative_tokens_at`), not one by one: at ~1,000
    batch sizes a curve and 2,000 endpoints, one by one was ~6 s of CPU a refresh."""
    if not chosen:
        return [float(k_running or 0)] * largest
    ks: list[float] = []
    for edge, batches in bin_runs(largest):
        if edge in chosen:
            ks += [float(chosen[edge].k or 0)] * len(batches)
            continue
        below = [low for low in chosen if low <= edge]
        lender = chosen[max(below) if below else min(chosen)]
        load, h = lender.bin, lender.step_overhead
        if h is None:
            ks += [float(lender.k or 0)] * len(batches)
            continue
        best = best_speculative_tokens_at(
            load.position_acceptance,
            batches,
            curve.ridge_batch,
            curve.draft_cost_ratio,
            h,
            load.drafts / (load.output_tokens - load.accepted_tokens),
            load.draft_tokens / (load.drafts * len(load.position_acceptance)),
        )
        ks += [float(k) for k, _ in best]
    return ks


def _advice(
    curve: LoadCurve,
    engine: str,
    per_batch: bool,
    config: dict[str, Any] | None,
    ranges: list[list[float]],
    changes_seen: bool,
) -> str:
    """One line: what to change, in the engine's own terms. Without a per-batch knob it
    rests on the bins' verdicts alone (SGLang and TGI count no drafted tokens: no K). A
    per-batch list that changes K only where no window ran is not advised (keep)."""
    crossover = curve.crossover_requests
    if per_batch:
        if config == {}:
            return "turn speculation off: no K pays at any load the endpoint ran"
        if config is None:
            return "keep the speculative config as it is: it is the best K at every load seen"
        if VLLM_SCHEDULE_KEY in config and not changes_seen:
            return (
                "keep the speculative config as it is: every load seen keeps the K it ran;"
                f" {VLLM_SCHEDULE_KEY} {config[VLLM_SCHEDULE_KEY]} would change K only at"
                " batch sizes no window ran at, the model's alone"
            )
        return f"set {VLLM_SCHEDULE_KEY} to {config.get(VLLM_SCHEDULE_KEY, ranges)}"
    if crossover is not None:
        return (
            f"speculation is a tax from {crossover} running requests: {engine} has no "
            f"per-batch draft length, so turn it off above {crossover - 1} where the engine "
            f"allows, or route the load above {crossover - 1} to an endpoint without speculation"
        )
    verdicts = {b.verdict for b in curve.bins}
    if "tax" in verdicts and "pays" not in verdicts:
        return f"turn speculation off on this {engine} endpoint: it pays at no load seen"
    return "keep speculation on: it is not a tax above any load at which it paid"
