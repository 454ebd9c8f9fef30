"""The report's tables, as text cells: Markdown and HTML render the same ones."""

from __future__ import annotations

from dataclasses import dataclass, field

from spectax.report.build import Report
from spectax.report.cells import (
    BY_KIND,
    DASH,
    acceptance_cell,
    acceptance_length_cell,
    band_text,
    billing_label,
    change,
    cold_starts_cell,
    count,
    hours_share,
    kind_total_name,
    net_cell,
    per_million,
    percent,
    ratio,
    stake_text,
    unless_mixed,
    usd,
)
from spectax.report.figures import NOT_RECORDED, Figures, basis_text
from spectax.report.recommend import Recommendation

NOT_RECORDED_SUMS = "not recorded"
ACTION_LABELS = {
    "keep": "keep",
    "change_k": "change K",
    "schedule_k": "K by batch size",
    "disable_above": "disable above B_x",
    "route_high_temperature": "route high temperature",
    "turn_off": "turn off",
}


@dataclass(frozen=True, slots=True)
class Table:
    key: str
    title: str
    headers: tuple[str, ...]
    rows: list[tuple[str, ...]]
    notes: tuple[str, ...] = ()
    numeric: tuple[bool, ...] = field(default=())  # right-align these columns


def cost_table(report: Report) -> Table:
    rows = [
        _cost_row(e.info.name, billing_label(e), e.month, e.info.semantics)
        for e in report.endpoints
    ]
    rows.append(_cost_row("**Total**", "", report.total, None))
    if report.total.mixed:
        rows += [
            _cost_row(kind_total_name(kind), "", now, kind)
            for kind, now, _ in report.by_kind()
            if not now.empty
        ]
    return Table(
        "cost",
        "Spend, cost per million output tokens and speculation's net savings",
        (
            "Endpoint",
            "Billing",
            "Spend",
            "Basis",
            "Output tokens",
            "$/M output tokens",
            "$/M without speculation",
            "Speculation, net",
        ),
        rows,
        (
            "Net savings are the GPU time speculation saved, valued at the endpoint's price "
            "(negative: a tax). On provisioned (always-on) endpoints that is capacity freed: "
            "it becomes money only if replicas are scaled down. On serverless endpoints "
            "it is money on the invoice.",
            "$/M without speculation: the price of the GPU time the same output would have "
            "taken without speculation (spend plus net savings, per million output tokens). "
            "Both divide by the output tokens of the days that have a spend: an endpoint "
            "without a price adds tokens to the total, not to its cost per million.",
            "Spend is money paid on every kind of endpoint, so the Total adds it up; savings "
            "are invoice money on one kind and capacity on the other, so a total over both "
            "gives them (and what depends on them) per kind, never added together.",
        ),
        (False, False, True, False, True, True, True, False),
    )


def _cost_row(name: str, billing: str, f: Figures, semantics: str | None) -> tuple[str, ...]:
    return (
        name,
        billing,
        usd(f.spend) if f.priced else f"{DASH} (no price)" if semantics else DASH,
        f.basis if f.priced else DASH,
        count(f.output_tokens),
        per_million(f.cost_per_million),
        unless_mixed(f, per_million(f.cost_per_million_without_speculation)),
        net_cell(f, semantics),
    )


