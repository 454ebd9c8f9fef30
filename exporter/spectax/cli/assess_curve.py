"""`spectax assess P1 P2 [P3 ...]`: the load curve and the K schedule of a series of pages.

Each two consecutive pages are one window, assessed as `spectax assess` assesses two
(`assess._judge`). The windows are binned by their mean running requests as the daemon
bins its stored windows (`economics.load_curve`), and the K per batch range that follows
comes from `economics.draft_schedule`, as the report's `schedule_k` advice does (issue 34).
This module only gathers and words them: every figure is theirs.

Two pages make one window, so one bin: it is shown, thin, and the schedule beyond it is
the model's, said so. Dollars at stake are those of the span; the 30-day month is the
span's rate carried on, an extrapolation, and says so.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spectax.economics import AssessedWindow
from spectax.economics.draft_schedule import (
    DEFAULT_MAX_NUM_SEQS,
    DraftSchedule,
    batch_schedule,
    draft_schedule,
)
from spectax.economics.k_schedule import schedule_boundaries, straddling
from spectax.economics.load_curve import (
    MIN_BIN_WINDOWS,
    STALL_SHARE,
    LoadBin,
    LoadCurve,
    bin_edge,
    bin_runs,
    load_curve,
    sample_of,
)
from spectax.economics.step_model import BASES
from spectax.load_curve_text import ranges_text, speedup_text, tax_sentence
from spectax.report.cells import usd

#: A month as the at-stake line scales it: 30 days of the span's rate.
MONTH_SECONDS = 30 * 86_400


@dataclass(frozen=True, slots=True)
class PairWindow:
    """One model of one window: two consecutive pages (1-based), its load and conclusion."""

    pages: tuple[int, int]
    seconds: float
    concurrency: float
    verdict: str
    speedup: float | None
    scheduled_k: int | None  # the K a --schedule runs at its load (None: no schedule)
    two_k: bool  # it ran two of the schedule's K (its mean or its drafts say so)


@dataclass(frozen=True, slots=True)
class CurveSection:
    """One model's curve over the series, its schedule and what they rest on."""

    windows: tuple[PairWindow, ...]
    curve: LoadCurve
    schedule: DraftSchedule
    max_num_seqs: int
    priced: bool  # the windows had a span and a price: their dollars are real
    boundaries: tuple[int, ...] | None  # where the --schedule changes K (None: none given)

    def straddles(self, b: LoadBin) -> bool | None:
        """Whether the bin holds batches on both sides of a K change of the schedule run."""
        if self.boundaries is None:
            return None
        return straddling(b.low, b.high, self.boundaries)

    @property
    def basis(self) -> str | None:
        """The weakest basis among the bins the schedule's K rest on."""
        bases = [x.bin.basis for x in self.schedule.lengths if x.k is not None and x.bin.basis]
        return max(bases, key=BASES.index) if bases else None

    @property
    def modelled(self) -> list[list[int]]:
        """[[first, last], ...]: the batch sizes of the schedule no window ran at."""
        seen = {b.low for b in self.curve.bins}
        flags = [low not in seen for low, sizes in bin_runs(self.max_num_seqs) for _ in sizes]
        return [[int(a), int(z)] for a, z, unseen in batch_schedule(flags) if unseen]

    @property
    def month_usd(self) -> float | None:
        """The span's at-stake carried on for 30 days at the same rate (an extrapolation)."""
        stake, seconds = self.schedule.at_stake_usd, self.curve.seconds
        if stake is None or not self.priced or seconds <= 0:
            return None
        return stake * MONTH_SECONDS / seconds


def curve_sections(
    pairs: Sequence[AssessedWindow],
    *,
    engine: str,
    method: str | None,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
    schedule: Sequence[Sequence[int]] | None = None,
    priced: bool = False,
) -> dict[str, CurveSection]:
    """Per model that speculated (a bin with a speedup, as the daemon's curves): its
    windows binned and the schedule that follows."""
    models = sorted({m for p in pairs for m in p.assessments})
    boundaries = schedule_boundaries(schedule) if schedule is not None else None
    sections = {}
    for model in models:
        samples = [s for s in (sample_of(p, model) for p in pairs) if s is not None]
        curve = load_curve(samples)
        if not any(b.speedup is not None for b in curve.bins):
            continue
        sections[model] = CurveSection(
            windows=tuple(_pair_window(i, p, model) for i, p in enumerate(pairs, 1)),
            curve=curve,
            schedule=draft_schedule(curve, engine=engine, method=method, max_num_seqs=max_num_seqs),
            max_num_seqs=max_num_seqs,
            priced=priced,
            boundaries=boundaries,
        )
    return sections


