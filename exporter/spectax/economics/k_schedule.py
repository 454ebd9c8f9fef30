"""A K schedule an endpoint runs: vLLM's `num_speculative_tokens_per_batch_size`, read.

The list is inclusive [first batch, last batch, K] ranges (`speculation.schedule`). Here is
what it says at a load: the K in force (`k_at_load`), where it changes K
(`schedule_boundaries`), and whether a load bin or a window ran two of its K (`straddling`,
`window_straddles`). The load curve flags its bins with them, the assessment assesses each
window at the K in force for its load (issue 34). Pure, and free of the rest of economics,
so both the assessment and the schedule advice (`draft_schedule`) can read it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: A drafted-tokens-per-draft figure above K by more than this share is drafts at a larger
#: K, not float noise in the counters' deltas.
_LONGER_DRAFTS = 1e-9


def schedule_problem(ranges: Sequence[Sequence[int]]) -> str | None:
    """What is wrong with a `num_speculative_tokens_per_batch_size` list, as vLLM 0.32
    checks it (`build_dynamic_sd_schedule_lookup`): inclusive [first, last, K] ranges, the
    first from batch 1, each starting where the one before ended, K >= 0; None when right."""
    if not ranges:
        return "give at least one [first batch, last batch, K] range"
    expected = 1
    for i, batch_range in enumerate(ranges):
        if len(batch_range) != 3:
            return f"range {i + 1} is {list(batch_range)}: give [first batch, last batch, K]"
        first, last, k = batch_range
        if first != expected:
            return f"range {i + 1} starts at batch {first}; it must start at {expected}"
        if last < first or k < 0:
            return f"range {i + 1} is {list(batch_range)}: give last >= first and K >= 0"
        expected = last + 1
    return None


def schedule_boundaries(ranges: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """The batch sizes at which a schedule changes K (the first batch of a range whose K
    differs from the range before): where throughput can jump, or stall."""
    return tuple(ranges[i][0] for i in range(1, len(ranges)) if ranges[i][2] != ranges[i - 1][2])


def straddling(bin_low: int, bin_high: int | None, boundaries: Sequence[int]) -> bool:
    """Whether a load bin [low, high) holds batches on both sides of a boundary: its windows
    then ran two K, and its figures mix them."""
    return any(bin_low < b and (bin_high is None or b < bin_high) for b in boundaries)


def k_at_load(ranges: Sequence[Sequence[int]], running: float) -> int:
    """The K the schedule runs at a mean of `running` requests: that of the range holding
    the mean's whole batch (at least 1; the load curve bins a mean the same way), the last
    range's beyond the list (vLLM carries it on to `max_num_seqs`)."""
    batch = max(1, math.floor(running))
    for _first, last, k in ranges:
        if batch <= last:
            return k
    return ranges[-1][2]


def window_straddles(
    ranges: Sequence[Sequence[int]], running: float, draft_tokens: float, drafts: float
) -> bool:
    """Whether a window whose mean is `running` requests ran two of the schedule's K,
    though its mean is in one range: a mean between two batches on either side of a
    boundary (3.5 with a boundary at 4: it ran both), or drafts longer than the K in force
    at the mean (only a range with a larger K drafts them; any draft where K is 0). A window
    that also ran a smaller K is seen by its mean alone: a draft shorter than K is also an
    n-gram proposer's short match."""
    low, high = max(1, math.floor(running)), math.ceil(running) + 1
    if straddling(low, high, schedule_boundaries(ranges)):
        return True
    k = k_at_load(ranges, running)
    return drafts > 0 and draft_tokens > k * drafts * (1.0 + _LONGER_DRAFTS)