def speculation_table(report: Report) -> Table:
    rows: list[tuple[str, ...]] = []
    for e in report.endpoints:
        f = e.month
        rows.append(
            (
                e.info.name,
                e.info.engine,
                e.info.method or ("drafts seen" if f.speculating else "none"),
                acceptance_cell(f, e.info.engine),
                acceptance_length_cell(f, e.info.engine),
                ratio(f.breakeven),
                ratio(f.concurrency, 1),
                *_verdict_cells(f),
                count(f.hours_monitored),
            )
        )
    t = report.total
    rows.append(
        (
            "**Total**",
            "",
            "",
            ratio(t.acceptance),
            ratio(t.acceptance_length, 2),
            DASH,
            DASH,
            *_verdict_cells(t),
            count(t.hours_monitored),
        )
    )
    return Table(
        "speculation",
        "Acceptance and the windows in which speculation paid, was a tax, or was uncertain",
        (
            "Endpoint",
            "Engine",
            "Method",
            "Acceptance",
            "Acceptance length",
            "Break-even",
            "Mean concurrency",
            "Windows paid",
            "Windows tax",
            "Windows uncertain",
            "Hours monitored",
        ),
        rows,
        (
            "Acceptance is token-weighted: accepted over proposed draft tokens, summed over the "
            "month (an engine that counts no drafted tokens, SGLang or TGI, has none); the "
            "acceptance length is 1 + accepted tokens per verify step, derived where the "
            "engine does not count verify steps. Break-even acceptance alpha* = c + (B + "
            "h B* q)/(B + B*) at the month's mean concurrency B, with the c, B* and step "
            "overhead h the latest window was assessed with and q = (G - A)/Dt, request-steps "
            "per draft token; none where that h was not recorded (never one at h = 0).",
            "Each window's verdict is the daemon's, as it judged the window (the store counts "
            "them): it paid when even the low end of its speedup's band was above 1, it was a "
            "tax when even the high end was below 1, uncertain when the band straddled 1 (a "
            "measured speedup has no band: above 1 pays). A window that proposed no drafts is "
            "judged too: its steps still paid the proposer's cost (docs/economics.md, "
            '"The floor under h"). Shares '
            "are of the windows judged, per model.",
        ),
        (False, False, False, True, True, True, True, True, True, True, True),
    )


def _verdict_cells(f: Figures) -> tuple[str, str, str]:
    if not f.speculating:
        return (DASH, DASH, DASH)
    if not f.windows_judged:
        return (NOT_RECORDED, NOT_RECORDED, NOT_RECORDED) if f.windows_unrecorded else (DASH,) * 3
    return (
        hours_share(f.windows_pays, f.share_paid),
        hours_share(f.windows_tax, f.share_tax),
        hours_share(f.windows_uncertain, f.share_uncertain),
    )


def basis_table(report: Report) -> Table:
    """How each endpoint's verdicts were reached: per ECONOMICS.md §3b, a verdict is only as
    good as the counterfactual behind it, so the report names it beside the verdicts."""
    rows: list[tuple[str, ...]] = []
    for e in report.endpoints:
        f = e.month
        latest = f.speculating and f.parameters_at is not None
        rows.append(
            (
                e.info.name,
                basis_text(f),
                (f.model_source or NOT_RECORDED) if latest else DASH,
                band_text(f.speedup_band) if latest else DASH,
                ratio(f.step_overhead) if latest else DASH,
                _recorded(f, ratio(f.speedup)) if f.speculating else DASH,
                percent(f.share_uncertain) if f.speculating else DASH,
            )
        )
    t = report.total
    rows.append(("**Total**", basis_text(t), DASH, DASH, DASH, DASH, percent(t.share_uncertain)))
    return Table(
        "basis",
        "How each verdict was reached",
        (
            "Endpoint",
            "Basis (share of windows)",
            "Counterfactual (latest)",
            "Speedup band (latest)",
            "Step overhead h (latest)",
            "Speedup (windows')",
            "Uncertain",
        ),
        rows,
        (
            "Basis: measured (a control endpoint's time per token over this one's, the "
            "verdict's best basis), calibrated (the speedup modelled on a plain-decode curve "
            "fitted to a control or to this endpoint's history before speculation), profile "
            "(a stored profile learned from an A/B or a benchmark sweep), default (configured "
            "B*, or the roofline prior from vLLM's FLOP and byte estimates, and a plausible "
            "range for h: a wide band, often uncertain).",
            "Counterfactual: where the plain-decode step times came from (control, baseline, "
            "profile, sweep, roofline or configured); band and h are the latest window's. "
            "For a better basis than default: give the endpoint a `control:`, keep its "
            "history from before speculation, or reference a `profile:` learned from one A/B "
            "or fitted by `spectax model fit --save-profile`.",
            f"{NOT_RECORDED}: windows stored before spectax kept the basis (store revisions "
            "0004 and 0005): their verdicts are counted where the store kept them, their "
            "basis is not guessed.",
            "Speedup (windows'): the busy time the month's output would have taken without "
            "speculation over the busy time it took, each window's as the daemon assessed it "
            "(measured when it had a control, else modelled with that window's h and B*), "
            "summed: a ratio of sums, never recomputed from the month's counters.",
        ),
        (False, False, False, True, True, True, True),
    )


