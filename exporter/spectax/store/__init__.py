"""History: closed windows and scrape cursors, their rollups, and billing lines, in SQLite
(default) or PostgreSQL.

Each concern has its room: `db` (the connection, dialects, upserts), `windows` (window
and cursor writes, restore at start-up), `rollup` (rollups, retention, reading rows back),
`billing` (billing lines, periods and reads), `profiles` (stored step-time profiles),
`load_history` (the windows as the load curve reads them),
`writer` (the daemon's queue, spool and retries). `Store` is all of them in one object,
the one callers use.
"""

from spectax.store.billing_history import BillingHistory
from spectax.store.database import StoreError
from spectax.store.load_history import LoadHistory
from spectax.store.models import Cursor, WindowRow
from spectax.store.profiles import ProfileHistory
from spectax.store.rollup import Rollups
from spectax.store.window_history import WindowHistory, WindowWrite


class Store(WindowHistory, Rollups, BillingHistory, ProfileHistory, LoadHistory):
    """Reading and writing history: `await Store.open(url)`, then any room's methods."""


__all__ = ["Cursor", "Store", "StoreError", "WindowRow", "WindowWrite"]
