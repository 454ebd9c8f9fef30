"""The status page at `/`: what a person reads when Grafana is not at hand.

`history.py` keeps a few hours of figures per endpoint in memory, recorded from the
snapshots `/metrics` reads; `page.py` renders the page from those snapshots and that
history (server-side, inline CSS and SVG, no script); `chart.py` draws the small chart.
Nothing here does I/O: the handler only formats what is already in memory.
"""

from spectax.status.history import StatusHistory
from spectax.status.page import endpoint_states, render_status_page

__all__ = ["StatusHistory", "endpoint_states", "render_status_page"]
