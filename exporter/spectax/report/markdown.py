"""The report as Markdown, for tickets: the same tables as the HTML, without charts."""

from __future__ import annotations

from spectax.report.build import Report
from spectax.report.capacity_table import capacity_table
from spectax.report.cells import stake_phrase
from spectax.report.latency_table import latency_table
from spectax.report.load_curve_table import load_curve_table
from spectax.report.tables import (
    Table,
    all_tables,
    coverage_lines,
    ordered_recommendations,
    recommendations_table,
)


def render_markdown(report: Report) -> str:
    out = [f"# spectax monthly cost review: {report.month}", ""]
    out += [*coverage_lines(report), ""]
    if report.empty:
        out += [*empty_lines(report), ""]
        return "\n".join(out)
    out += ["## Recommendations", ""]
    if report.recommendations:
        out += [*_table(recommendations_table(report)), ""]
        for r in ordered_recommendations(report):
            out.append(f"### {r.endpoint}: {r.title} ({stake_phrase(r)})")
            out.append("")
            out += [f"- {line}" for line in r.evidence]
            out.append("")
    else:
        out += [no_recommendation_line(report), ""]
    for table in [
        *all_tables(report),
        load_curve_table(report),
        latency_table(report),
        capacity_table(report.capacity),
    ]:
        out += [f"## {table.title}", "", *_table(table), ""]
        out += [f"{note}\n" for note in table.notes]
    if report.without_history:
        out += ["## Endpoints without history this month", ""]
        out += [f"- {name}" for name in report.without_history] + [""]
    return "\n".join(out).rstrip("\n") + "\n"


def empty_lines(report: Report) -> list[str]:
    lines = [
        f"**No history in the store for {report.month}.** Nothing was spent or served "
        "that spectax saw, so there is nothing to compare or recommend.",
        "",
        "Check that the daemon was running and writing to this store during the month "
        "(`spectax export --granularity day --since ...` lists what is stored), or pick "
        "another month.",
    ]
    if report.without_history:
        lines += ["", "Endpoints without history this month: " + ", ".join(report.without_history)]
    return lines


def no_recommendation_line(report: Report) -> str:
    if not report.total.speculating:
        return (
            f"No endpoint used speculative decoding in {report.month}: there is nothing to "
            "keep, tune or turn off. The tables below show spend and cost per million tokens."
        )
    return "Nothing to recommend."


def _table(table: Table) -> list[str]:
    def cells(values: tuple[str, ...]) -> str:
        return "| " + " | ".join(v.replace("|", "\\|") for v in values) + " |"

    numeric = table.numeric or (False,) * len(table.headers)
    rule = "|" + "|".join("---:" if n else "---" for n in numeric) + "|"
    return [cells(table.headers), rule, *(cells(row) for row in table.rows)]
