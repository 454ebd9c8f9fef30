"""The economics of speculative decoding (ECONOMICS.md), as pure functions.

No I/O, no clock, no globals: every function takes the window's numbers and
returns one quantity, so each formula can be checked against the worked
examples on its own. `spectax.economics.assessment` composes them into an
`Assessment`.

Step-time model (ECONOMICS.md §3). One engine step over n tokens costs
`T(n) = a + b*n`; the ridge batch is `B* = a/b`. At batch B, one request's
share of the fixed cost is `a/B`, which in units of `b` is `r = B*/B`. So, in
units of `b`, a plain request-step costs `r + 1`, a verify step carrying K
drafts costs `r + K + 1`, and each draft token costs `c*(r + 1)`.

A window emits G tokens, A of them accepted drafts, so it took `G - A`
request-steps, which verified `(G - A) + Dt` tokens:

    T_spec = (G - A)*r + (G - A + Dt) + c*Dt*(r + 1)
    T_ns   = G*(r + 1)
    S      = T_ns / T_spec

Per-step overhead (ECONOMICS.md §3b). A speculative step also carries fixed
work a plain step does not (the proposer, rejection sampling, the draft
model's own forward passes): its fixed cost is `a*(1 + h)`. Every formula
here takes `h` (the step overhead ratio, default 0, which is §3 exactly):

    T_spec = (G - A)*r*(1 + h) + (G - A + Dt) + c*Dt*(r + 1)

B* is then the ridge batch of the target *without* speculation: what a
control, the endpoint's own history before speculation, a profile or a sweep
tells, never the speculative endpoint's own step times.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

# Draft cost ratio `c` by speculative method (ECONOMICS.md §5). A separate
# draft model has no default: its cost depends on its size.
DEFAULT_DRAFT_COST_RATIO: dict[str, float] = {
    "ngram": 0.0,
    "eagle": 0.05,
    "eagle3": 0.05,
    "mtp": 0.05,
    "medusa": 0.05,
}
SPECULATIVE_METHODS = (*DEFAULT_DRAFT_COST_RATIO, "draft_model")
DEFAULT_RIDGE_BATCH = 32.0


def draft_cost_ratio_for(
    method: str, draft_params: float | None = None, target_params: float | None = None
) -> float | None:
    """Default `c` for a method; None when it cannot be known (a draft model of unknown size).

    A separate draft model costs roughly its latency ratio, which scales with
    its parameter count: `max(0.02, 2 * draft_params / target_params)` (the
    factor 2 covers the draft model's own per-step overheads).
    """
    if method in DEFAULT_DRAFT_COST_RATIO:
        return DEFAULT_DRAFT_COST_RATIO[method]
    if method == "draft_model" and draft_params and target_params:
        return max(0.02, 2.0 * draft_params / target_params)
    return None


#: The least a speculative step can cost beyond a plain one's fixed part, as a share of it
#: (h_min, docs/economics.md "The floor under h"). Every method runs its proposer and the
#: rejection sampler on every step, whether it drafts or not: 1% of a step is a floor far
#: under every h measured (0.3-2.5 on live vLLM here, bench/README.md), never a guess of h.
MIN_STEP_OVERHEAD_RATIO = 0.01


def step_overhead_floor(method: str | None) -> float:
    """h_min for a method: `MIN_STEP_OVERHEAD_RATIO` for every one (0 without speculation).

    Not raised for a drafter of known size: its weight reads are priced per draft token in
    `c` (`draft_cost_floor`), and the pass that brings it up to date with the tokens the
    target accepted is the first of its K drafting passes (vLLM's EAGLE and draft-model
    proposers), so a floor on h from them would count them twice.
    """
    return 0.0 if method is None else MIN_STEP_OVERHEAD_RATIO


def draft_cost_floor(draft_params: float | None, target_params: float | None) -> float:
    """The least c a separate drafter can cost: memory-bound, each of its passes reads its
    weights, `draft_params / target_params` of the target's (0 when either is unknown)."""
    return draft_params / target_params if draft_params and target_params else 0.0


# ---------------------------------------------------------------- §2 speculation


def acceptance_ratio(accepted: float, draft_tokens: float) -> float | None:
    """alpha = A / Dt: the share of proposed draft tokens that were accepted."""
    return accepted / draft_tokens if draft_tokens > 0 else None


def acceptance_length(accepted: float, drafts: float) -> float | None:
    """tau = 1 + A / Dr: tokens emitted per verify step, the bonus token included."""
    return 1.0 + accepted / drafts if drafts > 0 else None


def position_acceptance(accepted_per_position: Sequence[float], drafts: float) -> tuple[float, ...]:
    """p_k = A_k / Dr, the share of drafts whose token at position k was accepted."""
    if drafts <= 0:
        return ()
    return tuple(a / drafts for a in accepted_per_position)


def iid_acceptance_length(a: float, k: int) -> float:
    """Tokens per verify step if each draft token is accepted independently with probability a.

    This is the seed articles' `(1 - a^(K+1)) / (1 - a)`. Note that `a` here
    is a per-token probability, not vLLM's acceptance ratio alpha; with i.i.d.
    acceptance they relate by `alpha = (tau - 1) / K`.
    """
    if a == 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


# ---------------------------------------------------------------- §3 step-time model


def relative_batch(ridge_batch: float, concurrency: float) -> float:
    """r = B* / B: one request's share of the fixed per-step cost, in units of b.

    Concurrency below one request is floored at 1: a step always carries at
    least the request it runs for.
    """
    return ridge_batch / max(concurrency, 1.0)


def roofline_ridge_batch(
    flops: float,
    read_bytes: float,
    tokens: float,
    steps: float,
    peak_flops_per_second: float,
    memory_bytes_per_second: float,
) -> float | None:
    """B* from the roofline: what the engine's own FLOP and byte estimates and the GPU's
    datasheet say, before anything was measured (a prior; ECONOMICS.md §3b).

    A step over n tokens takes T(n) = a + b*n (§3). On a roofline the fixed part is the
    memory traffic every step pays whatever its batch, reading the weights:
    a = (bytes read per step) / bandwidth; and each token then costs its FLOPs at the
    tensor cores' peak: b = (FLOPs per token) / peak FLOP/s. So

        B* = a / b = (read_bytes / steps / bandwidth) / (flops / tokens / peak)

    with steps and tokens the count and sum of vLLM's `iteration_tokens_total` (one
    observation per engine step, of the tokens it carried) over the same span as
    `estimated_flops_per_gpu` and `estimated_read_bytes_per_gpu`. Both estimates are per
    GPU, and so are the peaks: tensor parallelism cancels. The bytes per step include
    the KV cache the step read at the span's load, not the weights alone. None when the
    span has no estimate (vLLM without --enable-mfu-metrics reports 0) or no step.
    """
    values = (flops, read_bytes, tokens, steps, peak_flops_per_second, memory_bytes_per_second)
    if min(values) <= 0 or not all(map(math.isfinite, values)):
        return None
    weight_read_seconds = read_bytes / steps / memory_bytes_per_second  # a
    token_compute_seconds = flops / tokens / peak_flops_per_second  # b
    return weight_read_seconds / token_compute_seconds


def gpu_time_with_speculation(
    output_tokens: float, accepted: float, draft_tokens: float, r: float, c: float, h: float = 0.0
) -> float:
    """T_spec = (G - A)*r*(1 + h) + (G - A + Dt) + c*Dt*(r + 1), in units of b.

    `G - A` request-steps each pay the fixed share `r` plus the overhead `h*r`
    (§3b), whether they carried a draft or not: the proposer runs every step.
    """
    steps = output_tokens - accepted
    return steps * r * (1.0 + h) + (steps + draft_tokens) + c * draft_tokens * (r + 1.0)


def gpu_time_without_speculation(output_tokens: float, r: float) -> float:
    """T_ns = G*(r + 1): one plain request-step per token, in units of b."""
    return output_tokens * (r + 1.0)


def modelled_speedup(
    output_tokens: float,
    accepted: float,
    draft_tokens: float,
    concurrency: float,
    ridge_batch: float,
    c: float,
    h: float = 0.0,
) -> float | None:
    """S = T_ns / T_spec. Above 1 speculation pays; below 1 it is a tax.

    A window that proposed nothing (Dt = 0) still paid the overhead:
    S = (r + 1) / (r*(1 + h) + 1), below 1 whenever h > 0.
    """
    if output_tokens <= 0:
        return None
    r = relative_batch(ridge_batch, concurrency)
    t_spec = gpu_time_with_speculation(output_tokens, accepted, draft_tokens, r, c, h)
    return gpu_time_without_speculation(output_tokens, r) / t_spec


def speedup_ceiling(output_tokens: float, accepted: float, h_min: float) -> float:
    """The most a window's speedup can be, whatever B* and c: S = T_ns / T_spec is largest
    when a step's fixed part dominates (r -> inf), where it tends to G / ((G - A)(1 + h)):
    the tokens a step emits over what the step costs. With nothing accepted that is
    1 / (1 + h_min), below 1: a window that proposed nothing cannot have paid."""
    steps = output_tokens - accepted
    if output_tokens <= 0 or steps <= 0:
        return math.inf
    return output_tokens / (steps * (1.0 + h_min))


def speedup_per_step(
    acceptance_length: float,
    speculative_tokens: float,
    concurrency: float,
    ridge_batch: float,
    c: float,
    h: float = 0.0,
    drafting_share: float = 1.0,
) -> float:
    """S = e*(r + 1) / (r*(1 + h) + 1 + f*K + c*f*K*(r + 1)) (ECONOMICS.md §3b), with
    e = 1 + f*(tau - 1) tokens emitted per request-step.

    The per-step form of `modelled_speedup`: what-if planning from a tau and a K rather
    than counters. `drafting_share` f is the share of request-steps that carry a draft
    (1 when every step drafts K; n-gram drafts only where its lookup hits, Dr / (G - A)),
    so that at the K and tau a window ran this equals its `modelled_speedup`.
    K = 0 is plain decoding: S = 1 whatever tau says (speculation off pays no overhead).
    """
    if speculative_tokens <= 0:
        return 1.0
    terms = _step_terms(acceptance_length, speculative_tokens, c, h, drafting_share)
    return _per_step(*terms, relative_batch(ridge_batch, concurrency))


def _step_terms(
    acceptance_length: float, speculative_tokens: float, c: float, h: float, drafting_share: float
) -> tuple[float, float, float, float]:
    """The parts of `speedup_per_step` that do not depend on the load: e, 1 + h, f*K, c*f*K."""
    k, f = speculative_tokens, drafting_share
    return 1.0 + f * (acceptance_length - 1.0), 1.0 + h, f * k, c * f * k


def _per_step(emitted: float, overhead: float, drafted: float, priced: float, r: float) -> float:
    """S = e*(r + 1) / (r*(1 + h) + 1 + f*K + c*f*K*(r + 1)), from `_step_terms` and r."""
    return emitted * (r + 1.0) / (r * overhead + 1.0 + drafted + priced * (r + 1.0))


def speedup_at_draft_length(
    position_acceptance_ratios: Sequence[float],
    k: int,
    concurrency: float,
    ridge_batch: float,
    c: float,
    h: float,
    drafting_share: float,
    fill: float = 1.0,
) -> float | None:
    """The speedup a window would have had drafting k tokens, from its per-position
    acceptance (what-if planning; `best_speculative_tokens` and the report's advice).

    `drafting_share` f is the share of request-steps that carried a draft, Dr / (G - A);
    `fill` the share of its K a draft proposed, Dt / (Dr*K) (n-gram stops where its match
    ends): so at the K that ran this is the window's own `modelled_speedup`. k = 0 is
    speculation off (1). None beyond the positions observed: an unobserved position's
    acceptance would be a guess.
    """
    if k <= 0:
        return 1.0
    if k > len(position_acceptance_ratios):
        return None
    tau = 1.0 + sum(position_acceptance_ratios[:k])
    return speedup_per_step(tau, k * fill, concurrency, ridge_batch, c, h, drafting_share)


def best_speculative_tokens(
    position_acceptance_ratios: Sequence[float],
    concurrency: float,
    ridge_batch: float,
    c: float,
    h: float,
    drafting_share: float,
    fill: float = 1.0,
) -> tuple[int, float]:
    """(K, S): the draft length among those observed (1 to the positions counted) with the
    highest predicted speedup (`speedup_at_draft_length`), and that speedup; (0, 1.0) when
    none beats plain decoding. Each K is priced whole, with the overhead h it pays per
    step, not position by position against a bar."""
    [best] = best_speculative_tokens_at(
        position_acceptance_ratios, [concurrency], ridge_batch, c, h, drafting_share, fill
    )
    return best


def best_speculative_tokens_at(
    position_acceptance_ratios: Sequence[float],
    concurrencies: Iterable[float],
    ridge_batch: float,
    c: float,
    h: float,
    drafting_share: float,
    fill: float = 1.0,
) -> list[tuple[int, float]]:
    """`best_speculative_tokens` at each of `concurrencies`, each K's acceptance length
    summed once rather than at every load: a K schedule prices every batch size up to the
    engine's largest (~1,000) for each endpoint's curve at every refresh, ~3 ms a curve
    when each went through `speedup_at_draft_length` (issue 31). The same speedups, double for
    double: each is `speedup_per_step`'s formula, its load-free terms made once per K."""
    ratios = position_acceptance_ratios
    # Per K, what its speedup needs but the load (a K that drafts nothing is speculation off,
    # 1: never above the plain speedup it must beat).
    terms = [
        (k, _step_terms(1.0 + sum(ratios[:k]), k * fill, c, h, drafting_share))
        for k in range(1, len(ratios) + 1)
        if k * fill > 0
    ]
    found = []
    for concurrency in concurrencies:
        r = relative_batch(ridge_batch, concurrency)
        best, best_speedup = 0, 1.0
        for k, (emitted, overhead, drafted, priced) in terms:
            s = _per_step(emitted, overhead, drafted, priced, r)
            if s > best_speedup:
                best, best_speedup = k, s
        found.append((best, best_speedup))
    return found


def breakeven_acceptance(
    concurrency: float,
    ridge_batch: float,
    c: float,
    h: float = 0.0,
    steps_per_draft_token: float = 0.0,
) -> float:
    """alpha* = c + (B + h*B* * q) / (B + B*): the acceptance at which S = 1.

    q = (G - A)/Dt is request-steps per draft token (1/K when every step
    drafts K). Hold the steps and Dt fixed and let A = alpha*Dt vary:

        T_ns - T_spec = A*(r + 1) - (G - A)*r*h - Dt*(1 + c*(r + 1))

    which is 0 at `A/Dt = c + 1/(r + 1) + h*r*q/(r + 1)`; with
    `1/(r + 1) = B/(B + B*)` and `r/(r + 1) = B*/(B + B*)` that is the form
    above. With h = 0 the steps cancel, and so does K: §3's `c + B/(B + B*)`.
    Batch is floored at 1 request, as in `relative_batch`.
    """
    b = max(concurrency, 1.0)
    return c + (b + h * ridge_batch * steps_per_draft_token) / (b + ridge_batch)


def crossover_concurrency(
    alpha: float,
    ridge_batch: float,
    c: float,
    h: float = 0.0,
    steps_per_draft_token: float = 0.0,
) -> float | None:
    """B_x = B* (alpha - c - h*q) / (1 - alpha + c): the batch above which today's acceptance
    is a tax.

    Solving `alpha = c + (B + h*B*q)/(B + B*)` for B:
    `(alpha - c)(B + B*) = B + h*B*q`. None when `alpha - c - h*q <= 0` (it
    never pays, at any batch); +inf when `alpha - c >= 1` (it never turns
    into a tax).
    """
    pays_at_all = alpha - c - h * steps_per_draft_token
    if pays_at_all <= 0:
        return None
    denominator = 1.0 - alpha + c
    if denominator <= 0:
        return math.inf
    return ridge_batch * pays_at_all / denominator


def implied_step_overhead(
    output_tokens: float,
    accepted: float,
    draft_tokens: float,
    concurrency: float,
    ridge_batch: float,
    c: float,
    speedup: float,
) -> float | None:
    """The h at which `modelled_speedup` equals a speedup known another way (§3b).

    Solves `T_ns / S = (G - A)*r*(1 + h) + (G - A + Dt) + c*Dt*(r + 1)` for h:
    the per-step overhead that the endpoint's own time per token shows
    against the counterfactual. None without output or steps.
    """
    steps = output_tokens - accepted
    if output_tokens <= 0 or steps <= 0 or speedup <= 0:
        return None
    r = relative_batch(ridge_batch, concurrency)
    t_spec = gpu_time_without_speculation(output_tokens, r) / speedup
    rest = steps + draft_tokens + c * draft_tokens * (r + 1.0)
    return (t_spec - rest) / (steps * r) - 1.0


def breakeven_step_overhead(
    output_tokens: float,
    accepted: float,
    draft_tokens: float,
    concurrency: float,
    ridge_batch: float,
    c: float,
) -> float | None:
    """h*: the step overhead at which the window's modelled speedup is exactly 1. Speculation
    paid iff a speculative step's fixed cost was under (1 + h*) times a plain one's."""
    return implied_step_overhead(
        output_tokens, accepted, draft_tokens, concurrency, ridge_batch, c, 1.0
    )


def breakeven_ridge_batch(
    output_tokens: float,
    accepted: float,
    draft_tokens: float,
    concurrency: float,
    c: float,
    h: float,
) -> float | None:
    """B*x: the ridge batch above which the window's modelled speedup is over 1, at h.

    T_spec = T_ns at r* = (Dt*(1 + c) - A) / (A - h*(G - A) - c*Dt), with r = B*/B: a
    larger B* (a more memory-bound GPU) leaves more idle compute for the drafts. None when
    no B* makes it pay (the denominator is not positive: the accepted tokens do not cover
    the overhead and the drafting even for free weight reads).
    """
    steps = output_tokens - accepted
    denominator = accepted - h * steps - c * draft_tokens
    if output_tokens <= 0 or denominator <= 0:
        return None
    return max(concurrency, 1.0) * (draft_tokens * (1.0 + c) - accepted) / denominator


def draft_compute_share(
    output_tokens: float, accepted: float, draft_tokens: float, r: float, c: float, h: float = 0.0
) -> float:
    """Share of GPU time spent drafting: c*Dt*(r + 1) / T_spec."""
    t_spec = gpu_time_with_speculation(output_tokens, accepted, draft_tokens, r, c, h)
    return c * draft_tokens * (r + 1.0) / t_spec


def rejected_share(
    output_tokens: float, accepted: float, draft_tokens: float, r: float, c: float, h: float = 0.0
) -> float:
    """Share of GPU time spent on draft tokens thrown away: (Dt - A)(1 + c(r + 1)) / T_spec.

    Each rejected token was drafted (c(r + 1)) and verified (1) for nothing.
    The drafting part is also inside `draft_compute_share`: the two shares
    overlap and are not to be added.
    """
    t_spec = gpu_time_with_speculation(output_tokens, accepted, draft_tokens, r, c, h)
    return (draft_tokens - accepted) * (1.0 + c * (r + 1.0)) / t_spec


# ---------------------------------------------------------------- §4 money


def cost_per_million(spend_usd: float, tokens: float) -> float | None:
    """$ / tokens * 1e6."""
    return spend_usd / tokens * 1e6 if tokens > 0 else None


def spend_estimate_usd(usd_per_hour: float, gpus: int, seconds: float) -> float:
    """The price-table estimate: GPU price x GPUs x time."""
    return usd_per_hour * gpus * seconds / 3600.0


def speculation_savings_usd(
    busy_spend_usd: float, speedup: float, draft_load_usd: float = 0.0
) -> float:
    """Value of the GPU time speculation saved: $_busy * (S - 1); negative = tax.

    GPU-seconds saved are `T_busy * (S - 1)`; at the endpoint's price that is
    `$_busy * (S - 1)`. Cold-start time spent loading the draft's weights
    (serverless only) was paid for speculation alone and is subtracted. On
    provisioned endpoints this is capacity freed, not invoice money.
    """
    return busy_spend_usd * (speedup - 1.0) - draft_load_usd


def cost_per_million_without_speculation(
    spend_usd: float,
    busy_spend_usd: float,
    speedup: float,
    output_tokens: float,
    draft_load_usd: float = 0.0,
) -> float | None:
    """What a million output tokens would have cost without speculation.

    The busy GPU time would have been S times longer, and the draft's weights
    would not have been loaded at cold starts; the idle spend of a
    provisioned endpoint is paid either way, so it stays:
    `($ - $_busy + $_busy * S - $_draft_load) / G * 1e6`. When the whole
    window is busy and there was no cold start (the `assess` case) this is
    ECONOMICS.md's `$_busy * S / G * 1e6` exactly.
    """
    counterfactual = spend_usd - busy_spend_usd + busy_spend_usd * speedup - draft_load_usd
    return cost_per_million(counterfactual, output_tokens)


def vram_opportunity_usd(
    spend_usd: float, draft_weight_bytes: int | None, gpu_memory_bytes: int | None
) -> float | None:
    """$ * draft_weight_bytes / gpu_memory_bytes: VRAM the draft holds instead of KV cache."""
    if not draft_weight_bytes or not gpu_memory_bytes:
        return None
    return spend_usd * draft_weight_bytes / gpu_memory_bytes
