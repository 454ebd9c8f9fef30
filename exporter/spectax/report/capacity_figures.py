"""The report's capacity figures: the KV cache speculation takes, per endpoint and model.

The second cost of a draft model is memory (issue 20): its weights and its own KV cache come
out of the target's KV cache, so fewer requests fit at once, requests wait or are preempted.
This section states that cost over the month in blocks and requests, each figure with its
basis, beside the control where there is one. It is capacity, never money: nothing here is
added to the spend, the savings or the invoice (the savings are GPU time; this is memory).

Sums are the month's daily rows; the means are recomputed from them (usage and waiting are
time integrals, `spectax.pipeline.counts`), the engine's blocks are the latest stored.
`capacity_table.py` lays them out, with the basis of each figure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from spectax import economics
from spectax.economics import Capacity
from spectax.pipeline.counts import Counts
from spectax.report.figures import EndpointInfo
from spectax.report.records import RollupRecord


@dataclass(slots=True)
class _Sums:
    seconds: float = 0.0
    usage_seconds: float = 0.0  # of the rows that carry usage (none before migration 0008)
    kv_usage_seconds: float = 0.0
    waiting_seconds: float = 0.0
    preemptions: int = 0
    requests_finished: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    drafted: bool = False
    settings: tuple[float | None, float | None, float | None] = (None, None, None)
    settings_at: datetime | None = None

    def add(self, row: RollupRecord) -> None:
        self.seconds += row.seconds
        if row.kv_usage_seconds is not None:
            self.usage_seconds += row.seconds
            self.kv_usage_seconds += row.kv_usage_seconds
        self.waiting_seconds += row.waiting_seconds
        self.preemptions += row.preemptions
        self.requests_finished += row.requests_finished
        self.prompt_tokens += row.prompt_tokens
        self.output_tokens += row.output_tokens
        self.drafted = self.drafted or row.draft_tokens is not None
        if row.kv_cache_blocks is not None and (
            self.settings_at is None or row.start >= self.settings_at
        ):
            self.settings = (row.kv_cache_blocks, row.kv_block_size, row.kv_cache_bytes)
            self.settings_at = row.start

    def counts(self) -> Counts:
        """The month as one span's counts, usage scaled to every second of it."""
        usage = None
        if self.usage_seconds > 0:
            usage = self.kv_usage_seconds * self.seconds / self.usage_seconds
        blocks, size, kv_bytes = self.settings
        return Counts(
            requests_finished=float(self.requests_finished),
            prompt_tokens=float(self.prompt_tokens),
            generation_tokens=float(self.output_tokens),
            preemptions=float(self.preemptions),
            waiting_seconds=self.waiting_seconds,
            kv_usage_seconds=usage,
            kv_cache_blocks=blocks,
            kv_block_size=size,
            kv_cache_bytes=kv_bytes,
        )


@dataclass(frozen=True, slots=True)
class CapacityRow:
    endpoint: str
    model: str
    capacity: Capacity
    speculating: bool
    control: str | None = None
    control_capacity: Capacity | None = field(default=None)


def capacity_rows(
    rows: Iterable[RollupRecord], infos: Mapping[str, EndpointInfo]
) -> list[CapacityRow]:
    """Each endpoint and model's capacity over `rows` (the month's daily rows; those without
    a KV cache, stored before migration 0008 or by an engine without one, are left out), the draft's
    blocks measured against its control's when the control has stored its KV cache."""
    sums: dict[tuple[str, str], _Sums] = {}
    for row in rows:
        if row.model and (row.kv_usage_seconds is not None or row.kv_cache_blocks is not None):
            sums.setdefault((row.endpoint, row.model), _Sums()).add(row)
    by_endpoint: dict[str, dict[str, _Sums]] = {}
    for (endpoint, model), s in sums.items():
        by_endpoint.setdefault(endpoint, {})[model] = s
    out = []
    for (endpoint, model), s in sorted(sums.items()):
        info = infos.get(endpoint, EndpointInfo(endpoint))
        speculating = info.method is not None if info.configured else s.drafted
        control = None
        theirs = by_endpoint.get(info.control or "", {})
        counterpart = theirs.get(model)
        if counterpart is None and len(theirs) == 1 and len(by_endpoint[endpoint]) == 1:
            counterpart = next(iter(theirs.values()))
        if counterpart is not None:
            control = economics.capacity_of(counterpart.counts(), counterpart.seconds)
        capacity = economics.capacity_of(
            s.counts(),
            s.seconds,
            speculating=speculating,
            draft_weight_bytes=info.draft_weight_bytes,
            gpu_memory_bytes=info.gpu_memory_bytes,
            control=counterpart.counts() if counterpart is not None else None,
        )
        out.append(CapacityRow(endpoint, model, capacity, speculating, info.control, control))
    return out
