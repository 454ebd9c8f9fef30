"""A stored rollup row (hourly or daily) as the report reads it: a plain tuple of its columns."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from operator import itemgetter
from typing import NamedTuple

from sqlalchemy.orm.attributes import instance_dict

from spectax.store.models import Sums


class RollupRecord(NamedTuple):
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
    # What the windows' assessments concluded, summed (migration 0009; all None before it).
    plain_busy_seconds: float | None
    assessed_busy_seconds: float | None
    draft_compute_usd: float | None
    rejected_usd: float | None
    draft_cost_ratio: float | None
    ridge_batch_requests: float
    # The daemon's own verdicts, counted, and the latest counterfactual source, band and step
    # overhead (store.models.VerdictCounts); None on rows rolled up before migration 0005.
    windows: int
    windows_pays: int | None
    windows_tax: int | None
    windows_uncertain: int | None
    windows_basis_measured: int | None
    windows_basis_calibrated: int | None
    windows_basis_profile: int | None
    windows_basis_default: int | None
    ridge_batch_source: str | None
    speedup_low_ratio: float | None
    speedup_high_ratio: float | None
    step_overhead_ratio: float | None
    # Latency histograms' bucket counts, JSON (store.rows); None before migration 0007.
    time_per_output_token_buckets: str | None
    inter_token_latency_buckets: str | None
    time_to_first_token_buckets: str | None
    e2e_request_latency_buckets: str | None
    # The KV cache (migration 0008): time integrals, preemptions and the engine's settings.
    requests_finished: int
    preemptions: int
    waiting_seconds: float
    kv_usage_seconds: float | None
    kv_cache_blocks: float | None
    kv_block_size: float | None
    kv_cache_bytes: float | None
    # The seconds across restarts no scrape saw (migration 0011; None before it).
    unobserved_seconds: float | None


_FIELDS = itemgetter(*RollupRecord._fields)


def record(row: Sums) -> RollupRecord:
    """A stored row as a `RollupRecord`, read straight from the instance's loaded state."""
    try:
        return RollupRecord._make(_FIELDS(instance_dict(row)))
    except KeyError:  # an attribute not loaded (expired): go through the descriptors
        return RollupRecord._make(getattr(row, name) for name in RollupRecord._fields)
