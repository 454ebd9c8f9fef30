"""Latency with against without speculation: the tail the on-call engineer is paged for.

The throughput verdict speaks in means; an SLO speaks in p99. Speculation can raise the
mean rate of tokens and still make the tail worse (a rejected draft is a step spent for one
token, and the draft's time is added to every step), so the latency verdict is computed on
its own, from the engine's histograms (spectax.pipeline.quantiles):

- with a control (an endpoint serving the same traffic without speculation), each quantile
  of each latency metric is divided by the control's over the same window: measured;
- without one, only time per output token has a model: the step model's speedup S (mean
  tokens per unit of time, ECONOMICS.md §3) makes a request's TPOT 1/S of what it would be
  without speculation. The same factor is applied to each quantile: modelled from means,
  said so wherever it is shown, never presented as a measured tail.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from spectax.pipeline.counts import Counts
from spectax.pipeline.quantiles import QUANTILES, Quantiles, latency_quantiles
from spectax.pipeline.windows import Window

LatencyBasis = Literal["measured", "modeled"]
#: A ratio this close to 1 is "no different": histogram buckets are coarse, and the
#: interpolation inside one moves a quantile by a few per cent without anything changing.
SAME_WITHIN = 0.05
#: Finished requests each side needs before its quantiles are compared with the control's,
#: as for the measured speedup (assessment.MIN_MEASURED_REQUESTS): the p99 of a handful of
#: requests is their maximum, and a ratio of two maxima says little.
MIN_REQUESTS = 10
_NAMES = {"tpot": "TPOT", "itl": "inter-token latency", "ttft": "TTFT", "e2e": "e2e latency"}


@dataclass(frozen=True, slots=True)
class Latency:
    """One endpoint and model over one window: its quantiles, and speculation's effect.

    `ratios` maps (metric, percentile label: "p99") to the quantile with speculation over the same
    quantile without it (> 1: speculation makes it slower), on `basis`; empty when there is
    no speculation, or neither a control nor a modelled speedup."""

    quantiles: dict[str, Quantiles]
    ratios: dict[tuple[str, str], float] = field(default_factory=dict)
    basis: LatencyBasis | None = None

    def seconds(self, metric: str, label: str) -> float | None:
        found = self.quantiles.get(metric)
        return found.by_label()[label] if found else None


def assess_latency(
    model: str,
    counts: Counts,
    speculating: bool,
    modeled_speedup: float | None,
    control: Window | None = None,
) -> Latency:
    """The latency of `counts` (one model's window) and speculation's effect on it: against
    the control's window when there is one and both sides saw enough requests, else from
    the modelled speedup."""
    ours = latency_quantiles(counts)
    if not speculating:
        return Latency(ours)
    theirs = _control_counts(control, model)
    if theirs is not None:
        reference = latency_quantiles(theirs)
        ratios = {}
        enough = min(counts.requests_finished, theirs.requests_finished) >= MIN_REQUESTS
        for metric, found in ours.items() if enough else ():
            if metric not in reference:
                continue
            plain = reference[metric].by_label()
            for label, value in found.by_label().items():
                without = plain[label]
                if value is not None and without:
                    ratios[(metric, label)] = value / without
        if ratios:  # else too few requests on a side: modelled, as the throughput verdict
            return Latency(ours, ratios, "measured")
    if modeled_speedup and "tpot" in ours:
        ratios = {("tpot", label): 1.0 / modeled_speedup for label, _ in QUANTILES}
        return Latency(ours, ratios, "modeled")
    return Latency(ours)


def latency_verdict(latency: Latency | None, metric: str = "tpot", label: str = "p99") -> str:
    """The latency verdict in words, beside the throughput one: "speculation makes p99 TPOT
    1.4x worse here (measured against the control)"; "" when there is nothing to say."""
    if latency is None or (metric, label) not in latency.ratios:
        return ""
    ratio = latency.ratios[(metric, label)]
    quantile = f"{label} {_NAMES.get(metric, metric)}"
    if abs(ratio - 1.0) <= SAME_WITHIN:
        effect = f"speculation leaves {quantile} unchanged here"
    elif ratio > 1:
        effect = f"speculation makes {quantile} {ratio:.1f}x worse here"
    else:
        effect = f"speculation makes {quantile} {1 / ratio:.1f}x better here"
    basis = (
        "measured against the control"
        if latency.basis == "measured"
        else "modelled: 1 / the step model's mean speedup, not a measured tail"
    )
    return f"{effect} ({basis})"


def _control_counts(control: Window | None, model: str) -> Counts | None:
    """The control's counts for the same model, or (serving it under another name) all of
    its models summed; None without a control."""
    if control is None or not control.models:
        return None
    if model in control.models:
        return control.models[model]
    return sum(control.models.values(), Counts())
