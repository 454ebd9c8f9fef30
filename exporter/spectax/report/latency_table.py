"""The report's latency table: p50/p95/p99 per endpoint and metric over the month, the
ratio with against without speculation, and the basis of each figure (report.latency_figures)."""

from __future__ import annotations

from spectax.economics.latency import bucket_words
from spectax.pipeline.quantiles import Quantiles
from spectax.report.build import Report
from spectax.report.latency_figures import DASH, latency_verdict_text
from spectax.report.tables import Table

_METRICS = (
    ("tpot", "TPOT"),
    ("itl", "inter-token"),
    ("ttft", "TTFT"),
    ("e2e", "end to end"),
)


def latency_table(report: Report) -> Table:
    rows: list[tuple[str, ...]] = []
    for e in report.endpoints:
        f = e.latency
        if f is None:
            continue
        for metric, name in _METRICS:
            found = f.quantiles.get(metric)
            if found is None:
                continue
            ratio = f.ratio(metric, "p99")
            rows.append(
                (
                    e.info.name,
                    name,
                    *(_cell(found, label) for label in ("p50", "p95", "p99")),
                    DASH if ratio is None else f"{ratio:.2f}x",
                    _basis(f.basis, f.control) if ratio is not None else DASH,
                )
            )
        verdict = latency_verdict_text(f)
        if verdict != DASH:
            rows.append((e.info.name, f"**{verdict}**", "", "", "", "", ""))
    if not rows:
        rows.append(
            (
                "No latency histogram buckets in this month's history (stored before "
                "migration 0007, or an engine that gives none)",
                *("",) * 6,
            )
        )
    return Table(
        "latency",
        "Latency: p50, p95 and p99 over the month, with against without speculation",
        ("Endpoint", "Metric", "p50", "p95", "p99", "p99 with / without", "Basis"),
        rows,
        (
            "Quantiles are measured: the month's summed histogram buckets (each endpoint's "
            "models together), interpolated as Prometheus' histogram_quantile does; a rank "
            "in the +Inf bucket reads ≥ the largest finite bound. TPOT is each request's time "
            "per output token, inter-token the time between two tokens, TTFT the time to the "
            "first token.",
            "With / without: measured is the quantile against the control endpoint's over the "
            "same days (no speculation there); modelled (no control) is TPOT only, 1 / the "
            "month's speedup (its windows' own, summed), the same for every percentile: a "
            "tail modelled from means, not measured. Above 1, speculation makes it slower.",
        ),
        (False, False, True, True, True, True, False),
    )


def _cell(found: Quantiles, label: str) -> str:
    """The quantile in ms; in the +Inf bucket, "≥" its lower bound ("≥ 80 s"): the value
    shown there is the largest finite bound, not a measurement (80,000.0 ms read as one)."""
    bucket = found.bucket(label)
    if bucket is not None and found.beyond_finite(label):
        return bucket_words(bucket)
    seconds = found.by_label()[label]
    return DASH if seconds is None else f"{seconds * 1000:,.1f} ms"


def _basis(basis: str | None, control: str | None) -> str:
    if basis == "measured":
        return f"measured against {control}"
    return "modelled from the windows' speedup" if basis == "modeled" else DASH
