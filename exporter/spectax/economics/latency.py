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

import math
from dataclasses import dataclass, field
from typing import Literal

from spectax.pipeline.counts import Counts
from spectax.pipeline.quantiles import (
    QUANTILES,
    Bounds,
    Quantiles,
    latency_quantiles,
    one_bucket,
)
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
    #: Measured ratios whose two quantiles fell in the same bucket, with its bounds: the
    #: histogram cannot tell them apart, whatever the ratio of the interpolations.
    one_bucket: dict[tuple[str, str], Bounds] = field(default_factory=dict)

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
        ratios, same = {}, {}
        enough = min(counts.requests_finished, theirs.requests_finished) >= MIN_REQUESTS
        for metric, found in ours.items() if enough else ():
            if metric not in reference:
                continue
            plain = reference[metric].by_label()
            for label, value in found.by_label().items():
                without = plain[label]
                if value is not None and without:
                    ratios[(metric, label)] = value / without
                    bucket = one_bucket(found, reference[metric], label)
                    if bucket is not None:
                        same[(metric, label)] = bucket
        if ratios:  # else too few requests on a side: modelled, as the throughput verdict
            return Latency(ours, ratios, "measured", same)
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
    effect = effect_words(quantile, ratio, latency.one_bucket.get((metric, label)), " here")
    basis = (
        "measured against the control"
        if latency.basis == "measured"
        else "modelled: 1 / the step model's mean speedup, not a measured tail"
    )
    return f"{effect} ({basis})"


def effect_words(quantile: str, ratio: float, bucket: Bounds | None, where: str = "") -> str:
    """Speculation's effect on `quantile` ("p99 TPOT") in words, `where` after the effect
    (" here"): the one wording of the status page's latency verdict and the report's.

    `bucket`: both quantiles fell in it (pipeline.quantiles.one_bucket), so the histogram
    cannot tell them apart, and "unchanged" or "1.1x worse" would be the interpolation
    talking; that is said instead, with the bucket's bounds."""
    if bucket is not None:
        return (
            f"{quantile} within one bucket with and without speculation{where}"
            f" ({bucket_words(bucket)}): the histogram cannot tell them apart"
        )
    if abs(ratio - 1.0) <= SAME_WITHIN:
        return f"speculation leaves {quantile} unchanged{where}"
    if ratio > 1:
        return f"speculation makes {quantile} {ratio:.1f}x worse{where}"
    return f"speculation makes {quantile} {1 / ratio:.1f}x better{where}"


def bucket_words(bucket: Bounds) -> str:
    """A bucket's bounds as a reader takes them: "20–25 ms", "≥ 80 s" (the +Inf bucket)."""
    lower, upper = bucket
    if upper == math.inf:
        return f"≥ {duration_words(lower)}"
    lower = max(lower, 0.0)
    if (lower >= 1) == (upper >= 1):  # one unit: "50–75 ms", "10–15 s"
        unit = duration_words(upper).rsplit(" ", 1)[1]
        scale = 1 if upper >= 1 else 1000
        return f"{_trimmed(lower * scale)}–{_trimmed(upper * scale)} {unit}"
    return f"{duration_words(lower)}–{duration_words(upper)}"


def duration_words(seconds: float) -> str:
    """A bucket bound, as written in the engine's histogram: "80 s", "2.5 ms"."""
    if seconds >= 1:
        return f"{_trimmed(seconds)} s"
    return f"{_trimmed(seconds * 1000)} ms"


def _trimmed(value: float) -> str:
    return f"{value:,.3f}".rstrip("0").rstrip(".")


def _control_counts(control: Window | None, model: str) -> Counts | None:
    """The control's counts for the same model, or (serving it under another name) all of
    its models summed; None without a control."""
    if control is None or not control.models:
        return None
    if model in control.models:
        return control.models[model]
    return sum(control.models.values(), Counts())
