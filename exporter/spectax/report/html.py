"""The report as one self-contained HTML file: inline CSS and SVG, no script, nothing fetched."""

from __future__ import annotations

import re
from html import escape

from spectax import __version__
from spectax.report.build import Report
from spectax.report.capacity_table import capacity_table
from spectax.report.cells import stake_phrase
from spectax.report.charts import Chart, charts
from spectax.report.latency_table import latency_table
from spectax.report.load_curve_table import load_curve_table
from spectax.report.markdown import empty_lines, no_recommendation_line
from spectax.report.tables import (
    ACTION_LABELS,
    Table,
    all_tables,
    coverage_lines,
    ordered_recommendations,
    recommendations_table,
)

CARDS_OPEN = 12  # more recommendations than this: their evidence starts folded

_CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       margin: 24px auto; max-width: 1180px; padding: 0 16px; color: #1b1b1b; background: #fff; }
h1 { font-size: 24px; margin: 0 0 6px; }
h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
p.meta { margin: 2px 0; color: #444; }
table { border-collapse: collapse; width: 100%; margin: 8px 0; font-size: 13px; }
th, td { border-bottom: 1px solid #e4e4e4; padding: 5px 8px; text-align: left;
         vertical-align: top; }
th { background: #f5f6f8; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.scroll { overflow-x: auto; }
tr.total td { font-weight: 600; border-top: 2px solid #bbb; }
p.note { color: #555; font-size: 12.5px; margin: 4px 0; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(340px, 1fr)); gap: 12px; }
.card { border: 1px solid #ddd; border-left: 5px solid #9e9e9e; border-radius: 4px;
        padding: 10px 12px; }
.card.keep { border-left-color: #2e7d32; }
.card.turn_off { border-left-color: #c62828; }
.card.change_k, .card.schedule_k,
.card.disable_above, .card.route_high_temperature { border-left-color: #ef6c00; }
.card h3 { font-size: 15px; margin: 0 0 4px; }
summary { cursor: pointer; margin: 6px 0 10px; color: #333; }
.card .stake { font-weight: 600; margin: 0 0 6px; }
.card ul { margin: 0; padding-left: 18px; font-size: 13px; color: #333; }
.chart { margin: 10px 0 18px; }
.chart svg { width: 100%; max-width: 980px; height: auto; }
.empty { padding: 14px; background: #fafafa; border: 1px dashed #ccc; color: #555; }
footer { margin-top: 32px; color: #777; font-size: 12px; }
/* Printed (the README: print the HTML to PDF from a browser), every column fits A4 and
   Letter: no scroll box (it printed its scroll bars and cut off the columns past it). */
@media print {
  @page { margin: 12mm; }
  body { font-size: 10px; margin: 0; max-width: none; padding: 0; }
  h1 { font-size: 18px; }
  h2 { font-size: 14px; margin: 16px 0 6px; break-after: avoid; }
  .scroll { overflow: visible; }
  table { font-size: 8px; width: 100%; }
  thead { display: table-header-group; }
  tr, .card, .chart { break-inside: avoid; }
  th, td { padding: 2px 3px; }
  td:not(.num) { overflow-wrap: anywhere; }
  p.note, .card ul { font-size: 8.5px; }
  .cards { display: block; }
  .card { margin: 0 0 8px; }
  .chart svg { max-width: 100%; }
  details > summary { display: none; }
}
"""


def render_html(report: Report, chart_list: list[Chart] | None = None) -> str:
    title = f"spectax monthly cost review: {report.month}"
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        f"<h1>{escape(title)}</h1>",
        *(f'<p class="meta">{escape(line)}</p>' for line in coverage_lines(report)),
    ]
    if report.empty:
        out.append('<div class="empty">')
        out += [f"<p>{_inline(line)}</p>" for line in empty_lines(report) if line]
        out.append("</div>")
    else:
        out += _recommendations(report)
        tables = all_tables(report)
        out += _table(tables[0])
        out += _charts(chart_list if chart_list is not None else charts(report))
        for table in [*tables[1:], load_curve_table(report), capacity_table(report.capacity)]:
            out += _table(table)
        out += _table(latency_table(report))
        if report.without_history:
            out.append("<h2>Endpoints without history this month</h2>")
            out.append(f"<p>{escape(', '.join(report.without_history))}</p>")
    out += [
        f"<footer>spectax {escape(__version__)}: figures recomputed from the stored hourly and "
        "daily sums (docs/economics.md explains each). Self-contained: no scripts, nothing "
        "loaded from the network."
        "</footer>",
        "</body>",
        "</html>",
    ]
    return "\n".join(out) + "\n"


def _recommendations(report: Report) -> list[str]:
    if not report.recommendations:
        return ["<h2>Recommendations</h2>", f"<p>{escape(no_recommendation_line(report))}</p>"]
    out = _table(recommendations_table(report))
    many = len(report.recommendations) > CARDS_OPEN
    out.append("<details>" if many else "<details open>")
    out.append(f"<summary>The evidence behind each ({len(report.recommendations)})</summary>")
    out.append('<div class="cards">')
    for r in ordered_recommendations(report):
        out += [
            f'<div class="card {escape(r.action)}">',
            f"<h3>{escape(r.endpoint)}: {escape(r.title)}</h3>",
            f'<p class="stake">{escape(ACTION_LABELS[r.action])} · {escape(stake_phrase(r))}</p>',
            "<ul>",
            *(f"<li>{escape(line)}</li>" for line in r.evidence),
            "</ul>",
            "</div>",
        ]
    out += ["</div>", "</details>"]
    return out


def _charts(chart_list: list[Chart]) -> list[str]:
    out = ["<h2>Charts</h2>"]
    for chart in chart_list:
        out.append(f'<div class="chart" id="chart-{escape(chart.key)}">')
        out.append(f"<h3>{escape(chart.title)}</h3>")
        if chart.svg is None:
            out.append(f'<p class="empty">{escape(chart.empty)}</p>')
        else:
            out.append(chart.svg)
        out.append("</div>")
    return out


def _table(table: Table) -> list[str]:
    numeric = table.numeric or (False,) * len(table.headers)

    def cls(i: int) -> str:
        return ' class="num"' if numeric[i] else ""

    out = [f"<h2>{escape(table.title)}</h2>", '<div class="scroll"><table>', "<thead><tr>"]
    out += [f"<th{cls(i)}>{escape(h)}</th>" for i, h in enumerate(table.headers)]
    out.append("</tr></thead><tbody>")
    for row in table.rows:
        is_total = row[0].startswith("**")
        out.append('<tr class="total">' if is_total else "<tr>")
        out += [f"<td{cls(i)}>{_inline(cell)}</td>" for i, cell in enumerate(row)]
        out.append("</tr>")
    out.append("</tbody></table></div>")
    out += [f'<p class="note">{escape(note)}</p>' for note in table.notes]
    return out


def _inline(text: str) -> str:
    """Escape, then turn the Markdown bits the tables use (**bold**, `code`) into HTML."""
    html = escape(text)
    html = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", html)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", html)
