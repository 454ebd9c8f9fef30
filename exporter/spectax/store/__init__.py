"""History: closed windows and scrape cursors, in SQLite (default) or PostgreSQL."""

from spectax.store.models import Cursor, WindowRow
from spectax.store.repository import Store, StoreError

__all__ = ["Cursor", "Store", "StoreError", "WindowRow"]