def _pair_window(i: int, pair: AssessedWindow, model: str) -> PairWindow:
    a = pair.assessments[model]
    return PairWindow(
        pages=(i, i + 1),
        seconds=pair.window.seconds,
        concurrency=a.concurrency_requests,
        verdict=a.verdict,
        speedup=a.speedup_in_force,
        scheduled_k=a.scheduled_speculative_tokens,
        two_k=a.schedule_boundary,
    )


# ---------------------------------------------------------------- JSON


def curve_object(s: CurveSection) -> dict[str, Any]:
    """The curve as `--format json` gives it: the figures the text shows, unrounded."""
    curve, stalled = s.curve, set(s.curve.stalls)
    return {
        "windows": [
            {
                "pages": list(w.pages),
                "seconds": w.seconds,
                "concurrency_requests": w.concurrency,
                "running_requests": bin_edge(w.concurrency),
                "verdict": w.verdict,
                "speedup_ratio": w.speedup,
                "scheduled_speculative_tokens": w.scheduled_k,
                "schedule_boundary": w.two_k,
            }
            for w in s.windows
        ],
        "bins": [
            {
                "running_requests": b.low,
                "label": b.label,
                "windows": b.windows,
                "thin": b.thin,
                "seconds": b.seconds,
                "time_share_ratio": b.time_share,
                "concurrency_requests": b.concurrency,
                "speedup_ratio": b.speedup,
                "speedup_low_ratio": b.speedup_band[0] if b.speedup_band else None,
                "speedup_high_ratio": b.speedup_band[1] if b.speedup_band else None,
                "verdict_basis": b.basis,
                "verdict": b.verdict,
                "acceptance_ratio": b.acceptance,
                "position_acceptance_ratio": list(b.position_acceptance),
                "speculation_savings_usd": b.savings_usd if s.priced else None,
                "output_tokens_per_request_second": b.output_rate,
                "draft_tokens_per_step": b.draft_tokens_per_step,
                "stalled": b.low in stalled,
                "schedule_boundary": s.straddles(b),
            }
            for b in curve.bins
        ],
        "crossover_running_requests": curve.crossover_requests,
        "tax_time_share_ratio": curve.tax_time_share,
        "tax_usd": curve.tax_usd if s.priced else None,
        "stalled_running_requests": list(curve.stalls),
    }


def schedule_object(s: CurveSection) -> dict[str, Any]:
    """The K schedule as `--format json` gives it."""
    schedule = s.schedule
    return {
        "bins": [
            {
                "running_requests": x.bin.low,
                "label": x.bin.label,
                "speculative_tokens_running": x.k_running,
                "speculative_tokens": x.k,
                "speedup_ratio": x.speedup,
                "at_stake_usd": x.at_stake_usd if s.priced else None,
            }
            for x in schedule.lengths
        ],
        "ranges": [[int(v) for v in r] for r in schedule.ranges],
        "max_num_seqs": s.max_num_seqs,
        "per_batch": schedule.per_batch,
        "speculative_config": schedule.vllm_config,
        "advice": schedule.advice,
        "verdict_basis": s.basis,
        "windows": sum(b.windows for b in s.curve.bins),
        "thin_bins": [b.low for b in s.curve.bins if b.thin],
        "modelled_batches": s.modelled,
        "seconds": s.curve.seconds,
        "at_stake_usd": schedule.at_stake_usd if s.priced else None,
        "at_stake_month_usd": s.month_usd,
    }


# ---------------------------------------------------------------- text


def curve_lines(s: CurveSection) -> list[str]:
    """The curve's table and what follows from it, for the text output."""
    curve, stalled = s.curve, set(s.curve.stalls)
    n = sum(b.windows for b in curve.bins)
    lines = [
        f"  load curve: {n} window{'s' if n != 1 else ''} (each two consecutive pages),"
        " binned by mean running requests:"
    ]
    header = ["running requests", "windows", "time", "speedup (band, basis)", "acceptance"]
    header += ["per position", "net", "tokens/s/request", "drafted/step"]
    if s.boundaries is not None:
        header.append("K in force")
    rows = [header]
    for b in curve.bins:
        label = b.label + (" (stalled)" if b.low in stalled else "")
        if s.straddles(b):
            label += " (straddles a K change)"
        row = [label, f"{b.windows}" + (" (thin)" if b.thin else ""), f"{b.time_share:.0%}"]
        row += [speedup_text(b), _ratio(b.acceptance), _positions(b.position_acceptance)]
        row += [_usd(b.savings_usd if s.priced else None)]
        row += ["-" if b.output_rate is None else f"{b.output_rate:.4g}"]
        row += [_ratio(b.draft_tokens_per_step)]
        if s.boundaries is not None:
            row.append(_scheduled_k(s, b))
        rows.append(row)
    lines += _table(rows)
    lines.append(f"  crossover: {_crossover_text(s)}")
    if curve.stalls:
        shown = ", ".join(b.label for b in curve.bins if b.low in stalled)
        lines.append(
            f"  stalled: {shown}: output tokens per second per request under {STALL_SHARE:g}"
            " of both neighbouring bins', as at a K schedule's boundary"
        )
    return lines


