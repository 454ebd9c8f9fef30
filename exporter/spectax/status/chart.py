"""The page's small chart: acceptance against break-even over the last hours, inline SVG.

Both are ratios on one 0–1 axis, so where the solid line runs above the dashed one the
acceptance clears the bar. Colours come from the page's CSS (`currentColor`, classes), so
the chart follows dark mode; no id, no reference, nothing to fetch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from spectax.status.history import Point

WIDTH, HEIGHT = 600, 110
LEFT, RIGHT, TOP, BOTTOM = 34, 8, 8, 20


def chart(points: Sequence[Point], step_seconds: float, span_seconds: float, title: str) -> str:
    """The SVG for `points` (oldest first); a line saying why when there are too few."""
    if len(points) < 2:
        return (
            f'<p class="muted">chart: collecting (a point every {step_seconds:g} s; the chart '
            "starts with the second)</p>"
        )
    end = points[-1].at
    start = max(points[0].at, end - span_seconds)
    shown = [p for p in points if p.at >= start]
    scale_x = (WIDTH - LEFT - RIGHT) / max(end - start, 1.0)

    def x(at: float) -> float:
        return LEFT + (at - start) * scale_x

    def y(ratio: float) -> float:
        ratio = min(max(ratio, 0.0), 1.0)
        return TOP + (1.0 - ratio) * (HEIGHT - TOP - BOTTOM)

    grid = "".join(
        f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(r):.1f}" y2="{y(r):.1f}"/>'
        f'<text x="{LEFT - 4}" y="{y(r) + 3:.1f}" text-anchor="end">{r:g}</text>'
        for r in (0.0, 0.5, 1.0)
    )
    times = "".join(
        f'<text x="{x(at):.1f}" y="{HEIGHT - 5}" text-anchor="{anchor}">{_clock(at)}</text>'
        for at, anchor in ((start, "start"), (end, "end"))
    )
    acceptance = _path(shown, lambda p: p.acceptance, x, y)
    breakeven = _path(shown, lambda p: p.breakeven, x, y)
    return (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'preserveAspectRatio="none" aria-label="{title}"><title>{title}</title>{grid}{times}'
        f'<path class="breakeven" d="{breakeven}"/><path class="acceptance" d="{acceptance}"/>'
        "</svg>"
        '<p class="legend"><span class="key acceptance"></span> acceptance '
        '<span class="key breakeven"></span> break-even · times UTC</p>'
    )


def _path(
    points: Sequence[Point],
    figure: Callable[[Point], float | None],
    x: Callable[[float], float],
    y: Callable[[float], float],
) -> str:
    """A polyline that breaks where the figure is missing (no traffic, endpoint down)."""
    parts, pen_down = [], False
    for point in points:
        value = figure(point)
        if value is None:
            pen_down = False
            continue
        parts.append(f"{'L' if pen_down else 'M'}{x(point.at):.1f},{y(value):.1f}")
        pen_down = True
    return " ".join(parts) or "M0,0"


def _clock(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M")
