"""An endpoint's latency objective, as its operator sets it (config `latency_slo:`).

spectax does not page on latency by itself: what is too slow is the operator's to say. With
an objective set, `/metrics` carries it (`spectax_latency_slo_seconds`) beside the measured
quantile, and the alert SpeculationHurtsTailLatency fires when the quantile is beyond it
while speculation makes that quantile worse (alerts/runbook.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from spectax.units import StrictModel


class LatencySLO(StrictModel):
    """`quantile` of `metric` (over a window) at most `seconds`; e.g. p99 TPOT <= 80 ms."""

    #: tpot - time per output token of a request; itl - between two tokens; ttft - time to
    #: the first token; e2e - the whole request (spectax.pipeline.quantiles.LATENCY_METRICS).
    metric: Literal["tpot", "itl", "ttft", "e2e"] = "tpot"
    quantile: float = 0.99  # one of those spectax computes: 0.5, 0.95, 0.99
    seconds: float = Field(gt=0)

    @field_validator("quantile")
    @classmethod
    def _computed(cls, value: float) -> float:
        if value not in (0.5, 0.95, 0.99):
            raise ValueError("must be 0.5, 0.95 or 0.99: the quantiles spectax computes")
        return value

    @property
    def percentile(self) -> str:
        """The `percentile` label of the exported series: "p99" for 0.99."""
        return f"p{round(self.quantile * 100)}"
