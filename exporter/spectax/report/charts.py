"""The HTML report's charts: matplotlib figures rendered to inline SVG text.

matplotlib is imported here only, so the daemon never loads it. No pyplot:
figures are built with the object API (no global state, no GUI backend), text
stays text in the SVG (small, crisp, searchable), and the metadata block and
its date are dropped so the same report renders the same bytes.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING

from spectax.report.build import Report
from spectax.report.capacity_table import whole_requests
from spectax.report.figures import Figures, total

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MAX_PANELS = 6
MAX_BARS = 20
PAID, TAX, NEUTRAL, LINE, COUNTERFACTUAL = "#2e7d32", "#c62828", "#9e9e9e", "#1565c0", "#ef6c00"
# A span's colour is what most of its windows were judged (figures.majority), never a sign.
SHADES = {
    "pays": (PAID, "windows paid"),
    "tax": (TAX, "windows a tax"),
    "uncertain": (NEUTRAL, "windows uncertain"),
}


@dataclass(frozen=True, slots=True)
class Chart:
    key: str
    title: str
    svg: str | None  # None: nothing to draw, `empty` says why
    empty: str = ""


class ChartsUnavailable(RuntimeError):
    """matplotlib is not installed."""


def charts(report: Report) -> list[Chart]:
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - a dependency; the message says how to fix it
        raise ChartsUnavailable(
            "the HTML report draws its charts with matplotlib, which is not installed: "
            "pip install 'matplotlib>=3.8' (or reinstall spectax), or use --format md|csv"
        ) from None
    with matplotlib.rc_context(
        {
            "svg.fonttype": "none",
            "svg.hashsalt": "spectax-report",
            "font.family": "DejaVu Sans",
            "font.size": 9.0,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
        }
    ):
        return [
            _cost_chart(report),
            _acceptance_chart(report),
            _savings_chart(report),
            _hours_chart(report),
            _latency_chart(report),
            _capacity_chart(report),
        ]


# ---------------------------------------------------------------- the charts


def _cost_chart(report: Report) -> Chart:
    title = "Daily cost per million output tokens: actual and without speculation"
    priced = [e for e in report.endpoints if e.month.priced and e.month.output_tokens > 0]
    if not priced:
        return Chart("cost", title, None, "No priced endpoint served output tokens this month.")
    panels: list[tuple[str, dict[date, Figures]]] = []
    days = sorted({d for e in priced for d in e.days})
    fleet = {d: total(e.days[d] for e in priced if d in e.days) for d in days}
    if len(priced) > 1:
        panels.append(("All endpoints", fleet))
    panels += [(e.info.name, e.days) for e in priced[: MAX_PANELS - len(panels)]]
    fig, axes = _grid(len(panels))
    for ax, (name, by_day) in zip(axes, panels, strict=False):
        days_shown = sorted(d for d, f in by_day.items() if f.cost_per_million is not None)
        xs = _dates(days_shown)
        actual = _values(by_day[d].cost_per_million for d in days_shown)
        without = [by_day[d].cost_per_million_without_speculation for d in days_shown]
        ax.plot(xs, actual, color=LINE, marker=".", label="actual")
        if any(v is not None for v in without):
            ax.plot(
                xs,
                _values(without),
                color=COUNTERFACTUAL,
                linestyle="--",
                marker=".",
                label="without speculation",
            )
        ax.set_title(name)
        ax.set_ylabel("$ per million")
        ax.set_ylim(bottom=0)
        _date_axis(ax, len(days_shown))
        ax.legend(loc="lower left", fontsize=8)
    return Chart("cost", title, _scoped("cost", _svg(fig)))


def _acceptance_chart(report: Report) -> Chart:
    """Each day's acceptance against its break-even, the day shaded by what most of its
    windows were judged (the daemon's counted verdicts, `figures.majority`): green paid,
    red tax, grey uncertain. Never by acceptance above the line, which is one reading of
    one parameter set; the shading must agree with the windows counted in the tables."""
    title = "Daily acceptance against break-even, shaded by the windows' verdicts"
    spec = [e for e in report.endpoints if e.month.acceptance is not None]
    if not spec:
        return Chart("acceptance", title, None, "No endpoint proposed drafts this month.")
    spec = spec[:MAX_PANELS]
    fig, axes = _grid(len(spec))
    for ax, e in zip(axes, spec, strict=False):
        days_shown = sorted(d for d, f in e.days.items() if f.acceptance is not None)
        xs = _dates(days_shown)
        alpha = [e.days[d].acceptance or 0.0 for d in days_shown]
        even = [e.days[d].breakeven for d in days_shown]
        shaded: set[str] = set()
        for x, d in zip(xs, days_shown, strict=True):
            verdict = e.days[d].verdict
            if verdict in SHADES:
                color, label = SHADES[verdict]
                ax.axvspan(
                    x - 0.5,
                    x + 0.5,
                    color=color,
                    alpha=0.12,
                    linewidth=0,
                    label=None if label in shaded else label,
                )
                shaded.add(label)
        ax.plot(xs, alpha, color=LINE, marker=".", label="acceptance")
        if all(v is not None for v in even) and even:
            ax.plot(xs, [v or 0.0 for v in even], color=TAX, linestyle="--", label="break-even")
        ax.set_title(e.info.name)
        ax.set_ylim(0, 1)
        ax.set_ylabel("ratio")
        _date_axis(ax, len(days_shown))
        ax.legend(loc="best", fontsize=8, ncols=2)
    return Chart("acceptance", title, _scoped("acceptance", _svg(fig)))


def _savings_chart(report: Report) -> Chart:
    title = "Speculation's net savings (negative: tax) by endpoint"
    items = [e for e in report.endpoints if e.month.savings is not None]
    if not items:
        return Chart(
            "savings", title, None, "No priced endpoint speculated this month: no savings or tax."
        )
    items = sorted(items, key=lambda e: -abs(e.month.savings or 0.0))[:MAX_BARS]
    items.reverse()
    fig, ax = _bars_figure([e.info.name for e in items], bottom=0.8)  # a two-line label
    values = [e.month.savings or 0.0 for e in items]
    hatches = ["//" if e.info.semantics == "capacity" else "" for e in items]
    # Coloured by the windows' verdicts, as the tables count them: a point estimate of
    # savings whose windows were mostly uncertain is grey and says so, never green.
    verdicts = [e.month.verdict or "uncertain" for e in items]
    bars = ax.barh(
        [e.info.name for e in items],
        values,
        color=[SHADES[v][0] if v in SHADES else NEUTRAL for v in verdicts],
        hatch=hatches,
        edgecolor="white",
    )
    ax.axvline(0, color="black", linewidth=0.8)
    labels = [
        _money_label(v) + (f" ({verdict})" if verdict in ("uncertain", "mixed") else "")
        for v, verdict in zip(values, verdicts, strict=True)
    ]
    ax.bar_label(bars, labels=labels, padding=3, fontsize=8)
    ax.set_xlabel(
        "$ this month (hatched: provisioned, capacity freed; solid: invoice money)\n"
        "colour: most windows paid (green), a tax (red), uncertain or mixed (grey, a point "
        "estimate)"
    )
    ax.margins(x=0.25)
    ax.grid(axis="y", visible=False)
    return Chart("savings", title, _scoped("savings", _svg(fig)))


def _hours_chart(report: Report) -> Chart:
    """The daemon's verdicts per endpoint, counted in windows: tax, paid, uncertain."""
    title = "Windows in which speculation paid, was a tax, or was uncertain, by endpoint"
    items = [e for e in report.endpoints if e.month.windows_judged and e.month.speculating]
    if not items:
        return Chart("hours", title, None, "No endpoint has judged speculating windows this month.")
    items = sorted(items, key=lambda e: (-e.month.windows_tax, e.info.name))[:MAX_BARS]
    items.reverse()
    fig, ax = _bars_figure([e.info.name for e in items])
    names = [e.info.name for e in items]
    paid = [e.month.windows_pays for e in items]
    tax = [e.month.windows_tax for e in items]
    uncertain = [e.month.windows_uncertain for e in items]
    ax.barh(names, tax, color=TAX, label="tax")
    ax.barh(names, paid, left=tax, color=PAID, label="paid")
    ax.barh(
        names,
        uncertain,
        left=[a + b for a, b in zip(tax, paid, strict=True)],
        color=NEUTRAL,
        label="uncertain",
    )
    ax.set_xlabel("windows judged (a speculating model with output)")
    ax.legend(loc="lower right", fontsize=8, ncols=3)
    ax.grid(axis="y", visible=False)
    return Chart("hours", title, _scoped("hours", _svg(fig)))


def _latency_chart(report: Report) -> Chart:
    """Each speculating endpoint's daily p99 TPOT (the day's summed buckets), and its
    control's dashed: the tail with against without speculation, measured."""
    title = "Daily p99 time per output token, against the control without speculation"
    items = [
        e
        for e in report.endpoints
        if e.month.speculating and e.latency and e.latency.daily_p99_tpot
    ]
    if not items:
        return Chart(
            "latency", title, None, "No speculating endpoint has latency histogram buckets."
        )
    fig, axes = _grid(min(len(items), MAX_PANELS))
    for ax, e in zip(axes, items[:MAX_PANELS], strict=False):
        assert e.latency is not None
        for series, color, style, label in (
            (e.latency.daily_p99_tpot, LINE, "-", "p99 TPOT (measured)"),
            (
                e.latency.control_daily_p99_tpot,
                COUNTERFACTUAL,
                "--",
                f"{e.latency.control} (plain)",
            ),
        ):
            if series:
                days = sorted(series)
                ms = [series[d] * 1000 for d in days]
                ax.plot(_dates(days), ms, color=color, linestyle=style, marker=".", label=label)
        ax.set_title(e.info.name)
        ax.set_ylabel("ms per output token")
        ax.set_ylim(bottom=0)
        _date_axis(ax, len(e.latency.daily_p99_tpot))
        ax.legend(loc="lower left", fontsize=8)
    return Chart("latency", title, _scoped("latency", _svg(fig)))


def _capacity_chart(report: Report) -> Chart:
    """Requests the KV cache holds with the draft and without it: capacity, not money."""
    title = "Requests the KV cache holds at once, with the draft and without it, by endpoint"
    fig = capacity_figure(report)
    if fig is None:
        return Chart(
            "capacity",
            title,
            None,
            "No speculating endpoint stored its KV cache with a basis for the draft's blocks.",
        )
    return Chart("capacity", title, _scoped("capacity", _svg(fig)))


def capacity_figure(report: Report) -> Figure | None:
    """The capacity chart's figure (None: nothing to draw). Its legend sits above the axes,
    outside them: inside, wherever it went, it covered a bar and its label for some month.
    The labels are whole requests, floored, as in the table."""
    items = [
        r
        for r in report.capacity
        if r.capacity.concurrency_capacity_no_draft_requests is not None
        and r.capacity.concurrency_capacity_requests is not None
    ][:MAX_BARS]
    if not items:
        return None
    items.reverse()
    names = [f"{r.endpoint} ({r.capacity.draft_blocks_basis})" for r in items]
    fig, ax = _bars_figure(names, top=0.45)
    held = [r.capacity.concurrency_capacity_requests or 0.0 for r in items]
    without = [r.capacity.concurrency_capacity_no_draft_requests or 0.0 for r in items]
    ax.barh(names, without, color="none", edgecolor=COUNTERFACTUAL, hatch="//", label="without")
    bars = ax.barh(names, held, height=0.5, color=LINE, label="with the draft")
    ax.bar_label(bars, labels=[f"{whole_requests(v):,}" for v in held], padding=3, fontsize=8)
    ax.set_xlabel("requests of the month's mean context length (basis of the draft's blocks)")
    ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=8, ncols=2, frameon=False)
    ax.margins(x=0.08)
    ax.grid(axis="y", visible=False)
    return fig


