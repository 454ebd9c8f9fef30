"""The monthly cost review (`spectax report`): figures from the stored rollups, recommendations,
and the HTML, Markdown and CSV renderings. See spectax.report.spend for the billing seam."""

from spectax.report.build import EndpointReport, Report, build_report
from spectax.report.period import Month
from spectax.report.spend import EstimatedSpend, Spend, SpendSource

__all__ = [
    "EndpointReport",
    "EstimatedSpend",
    "Month",
    "Report",
    "Spend",
    "SpendSource",
    "build_report",
]