def overhead_table(report: Report) -> Table:
    items = [(e.info.name, e.month) for e in report.endpoints]
    items.append(("**Total**", report.total))
    if report.total.mixed:
        items += [(kind_total_name(k), now) for k, now, _ in report.by_kind() if not now.empty]
    rows: list[tuple[str, ...]] = []
    for name, f in items:
        speculating = f.speculating
        rows.append(
            (
                name,
                cold_starts_cell(f),
                usd(f.cold_start_usd) if f.priced else DASH,
                usd(f.draft_load_usd) if f.priced and speculating else DASH,
                unless_mixed(f, _recorded(f, usd(f.draft_compute))) if speculating else DASH,
                unless_mixed(f, _recorded(f, usd(f.rejected))) if speculating else DASH,
                unless_mixed(f, usd(f.draft_vram)) if speculating else DASH,
            )
        )
    return Table(
        "overhead",
        "Cold starts and draft overhead",
        (
            "Endpoint",
            "Cold starts",
            "Cold-start cost",
            "of which draft load",
            "Draft compute",
            "Rejected drafts",
            "Draft VRAM",
        ),
        rows,
        (
            "Cold-start cost is charged on serverless endpoints only (load time x GPUs x price); "
            "the draft's weights' share of the load time is speculation's own cost.",
            *(_UNOBSERVED_NOTE if any(f.unobserved_seconds > 0 for _, f in items) else ()),
            "Draft compute and rejected drafts are each window's share of GPU time (drafting; "
            "verifying and drafting tokens that were thrown away) times its busy spend, as the "
            "daemon assessed the window (with its h and B*), summed. The two overlap (drafting "
            "rejected tokens is in both): do not add them. Not recorded: windows stored before "
            "spectax kept them (store revision 0009), never recomputed.",
            "Draft VRAM: spend x draft weight bytes / GPU memory bytes, the memory the draft "
            "holds instead of KV cache (needs gpu_memory_bytes and draft_weight_bytes).",
        ),
        (False, True, True, True, True, True, True),
    )


_UNOBSERVED_NOTE = (
    "Unobserved: across restarts, the time from the last scrape of the old process to the "
    "new one's start (the whole gap when the start is not on the page). What the old process "
    "served then is lost, as no scrape saw it; keep spectax running while the engine "
    "restarts to lose less. Windows stored before store revision 0011 did not record it.",
)


def _recorded(f: Figures, text: str) -> str:
    """A figure summed from the windows' assessments, saying how many windows it lacks."""
    n = f.windows_assessment_unrecorded
    if not n:
        return text
    if not f.assessed_busy_seconds and not f.overhead_priced:
        return NOT_RECORDED_SUMS
    return f"{text} ({n:,} windows not recorded)"


