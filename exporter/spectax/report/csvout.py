"""The report as CSV, for spreadsheets: one row per endpoint and UTC day with history.

Money is exact where the store is exact (spend, cold-start cost: decimal
strings); modelled figures are floats. Undefined figures are empty cells,
never a 0 that looks real.
"""

from __future__ import annotations

import csv
import io
from decimal import Decimal

from spectax.report.build import Report
from spectax.report.figures import Figures, basis_text

COLUMNS = (
    "date",
    "endpoint",
    "billing_mode",
    "spend_usd",
    "spend_basis",
    "output_tokens",
    "prompt_tokens",
    "cost_per_million_output_tokens_usd",
    "cost_per_million_output_tokens_no_speculation_usd",
    "speculation_net_usd",
    "speculation_net_meaning",
    "acceptance_ratio",
    "breakeven_acceptance_ratio",
    "concurrency_requests",
    "hours_monitored",
    "windows_pays",
    "windows_tax",
    "windows_uncertain",
    "windows_verdict_not_recorded",
    "verdict_basis",
    "model_source",
    "speedup_low_ratio",
    "speedup_high_ratio",
    "step_overhead_ratio",
    "cold_starts",
    "cold_start_usd",
    "draft_load_usd",
    "draft_compute_usd",
    "rejected_usd",
    "draft_vram_usd",
    # Last, so that readers by position keep their columns: the mixed fleet's.
    "engine",
    "acceptance_length_tokens",
    # The windows' own speedup, summed (busy time without speculation / busy time; 0009).
    "speedup_ratio",
    # Across the day's restarts, the seconds no scrape could see (0011).
    "unobserved_seconds",
)
MEANING = {"capacity": "capacity_freed", "invoice": "invoice", "unknown": "gpu_time_value"}


def render_csv(report: Report) -> str:
    rows = []
    for e in report.endpoints:
        for day, f in e.days.items():
            rows.append((day.isoformat(), e.info.name, e.info.billing_mode or "", f, e))
    rows.sort(key=lambda r: (r[0], r[1]))
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for when, name, mode, f, e in rows:
        writer.writerow(
            [
                when,
                name,
                mode,
                _money(f.spend) if f.priced else "",
                f.basis if f.priced else "",
                f.output_tokens,
                f.prompt_tokens,
                _num(f.cost_per_million),
                _num(f.cost_per_million_without_speculation),
                _num(f.savings),
                MEANING[e.info.semantics] if f.savings is not None else "",
                _num(f.acceptance),
                _num(f.breakeven),
                _num(f.concurrency),
                f.hours_monitored,
                *_hours(f),
                f.cold_starts,
                _money(f.cold_start_usd) if f.priced else "",
                _money(f.draft_load_usd) if f.priced and f.speculating else "",
                _num(f.draft_compute) if f.speculating else "",
                _num(f.rejected) if f.speculating else "",
                _num(f.vram_usd),
                e.info.engine,
                _num(f.acceptance_length),
                _num(f.speedup),
                _num(f.unobserved_seconds),
            ]
        )
    return buffer.getvalue()


def _hours(f: Figures) -> list[object]:
    """The day's counted verdicts, its bases (as in the report) and the counterfactual in force
    at its end; empty cells for an endpoint that does not speculate."""
    if not f.speculating:
        return [""] * 9
    band = f.speedup_band
    return [
        f.windows_pays,
        f.windows_tax,
        f.windows_uncertain,
        f.windows_unrecorded,
        basis_text(f),
        f.model_source or "",
        _num(band[0] if band else None),
        _num(band[1] if band else None),
        _num(f.step_overhead),
    ]


def _money(value: Decimal) -> str:
    return format(value.normalize(), "f") if value else "0"


def _num(value: float | None) -> str:
    return "" if value is None else repr(float(value))
