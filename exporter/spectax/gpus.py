"""GPU peak compute and memory bandwidth: the shipped table beside the price table.

What the roofline prior for B* needs (`spectax.economics.formulas.roofline_ridge_batch`):
a GPU's peak dense tensor FLOP/s at the precision it serves (BF16; FP16 where it has
none) and its memory bandwidth, from the vendor's datasheet, with the source and as-of
date on each row. Names are those of the price table's `gpu` column, compared without
case, so an endpoint's `gpu:` finds both its price and its specs.
"""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass
from functools import cache
from importlib import resources

from spectax import economics
from spectax.pipeline.windows import Window

log = logging.getLogger("spectax.monitor")  # as the endpoint monitor logs


@dataclass(frozen=True, slots=True)
class GpuSpec:
    gpu: str
    peak_flops_per_second: float
    memory_bytes_per_second: float
    note: str
    as_of: str
    source: str


@cache
def gpu_specs() -> dict[str, GpuSpec]:
    """The shipped table, keyed by lower-cased GPU name (read once: it never changes)."""
    text = resources.files("spectax").joinpath("data/gpu_specs.csv").read_text(encoding="utf-8")
    specs = {}
    for row in csv.DictReader(text.splitlines()):
        spec = GpuSpec(
            gpu=row["gpu"].strip(),
            peak_flops_per_second=float(row["peak_flops_per_second"]),
            memory_bytes_per_second=float(row["memory_bytes_per_second"]),
            note=row["note"].strip(),
            as_of=row["as_of"].strip(),
            source=row["source"].strip(),
        )
        specs[spec.gpu.lower()] = spec
    return specs


def gpu_spec(gpu: str | None) -> GpuSpec | None:
    """The specs of `gpu` (as an endpoint's `gpu:` or its price's names it), or None."""
    return gpu_specs().get(gpu.strip().lower()) if gpu else None


class RooflinePrior:
    """One endpoint's roofline prior for B*: from each window's FLOP and byte estimates
    (vLLM --enable-mfu-metrics) and its GPU's peaks. A window without estimates (idle)
    keeps the last figure; estimates for a GPU not in the table are said once."""

    def __init__(self, endpoint: str, gpu: GpuSpec | None, named: str | None):
        self._endpoint = endpoint
        self._gpu = gpu
        self._named = named  # the GPU the configuration names, for the message
        self._ridge_batch: float | None = None
        self._said_no_gpu = False

    def ridge_batch(self, window: Window | None) -> float | None:
        estimates = economics.roofline_estimates(window) if window is not None else None
        if estimates is not None and (gpu := self._gpu) is not None:
            peaks = (gpu.peak_flops_per_second, gpu.memory_bytes_per_second)
            self._ridge_batch = economics.roofline_ridge_batch(*estimates, *peaks)
        elif estimates is not None and not self._said_no_gpu:
            self._said_no_gpu = True
            named = self._named
            log.info(
                "endpoint %s: vLLM estimates FLOPs and bytes, but %s: B* stays the configured one",
                self._endpoint,
                f"GPU {named!r} is not in spectax's GPU table" if named else "it names no `gpu:`",
            )
        return self._ridge_batch