def schedule_lines(s: CurveSection) -> list[str]:
    """The K per bin, the config that applies it, its basis, confidence and stake."""
    schedule = s.schedule
    lines = [
        "  K schedule: each bin's best K at its load, with the h its own speedup implies;"
        " a batch size no window ran at is modelled from the bin below"
    ]
    rows = [["running requests", "K ran", "K", "speedup at K", "at stake"]]
    for x in schedule.lengths:
        rows.append(
            [
                x.bin.label + (" (thin)" if x.bin.thin else ""),
                _int(x.k_running),
                _int(x.k),
                _ratio(x.speedup),
                _usd(x.at_stake_usd if s.priced else None),
            ]
        )
    lines += _table(rows)
    lines.append(f"  K by batch size: {ranges_text(schedule.ranges)} (up to {s.max_num_seqs})")
    config = schedule.vllm_config
    if config:
        lines.append(
            f"  vLLM: --speculative-config '{json.dumps(config)}' (vLLM 0.32; keep your other"
            f" keys; written out to batch {s.max_num_seqs}: --max-num-seqs N for another"
            " engine maximum)"
        )
    lines.append(f"  advice: {schedule.advice}")
    lines.append(f"  {_confidence_text(s)}")
    lines.append(f"  {_stake_text(s)}")
    return lines


def _crossover_text(s: CurveSection) -> str:
    curve = s.curve
    tax = tax_sentence(curve, "the time", lambda v: _usd(v if s.priced else None))
    if tax is not None:
        return f"{curve.crossover_requests} running requests: {tax}"
    verdicts = {b.verdict for b in curve.bins}
    if "pays" not in verdicts:
        return "none: no bin paid (a band wholly above 1), so none turned into a tax"
    return "none: no bin above one that paid is a tax (a band wholly below 1)"


def _confidence_text(s: CurveSection) -> str:
    bins = s.curve.bins
    thin = [b.label for b in bins if b.thin]
    windows = sum(b.windows for b in bins)
    text = (
        f"basis: {s.basis or 'none'} (the weakest of its bins'); confidence: {windows}"
        f" window{'s' if windows != 1 else ''} in {len(bins)} bin{'s' if len(bins) != 1 else ''}"
    )
    if thin:
        text += f", {len(thin)} thin (under {MIN_BIN_WINDOWS} windows: {', '.join(thin)})"
    modelled = s.modelled
    if modelled:
        spans = ", ".join(f"{a}" if a == z else f"{a}-{z}" for a, z in modelled)
        text += f"; modelled, no window ran there: batches {spans}"
    return text


def _stake_text(s: CurveSection) -> str:
    stake = s.schedule.at_stake_usd
    if not s.priced or stake is None:
        return (
            "at stake: - (unpriced: dollars need the span, --seconds S or the files' times,"
            " and a price, --usd-per-hour X)"
            if not s.priced
            else "at stake: - (no bin's K was chosen from counts)"
        )
    seconds = s.curve.seconds
    return (
        f"at stake: {_usd(stake)} over the {seconds:g} s span; {_usd(s.month_usd)} over a"
        f" 30-day month at this rate (an extrapolation from {seconds:g} s of pages)"
    )


def _scheduled_k(s: CurveSection, b: LoadBin) -> str:
    """The K the schedule ran for the bin's windows, and how many ran two of them."""
    mine = [w for w in s.windows if bin_edge(w.concurrency) == b.low]
    ks = sorted({w.scheduled_k for w in mine if w.scheduled_k is not None})
    two = sum(w.two_k for w in mine)
    shown = ", ".join(str(k) for k in ks) or "-"
    return shown + (f" ({two} ran two K)" if two else "")


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell, indented under their section."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "    " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    ]


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _int(value: int | None) -> str:
    return "-" if value is None else str(value)


def _positions(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:.2f}" for v in values) + "]" if values else "-"


def _usd(value: float | None) -> str:
    """Signed dollars, to the cent from $1 and to a hundredth of a cent below: the span
    of a few pages is often worth less than a cent."""
    if value is None:
        return "-"
    shown = usd(value, 2 if abs(value) >= 1 else 4)
    return "+" + shown if value > 0 and shown.strip("$0.,") else shown
