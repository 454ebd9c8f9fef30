"""What a draft model costs in capacity: the KV cache its weights take (issue 20).

The second cost of speculation is not GPU time but memory: the draft's weights (and its own
KV cache) come out of the target's KV-cache budget, so fewer requests fit at once, requests
wait or are preempted, and the GPU is pushed toward the saturated regime where speculation
stops paying. This module turns a window's KV-cache figures (the engine's blocks, block
size and bytes, its usage, waiting requests and preemptions: `spectax.pipeline.counts`)
into that cost, in requests the endpoint could hold, never in money.

The blocks the draft costs have a basis, like the savings (ECONOMICS.md §3b):
- measured: the control (same model, no speculation) has that many more blocks;
- configured: `draft_weight_bytes` over the bytes of a block, as the engine states its
  KV cache (vLLM `kv_cache_memory_bytes`); the draft's own KV cache is not counted, so
  this is a lower bound, and it holds over a measurement below it: a control with fewer
  spare blocks than the draft's weights alone take is not sized like the endpoint (another
  GPU, another `gpu_memory_utilization`), so its count says nothing of the draft
  (`control_blocks_disagree`);
- None: neither is known (no control, and the engine does not state its KV bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from spectax.pipeline.counts import Counts
from spectax.pipeline.windows import Window

CapacityBasis = Literal["measured", "configured"]


@dataclass(frozen=True, slots=True)
class Capacity:
    """One model's KV cache over a window, and the share of it the draft took.

    Means are time averages over the window's seconds; None where the engine does not give
    the figure (never a 0 that looks real).
    """

    kv_cache_blocks: float | None = None
    kv_block_size: float | None = None
    kv_usage_ratio: float | None = None
    requests_waiting: float = 0.0
    preemptions_per_hour: float = 0.0
    #: Mean prompt + output tokens of the requests that finished in the window.
    context_tokens: float | None = None
    #: KV-cache blocks a request holds at its end, on average: `blocks_per_request`.
    blocks_per_request: float | None = None
    #: Requests of `context_tokens` the KV cache holds at once (its bound on concurrency).
    concurrency_capacity_requests: float | None = None
    #: Blocks the draft takes from the KV cache, and how that is known.
    draft_blocks: float | None = None
    draft_blocks_basis: CapacityBasis | None = None
    #: The control's spare blocks were fewer than the configured lower bound: not used.
    control_blocks_disagree: bool = False
    #: Share of the GPU's memory the draft's weights hold (configured bytes).
    draft_gpu_memory_ratio: float | None = None

    @property
    def kv_headroom_ratio(self) -> float | None:
        """Share of the KV cache free on average over the window."""
        return None if self.kv_usage_ratio is None else max(0.0, 1.0 - self.kv_usage_ratio)

    @property
    def draft_kv_share_ratio(self) -> float | None:
        """Share of the KV cache the endpoint would have without the draft that it took."""
        if self.draft_blocks is None or not self.kv_cache_blocks:
            return None
        return self.draft_blocks / (self.kv_cache_blocks + self.draft_blocks)

    @property
    def concurrency_capacity_no_draft_requests(self) -> float | None:
        """Requests the KV cache would hold at once without the draft, same context length."""
        if self.draft_blocks is None or not self.blocks_per_request or not self.kv_cache_blocks:
            return None
        return (self.kv_cache_blocks + self.draft_blocks) / self.blocks_per_request


def blocks_per_request(context_tokens: float, block_size: float) -> float:
    """The mean blocks a request holds, estimated from the mean context alone.

    Each request holds ceil(its tokens / block_size) blocks, so the mean over requests lies
    between mean / block_size and that + 1 (and is at least 1). Rounding the mean up
    (`ceil(mean / block_size)`) makes the requests held jump by x2 when the mean context
    crosses one block (16 -> 17 tokens: 8,192 -> 4,096 requests). With lengths spread over
    more than a block, each request's last block is half full on average: mean / block_size
    + 1/2, kept at least 1 (no request holds less than a block). It moves smoothly with the
    mean and is off by at most half a block from the true mean of ceil (docs/economics.md,
    "Capacity")."""
    return max(1.0, context_tokens / block_size + 0.5)


def capacity_of(
    counts: Counts,
    seconds: float,
    *,
    speculating: bool = False,
    draft_weight_bytes: int | None = None,
    gpu_memory_bytes: int | None = None,
    control: Counts | None = None,
) -> Capacity:
    """The capacity figures of one model's `counts` over `seconds`.

    Only a `speculating` endpoint has a draft cost; `draft_weight_bytes` is its configured
    size (0 for n-gram: no weights), `control` the control's model over the same span,
    whose blocks measure the draft's.
    """
    blocks, size = counts.kv_cache_blocks, counts.kv_block_size
    context = None
    if counts.requests_finished > 0:
        context = (counts.prompt_tokens + counts.generation_tokens) / counts.requests_finished
    per_request = blocks_per_request(context, size) if context and size else None
    draft: float | None = None
    basis: CapacityBasis | None = None
    floor = measured = None
    if speculating and blocks and counts.kv_cache_bytes and draft_weight_bytes is not None:
        floor = draft_weight_bytes / (counts.kv_cache_bytes / blocks)
    theirs = control.kv_cache_blocks if control is not None else None
    if speculating and blocks and theirs and theirs >= blocks:
        measured = theirs - blocks
    if measured is not None and (floor is None or measured >= floor):
        draft, basis = measured, "measured"
    elif floor is not None:
        draft, basis = floor, "configured"
    usage = counts.kv_usage_seconds
    return Capacity(
        kv_cache_blocks=blocks,
        kv_block_size=size,
        kv_usage_ratio=usage / seconds if usage is not None and seconds > 0 else None,
        requests_waiting=counts.waiting_seconds / seconds if seconds > 0 else 0.0,
        preemptions_per_hour=counts.preemptions / seconds * 3600 if seconds > 0 else 0.0,
        context_tokens=context,
        blocks_per_request=per_request,
        concurrency_capacity_requests=blocks / per_request if blocks and per_request else None,
        draft_blocks=draft,
        draft_blocks_basis=basis,
        control_blocks_disagree=measured is not None and basis == "configured",
        draft_gpu_memory_ratio=(
            draft_weight_bytes / gpu_memory_bytes
            if draft_weight_bytes and gpu_memory_bytes
            else None
        ),
    )


def window_capacities(
    window: Window,
    control: Window | None = None,
    draft_weight_bytes: int | None = None,
    gpu_memory_bytes: int | None = None,
) -> dict[str, Capacity]:
    """`capacity_of` for every model of the window; a model speculates when the engine
    exposes its speculation counters. The control's model is matched by name, or taken as
    it is when both serve exactly one model (as for the measured speedup)."""
    out = {}
    for model, counts in window.models.items():
        theirs = None
        if control is not None:
            theirs = control.models.get(model)
            if theirs is None and len(control.models) == 1 and len(window.models) == 1:
                theirs = next(iter(control.models.values()))
        out[model] = capacity_of(
            counts,
            window.seconds,
            speculating=counts.draft_tokens is not None or counts.drafts is not None,
            draft_weight_bytes=draft_weight_bytes,
            gpu_memory_bytes=gpu_memory_bytes,
            control=theirs,
        )
    return out