# ---------------------------------------------------------------- helpers


WIDTH_IN = 9.0


def _grid(n: int) -> tuple[Figure, Sequence[Axes]]:
    """Small multiples, two to a row. Margins are fixed (in inches) rather than computed by a
    layout engine, which would draw every figure twice."""
    from matplotlib.figure import Figure

    columns = 1 if n == 1 else 2
    rows = (n + columns - 1) // columns
    height = 2.8 * rows
    fig = Figure(figsize=(WIDTH_IN, height))
    fig.subplots_adjust(
        left=0.75 / WIDTH_IN,
        right=1 - 0.15 / WIDTH_IN,
        top=1 - 0.3 / height,
        bottom=0.55 / height,
        hspace=0.95 / (2.8 - 0.95),
        wspace=0.25,
    )
    axes = fig.subplots(rows, columns, squeeze=False).flatten()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, list(axes[:n])


def _bars_figure(
    names: Sequence[str], bottom: float = 0.6, top: float = 0.15
) -> tuple[Figure, Axes]:
    """Horizontal bars, one per name, with room on the left for the longest name (and `top`
    inches above the axes, for a legend placed there)."""
    from matplotlib.figure import Figure

    height = 0.25 + top + bottom + 0.32 * max(len(names), 2)
    label = 0.25 + 0.075 * max((len(n) for n in names), default=8)
    fig = Figure(figsize=(WIDTH_IN, height))
    fig.subplots_adjust(
        left=min(label, 4.0) / WIDTH_IN,
        right=1 - 0.2 / WIDTH_IN,
        top=1 - top / height,
        bottom=bottom / height,
    )
    return fig, fig.subplots()


