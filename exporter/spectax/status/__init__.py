"""The status page at `/`: what a person reads when Grafana is not at hand.

`history.py` keeps a few hours of figures per endpoint in memory, recorded from the
snapshots `/metrics` reads; `page.py` renders the page from those snapshots and that
history (server-side, inline CSS and SVG, no script); `chart.py` draws the small chart;
`docs.py` renders the runbook and the economics its links open, once, when first read.
Nothing here does I/O per request: the handler only formats what is already in memory.
"""

import functools
from collections.abc import Callable

from spectax.status.docs import PAGES, is_served, page_html
from spectax.status.history import StatusHistory
from spectax.status.page import endpoint_states, render_status_page


def served_documents() -> dict[str, Callable[[], str | None]]:
    """Path -> what renders the HTML of each page this install can serve (`docs.PAGES`)."""
    return {path: functools.partial(page_html, path) for path in PAGES if is_served(path)}


__all__ = ["StatusHistory", "endpoint_states", "render_status_page", "served_documents"]