def month_over_month_table(report: Report) -> Table:
    rows: list[tuple[str, ...]] = []
    items: list[tuple[str, Figures | None, Figures | None]] = [
        (e.info.name, e.month, e.previous) for e in report.endpoints
    ]
    items += [(name, None, f) for name, f in sorted(report.previous_only.items())]
    items.append(("**Total**", report.total, report.previous_total))
    items += [(kind_total_name(kind), now, before) for kind, now, before in report.by_kind()]
    for name, now, before in items:
        rows.append(
            (
                name,
                change(_spend(before), _spend(now)),
                change(_of(before, "output_tokens"), _of(now, "output_tokens"), "count"),
                change(_of(before, "cost_per_million"), _of(now, "cost_per_million"), "pm"),
                _net_change(before, now),
                change(_of(before, "acceptance"), _of(now, "acceptance"), "ratio"),
                change(_of(before, "share_tax"), _of(now, "share_tax"), "pct"),
                f"{count(before.hours_monitored) if before else DASH} → "
                f"{count(now.hours_monitored) if now else DASH}",
            )
        )
    previous = report.month.previous()
    return Table(
        "mom",
        f"Month over month: {previous} → {report.month}",
        (
            "Endpoint",
            "Spend",
            "Output tokens",
            "$/M output tokens",
            "Speculation, net",
            "Acceptance",
            "Share of windows in tax",
            "Hours monitored",
        ),
        rows,
        (
            f"{DASH}: no history in that month. Compare the hours monitored before reading a "
            "change in spend or tokens: a month watched in part is not a smaller month.",
        ),
        (False, True, True, True, True, True, True, True),
    )


def _net_change(before: Figures | None, now: Figures | None) -> str:
    if (before is not None and before.mixed) or (now is not None and now.mixed):
        return BY_KIND
    return change(_of(before, "savings"), _of(now, "savings"))


def _spend(f: Figures | None) -> float | None:
    return float(f.spend) if f is not None and f.priced else None


def _of(f: Figures | None, name: str) -> float | None:
    value = getattr(f, name) if f is not None else None
    return None if value is None else float(value)


def ordered_recommendations(report: Report) -> list[Recommendation]:
    """Changes first, the most dollars at stake first; then the endpoints to keep as they are."""
    return sorted(
        report.recommendations,
        key=lambda r: (r.action == "keep", -(r.usd_at_stake or 0.0), r.endpoint, r.action),
    )


def recommendations_table(report: Report) -> Table:
    rows: list[tuple[str, ...]] = [
        (
            r.endpoint,
            ACTION_LABELS[r.action],
            r.title,
            r.basis,
            r.confidence,
            stake_text(r),
        )
        for r in ordered_recommendations(report)
    ]
    return Table(
        "recommendations",
        "Recommendations",
        (
            "Endpoint",
            "Action",
            "Recommendation",
            "Basis",
            "Confidence",
            "Dollars at stake this month",
        ),
        rows,
        (
            "Basis: the one most of the endpoint's windows were judged on; confidence high "
            "when nearly all of them were decided (paid or a tax) on a basis better than the "
            "defaults, low (a guess) on defaults alone or when most were uncertain.",
        ),
        (False, False, False, False, False, True),
    )


def all_tables(report: Report) -> list[Table]:
    return [
        cost_table(report),
        speculation_table(report),
        basis_table(report),
        overhead_table(report),
        month_over_month_table(report),
    ]


def coverage_lines(report: Report) -> list[str]:
    """What the report covers, in words: period, history, basis."""
    month = report.month
    lines = [
        f"Month {month} (UTC): {month.start:%Y-%m-%d} to {month.end:%Y-%m-%d}, "
        f"{month.hours:,} hours."
    ]
    if report.first is not None and report.last is not None:
        monitored = max((e.month.hours_monitored for e in report.endpoints), default=0)
        lines.append(
            f"History from {report.first:%Y-%m-%d %H:%M} to {report.last:%Y-%m-%d %H:%M} UTC; "
            f"{len(report.endpoints)} endpoint(s), up to {monitored:,} of {month.hours:,} hours "
            "monitored per endpoint."
        )
    if report.endpoints:
        basis = report.total.basis if report.total.priced else "none (no endpoint has a price)"
        lines.append(
            f"Spend basis: {basis}. Estimated spend is the price-table estimate (GPU price x "
            "GPUs x time; serverless endpoints only while busy, plus cold starts); billed "
            "spend replaces it once a billing source reports a final bill."
        )
    return lines
