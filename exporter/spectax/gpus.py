"""GPU peak compute and memory bandwidth: the shipped table beside the price table.

What the roofline prior for B* needs (spectax.counterfactual.in_force.RooflinePrior):
a GPU's peak dense tensor FLOP/s at the precision it serves (BF16; FP16 where it has
none) and its memory bandwidth, from the vendor's datasheet, with the source and as-of
date on each row. Names are those of the price table's `gpu` column, compared without
case, so an endpoint's `gpu:` finds both its price and its specs.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from importlib import resources


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
