"""The report's load curve table (issue 34): each speculating endpoint and model's month of
drafting hours binned by mean running requests (`economics.load_curve`, the rule
`recommend._schedule_k` reads too), window by window where the store kept the hours' load
bins (`HourPoint.load_samples`), whatever the engine and whatever is advised, and the
"speculation was a tax N% of the hours, when X or more requests ran: $Y" line under it."""

from __future__ import annotations

from spectax.economics.load_curve import STALL_SHARE, LoadBin
from spectax.load_curve_text import tax_sentence
from spectax.report.build import Report
from spectax.report.cells import DASH, usd, usd_signed
from spectax.report.figures import HourPoint, month_curve
from spectax.report.tables import Table


def load_curve_table(report: Report) -> Table:
    rows: list[tuple[str, ...]] = []
    notes: list[str] = []
    for e in report.endpoints:
        by_model: dict[str, list[HourPoint]] = {}
        for h in e.hours:
            by_model.setdefault(h.model, []).append(h)
        for model, hours in sorted(by_model.items()):
            curve = month_curve(hours)
            if curve is None:
                continue
            stalled = set(curve.stalls)
            rows += [_row(e.info.name, model, b, b.low in stalled) for b in curve.bins]
            sentence = tax_sentence(curve, "the hours", usd)
            if sentence is not None:
                notes.append(f"{e.info.name} ({model}): {sentence}.")
    if not rows:
        rows.append(("No drafting hour this month", *("",) * 8))
    return Table(
        "load_curve",
        "Load curve: speedup against running requests",
        (
            "Endpoint",
            "Model",
            "Running requests",
            "Time",
            "Speedup",
            "Acceptance",
            "Net",
            "Drafted/step",
            "Hours' windows",
        ),
        rows,
        (
            "Each speculating endpoint and model's drafting hours, their windows binned by "
            "their mean running requests (powers of two: 8-15 holds 8 to 15; an hour whose "
            "windows are no longer kept binned is one point at its mean); the speedup is the "
            "windows' own, summed (busy time without speculation over busy time), with the "
            "weakest basis they were judged on; a bin of fewer than 3 windows is thin, a burst "
            "rather than a load the endpoint sits at; a bin whose output tokens per second per "
            f"request fell under {STALL_SHARE:g} of both neighbouring bins' has stalled, as at "
            "a K schedule's boundary; drafted/step is the draft tokens proposed per request-step,"
            " the draft length that ran there in the mean (0 where a K schedule stopped drafting;"
            ' docs/economics.md, "The load curve and the K schedule").',
            *notes,
        ),
        (False, False, True, True, True, True, True, True, True),
    )


def _row(endpoint: str, model: str, b: LoadBin, stalled: bool) -> tuple[str, ...]:
    speedup = DASH if b.speedup is None else f"{b.speedup:.3f} ({b.basis or 'not recorded'})"
    acceptance = DASH if b.acceptance is None else f"{b.acceptance:.3f}"
    windows = f"{b.windows:,}" + (" (thin)" if b.thin else "")
    per_step = b.draft_tokens_per_step
    drafted = DASH if per_step is None else f"{per_step:.2f}"
    return (
        endpoint,
        model,
        b.label + (" (stalled)" if stalled else ""),
        f"{b.time_share:.0%}",
        speedup,
        acceptance,
        usd_signed(b.savings_usd),
        drafted,
        windows,
    )
