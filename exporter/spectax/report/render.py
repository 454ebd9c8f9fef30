"""The report as text in one of its formats: HTML (with charts), Markdown or CSV.

Each renderer is imported when it is asked for: matplotlib loads only for HTML.
"""

from __future__ import annotations

from spectax.report.build import Report
from spectax.report.progress import Progress

FORMATS = ("html", "md", "csv")


def render(report: Report, fmt: str, progress: Progress | None = None) -> str:
    if fmt == "md":
        from spectax.report.markdown import render_markdown

        return render_markdown(report)
    if fmt == "csv":
        from spectax.report.csvout import render_csv

        return render_csv(report)
    from spectax.report.charts import charts
    from spectax.report.html import render_html

    if progress is not None:
        progress.add_steps(1)
        progress.advance(label="drawing charts")
    chart_list = charts(report)
    return render_html(report, chart_list)
