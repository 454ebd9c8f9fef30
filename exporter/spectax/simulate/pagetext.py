"""Small pieces every simulated engine's page is written from: label sets, values, buckets.

The engines other than vLLM bucket their histograms differently; the simulator keeps vLLM's
buckets (:mod:`~spectax.simulate.state`). `rebucket` reads a state histogram at another
engine's bounds: the cumulative count at bound ``le`` is the count of the state's buckets
that end at or below it, so bounds the two share (all of TGI's token-count bounds) are
exact and the others lean low, never breaking the cumulative order. Sums and counts are
always exact, and those are what spectax reads.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

from spectax.simulate.state import EngineState, Histogram
from spectax.simulate.textformat import escape_label, format_int, format_value

__all__ = ["finished", "labels", "number", "rebucket", "split_streaming", "step_times"]

# SGLang's tokenizer counts streaming and non-streaming requests apart: the simulator
# sends this share of its requests streaming (25 of the fixtures' 40).
STREAMING_SHARE = 0.625


def labels(**pairs: str) -> str:
    """A label set in the order given (keyword order), escaped: ``{a="1",b="2"}``."""
    body = ",".join(f'{k}="{escape_label(v)}"' for k, v in pairs.items())
    return f"{{{body}}}" if body else ""


def number(value: float) -> str:
    """A value as prometheus_client writes it (``40.0``, ``1.7e+09``)."""
    if isinstance(value, int):
        return format_int(value)
    return format_value(value)


def rebucket(hist: Histogram, bounds: Sequence[float], scale: float = 1.0) -> list[float]:
    """Cumulative counts of `hist` at `bounds` (then +Inf), times `scale`, rounded."""
    cums = list(accumulate(hist.counts))
    out: list[float] = []
    for le in bounds:
        i = bisect_right(hist.bounds, le)  # the state's buckets ending at or below le
        out.append(round(cums[i - 1] * scale) if i else 0)
    out.append(round(cums[-1] * scale))
    return out


def split_streaming(value: float) -> tuple[float, float]:
    """(streaming, not streaming) shares of a count or sum, summing to it exactly.

    Counts stay integers and both shares of a cumulative series stay non-decreasing.
    """
    if isinstance(value, int):
        part = round(value * STREAMING_SHARE)
        return part, value - part
    part_f = value * STREAMING_SHARE
    return part_f, value - part_f


def step_times(state: EngineState) -> tuple[float, float]:
    """(step, drafting) seconds of a decode step at the current batch, from the physics.

    ``a + b * B * (K + 1)`` to verify, plus ``c * K * (a + b * B)`` to draft
    (:mod:`~spectax.simulate.vllm_engine`); prefill tokens are left out (a gauge of a typical step).
    """
    p = state.profile
    k = state.speculative_tokens
    batch = max(1.0, state.gauge_running)
    draft = p.draft_cost_ratio * k * (p.step_a + p.step_b * batch) if k else 0.0
    return p.step_a + p.step_b * batch * (k + 1) + draft, draft


def finished(state: EngineState) -> int:
    """Requests finished since the (re)start."""
    return state.counters.success_stop + state.counters.success_length
