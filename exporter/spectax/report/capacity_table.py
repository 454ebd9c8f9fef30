"""The report's capacity section as a table, with the basis of every figure in its notes.

Apart from `tables.py` (which reads a whole `Report`): this one lays out the rows
`capacity.py` computed, so that the report's build can hold them without a cycle.
"""

from __future__ import annotations

import math

from spectax.report.capacity_figures import CapacityRow
from spectax.report.tables import Table

HEADERS = (
    "Endpoint",
    "Model",
    "KV blocks",
    "Draft takes",
    "Basis",
    "Holds (requests)",
    "Without draft",
    "KV headroom",
    "Waiting",
    "Preempted /h",
    "Control (no speculation)",
)

NOTES = (
    "Capacity, not money: nothing in this table is added to the spend, the savings or the"
    " invoice. The savings above are GPU time; this is the memory the draft holds instead"
    " of KV cache, in blocks and requests.",
    "KV blocks: the engine's (vLLM num_gpu_blocks of vllm:cache_config_info, summed over"
    " data-parallel ranks), as of the month's last stored day.",
    "Draft takes, basis measured: the control (the same model without speculation) has that"
    " many more blocks; basis configured: draft_weight_bytes over the bytes of a block as the"
    " engine states its KV cache (vLLM kv_cache_memory_bytes), a lower bound (the draft's own"
    " KV cache is not counted); no basis: no control with a stored KV cache, and the engine"
    " does not state its KV bytes. The share is of the KV cache the endpoint would have"
    " without the draft.",
    "Holds: requests of the month's mean context length (prompt + output tokens per finished"
    " request) that fit in the KV cache at once, whole requests: blocks over the mean blocks"
    " a request holds (mean context / block size + 1/2, its last block half full on"
    " average), floored; without draft: with the draft's blocks given back. A bound set by"
    " memory (the engine's max_num_seqs may bind first).",
    "KV headroom and waiting: time averages over the monitored seconds; preempted: requests"
    " evicted from a full KV cache (vLLM num_preemptions_total), per hour.",
)


NO_KV_CACHE = (
    "No endpoint stored its KV cache this month: history written before spectax stored it"
    " (migration 0008), or engines that do not expose it."
)


def capacity_table(rows: list[CapacityRow]) -> Table:
    return Table(
        key="capacity",
        title="Capacity: the KV cache speculation takes",
        headers=HEADERS,
        rows=[_row(r) for r in rows],
        notes=NOTES if rows else (NO_KV_CACHE,),
        numeric=(False, False, True, True, False, True, True, True, True, True, False),
    )


def _row(r: CapacityRow) -> tuple[str, ...]:
    c = r.capacity
    takes, basis = "—", "no speculation" if not r.speculating else "—"
    if c.draft_blocks is not None:
        share = c.draft_kv_share_ratio
        takes = f"{c.draft_blocks:,.0f}" + ("" if share is None else f" ({share:.1%})")
        basis = (
            f"measured against {r.control}"
            if c.draft_blocks_basis == "measured"
            else ("configured draft_weight_bytes")
        )
    control = "—"
    if r.speculating and r.control_capacity is not None:
        k = r.control_capacity
        control = f"{r.control}: headroom {_share(k.kv_headroom_ratio)}, waiting " + (
            f"{k.requests_waiting:.1f}, preempted {k.preemptions_per_hour:,.1f}/h"
        )
    return (
        r.endpoint,
        r.model,
        _count(c.kv_cache_blocks),
        takes,
        basis,
        _requests(c.concurrency_capacity_requests),
        _requests(c.concurrency_capacity_no_draft_requests),
        _share(c.kv_headroom_ratio),
        f"{c.requests_waiting:.1f}",
        f"{c.preemptions_per_hour:,.1f}",
        control,
    )


def _count(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _requests(value: float | None) -> str:
    """Whole requests, floored: a cache that holds 2,730.5 requests holds 2,730 of them."""
    return "—" if value is None else f"{whole_requests(value):,}"


def whole_requests(value: float) -> int:
    """The requests a KV cache holds whole (the charts' labels use it too)."""
    return math.floor(value)


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"
