"""A counter's exact growth per window from its raw samples, as the direct scrapes count it.

Per series, the delta between consecutive samples is added to the window the later
sample falls in ((start, end], like the direct scrapes' intervals), and a value that went
down is a reset: the new value counts, as after a restart of a directly scraped engine.
A window counts from the sample before it only when that lies within `horizon` before the
window's start, for every window alike: so a window's count does not depend on which
other windows were read with it (the live daemon reads one at a time, backfill a span).
Most series are whole-number counters that never go down; those take a shortcut that
converts only the few timestamps and values at the windows' boundaries (at 20,000
replicas a window is ~10 M samples, and converting each was most of a read's CPU).
"""

from __future__ import annotations

from bisect import bisect_right


def deltas(
    stamps: list[str],
    texts: list[str],
    bounds: list[float],
    gauge: bool,
    bound: float,
    horizon: float = float("inf"),
) -> list[tuple[int, float, bool]]:
    """(window index, growth, reset) of one series, for each window it has a sample in.

    A counter's growth is the sum of its deltas from the sample before, or its value after
    a reset; a gauge's the sum of its trapezoids with the sample before (running requests
    x seconds). A value no page could hold (NaN, negative, over `bound`) is skipped. A
    window's first sample has no sample before it when the one before lies `horizon` or
    more before the window's start (the read reaches back `horizon` before the span).
    """
    if not gauge and _rising_digits(texts, bound):
        return _integer_deltas(stamps, texts, bounds, horizon)
    values = list(map(float, texts))
    if not gauge and _plain_integers(texts, values, bound):
        return _integer_deltas(stamps, texts, bounds, horizon)
    out: list[tuple[int, float, bool]] = []
    previous: tuple[float, float] | None = None
    i, last = 0, len(bounds) - 2
    for t, v in zip(map(float, stamps), values, strict=True):
        if not 0.0 <= v <= bound:
            continue
        if t > bounds[0]:
            while i < last and t > bounds[i + 1]:
                i += 1
            if previous is not None and previous[0] <= bounds[i] - horizon:
                previous = None  # too old to count from, in any read of this window
            if t <= bounds[-1]:
                if previous is None:
                    grown, reset = 0.0, False
                elif gauge:
                    grown, reset = (previous[1] + v) / 2 * (t - previous[0]), False
                elif v >= previous[1]:
                    grown, reset = v - previous[1], False
                else:
                    grown, reset = v, True
                if out and out[-1][0] == i:
                    _, before, was_reset = out[-1]
                    out[-1] = (i, before + grown, was_reset or reset)
                else:
                    out.append((i, grown, reset))
        previous = (t, v)
    return out


def _rising_digits(texts: list[str], bound: float) -> bool:
    """`_plain_integers` without converting a value, for the usual case: digits of one
    length (a counter within a window rarely gains a digit), whose text order is their
    numeric order."""
    joined = "".join(texts)
    return (
        joined.isdigit()
        and joined.isascii()
        and len(joined) == len(texts[0]) * len(texts) == len(min(texts, key=len)) * len(texts)
        and texts == sorted(texts)
        and float(texts[-1]) <= min(bound, 2.0**53)
    )


def _plain_integers(texts: list[str], values: list[float], bound: float) -> bool:
    """Whether a counter's samples are whole numbers that never go down and are all valid:
    then a window's growth is exactly its last value less the one before it."""
    return (
        all(map(str.isdigit, texts))
        and values == sorted(values)
        and (not values or values[-1] <= min(bound, 2.0**53))
    )


def _integer_deltas(
    stamps: list[str], texts: list[str], bounds: list[float], horizon: float
) -> list[tuple[int, float, bool]]:
    """`deltas` of a counter without resets or invalid values, a slice per window (the
    per-sample deltas of whole numbers below 2**53 sum exactly to the difference); only
    the timestamps the bisections land on, and the values at the boundaries, are
    converted."""
    out: list[tuple[int, float, bool]] = []
    lo = bisect_right(stamps, bounds[0], key=float)
    for i, end in enumerate(bounds[1:]):
        hi = bisect_right(stamps, end, lo, key=float)
        if hi > lo:
            last = float(texts[hi - 1])
            fresh = lo > 0 and float(stamps[lo - 1]) > bounds[i] - horizon
            out.append((i, last - float(texts[lo - 1 if fresh else lo]), False))
            lo = hi
    return out
