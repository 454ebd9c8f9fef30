"""History: closed windows and scrape cursors, in SQLite (default) or PostgreSQL."""

from spectax.store.models import Cursor, WindowRow
from spectax.store.repository import Restored, Store, StoreError

__all__ = ["Cursor", "Restored", "Store", "StoreError", "WindowRow"]