def _date_axis(ax: Axes, days: int) -> None:
    """One tick per day (or every few days), labelled with the day of the month."""
    from matplotlib.dates import DateFormatter, DayLocator

    every = max(1, math.ceil(days / 10))
    ax.xaxis.set_major_locator(DayLocator(interval=every))  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_formatter(DateFormatter("%d"))  # type: ignore[no-untyped-call]
    ax.set_xlabel("day of month (UTC)")
    first = ax.dataLim.intervalx[0]
    if days <= 1 and math.isfinite(first):
        # matplotlib widens a lone date to +-2 years: 2,287 daily ticks, 50 s for one report.
        ax.set_xlim(first - 1, first + 1)


def _dates(days: Sequence[date]) -> list[float]:
    """Days as matplotlib date numbers (midnight UTC: each point sits on its day's tick)."""
    from matplotlib.dates import date2num

    midnight = [datetime(d.year, d.month, d.day, tzinfo=UTC) for d in days]
    return [float(x) for x in date2num(midnight)]  # type: ignore[no-untyped-call]


def _values(values: Iterable[float | None]) -> list[float]:
    return [math.nan if v is None else v for v in values]


def _money_label(v: float) -> str:
    sign = "-" if v < 0 else "+"
    return f"{sign}${abs(v):,.0f}" if abs(v) >= 100 else f"{sign}${abs(v):,.2f}"


def _svg(fig: Figure) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    text = re.sub(r"<\?xml[^>]*\?>\s*", "", text)
    text = re.sub(r"<!DOCTYPE[^>]*>\s*", "", text)
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.DOTALL)
    return text.strip()


def _scoped(key: str, svg: str) -> str:
    """Prefix the SVG's ids (and its references to them) with the chart's key: four charts
    inline in one document must not share ids such as `figure_1`."""
    svg = svg.replace(' id="', f' id="{key}-')
    svg = svg.replace('href="#', f'href="#{key}-')
    return svg.replace("url(#", f"url(#{key}-")
