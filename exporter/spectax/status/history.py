"""A few hours of one figure set per endpoint, in fixed-size rings of machine numbers.

The page's chart needs recent figures that no snapshot keeps (a snapshot holds one
window). Each endpoint keeps POINTS points, one per `step_seconds` at most, of its main
model (the one with the most output tokens): time, acceptance and break-even, what the
chart draws. Arrays, not tuples: 180 points measured 4.1 kB per endpoint (~8 MB at
2,000 endpoints), where a deque of tuples of floats measured 32.6 kB (~65 MB); with the
times as whole seconds (a point a minute needs no finer), 3.4 kB; without the speedup in
force, which nothing drew, 2.6 kB (issue 31).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

from spectax.economics import Assessment
from spectax.endpoint import EndpointSnapshot

POINTS = 180  # 3 h at one point a minute


@dataclass(frozen=True, slots=True)
class Point:
    at: float
    acceptance: float | None
    breakeven: float | None


def main_assessment(snapshot: EndpointSnapshot) -> Assessment | None:
    """The model that carries the endpoint's traffic: the one with the most output tokens."""
    if not snapshot.assessments:
        return None
    return max(snapshot.assessments.values(), key=lambda a: (a.output_tokens, a.model))


class _Ring:
    __slots__ = ("count", "next", "times", "values")

    def __init__(self, points: int):
        self.times = array("I", bytes(4 * points))  # whole seconds: 32 bits reach 2106
        self.values = array("f", bytes(4 * 2 * points))  # acceptance, break-even
        self.next = 0
        self.count = 0

    def add(self, at: float, figures: tuple[float, float]) -> None:
        i = self.next
        self.times[i] = int(at)
        self.values[2 * i : 2 * i + 2] = array("f", figures)
        self.next = (i + 1) % len(self.times)
        self.count = min(self.count + 1, len(self.times))

    @property
    def last(self) -> float | None:
        return self.times[self.next - 1] if self.count else None

    def points(self) -> list[Point]:
        size = len(self.times)
        start = (self.next - self.count) % size
        order = ((start + k) % size for k in range(self.count))
        return [
            Point(self.times[i], *(_none(v) for v in self.values[2 * i : 2 * i + 2])) for i in order
        ]


def _none(value: float) -> float | None:
    return None if math.isnan(value) else value


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


class StatusHistory:
    """Recent figures per endpoint; recorded after each scrape, read by the page."""

    def __init__(self, step_seconds: float = 60.0, points: int = POINTS):
        self.step_seconds = step_seconds
        self._points = points
        self._rings: dict[str, _Ring] = {}

    def record(self, name: str, snapshot: EndpointSnapshot) -> None:
        """Keep the snapshot's figures if `step_seconds` have passed since the last point."""
        at = snapshot.last_success_timestamp
        main = main_assessment(snapshot)
        if not snapshot.up or at is None or main is None:
            return  # a gap in the chart: nothing was measured
        ring = self._rings.get(name)
        if ring is None:
            ring = self._rings[name] = _Ring(self._points)
        last = ring.last
        if last is not None and at - last < self.step_seconds:
            return
        ring.add(at, (_nan(main.acceptance_ratio), _nan(main.breakeven_acceptance_ratio)))

    def points(self, name: str) -> list[Point]:
        ring = self._rings.get(name)
        return ring.points() if ring is not None else []

    def keep_only(self, names: Iterable[str]) -> None:
        """Forget endpoints a reload removed."""
        kept = set(names)
        for name in [n for n in self._rings if n not in kept]:
            del self._rings[name]

    @property
    def span_seconds(self) -> float:
        return self.step_seconds * self._points
