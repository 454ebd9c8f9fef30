"""The load curve and its K schedule in words, the same wherever they are printed.

`spectax assess` and the report (report/load_curve_table.py, report/recommend.py) take
them from here, so "4 at 1-7, 0 from 8" and the tax line read alike on every surface
(issue 34). Words only: the figures come from `economics.load_curve`
and `economics.draft_schedule`, formatted, never computed again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from spectax.economics.load_curve import LoadBin, LoadCurve


def range_text(batch_range: Sequence[float], *, last: bool) -> str:
    """ "3 at 2-7", "4 at 1", or for the last range, up to the engine's largest batch,
    "0 from 48"."""
    first, final, k = (int(v) for v in batch_range)
    if last:
        return f"{k} from {first}"
    return f"{k} at {first}" if first == final else f"{k} at {first}-{final}"


def ranges_text(ranges: Sequence[Sequence[float]]) -> str:
    """A whole schedule: "K = 3 at 1-15, 0 from 16" without the "K = "."""
    return ", ".join(range_text(r, last=i == len(ranges) - 1) for i, r in enumerate(ranges))


def tax_sentence(curve: LoadCurve, of: str, usd: Callable[[float | None], str]) -> str | None:
    """ "speculation was a tax 75% of the hours, when 16 or more requests ran: -$197.68"
    (`of`: "the hours", "the time"); None without a crossover."""
    if curve.crossover_requests is None or curve.tax_time_share is None:
        return None
    return (
        f"speculation was a tax {curve.tax_time_share:.0%} of {of}, when "
        f"{curve.crossover_requests} or more requests ran: {usd(curve.tax_usd)}"
    )


def speedup_text(b: LoadBin) -> str:
    """A bin's speedup with its band and basis: "1.234 (0.951 to 1.502, default)", a measured
    one "1.234 (measured)"; "-" without one."""
    if b.speedup is None:
        return "-"
    band = b.speedup_band
    if band is None or band[0] == band[1]:
        return f"{b.speedup:.3f} ({b.basis or 'not recorded'})"
    return f"{b.speedup:.3f} ({band[0]:.3f} to {band[1]:.3f}, {b.basis or 'not recorded'})"
