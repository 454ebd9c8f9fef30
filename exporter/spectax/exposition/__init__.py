"""What `/metrics` serves: the catalog of families, the collector, the fast text encoder.

- :mod:`spectax.exposition.families`: every family's name, type, help and labels.
- :mod:`spectax.exposition.collector`: which samples the snapshots give them.
- :mod:`spectax.exposition.text`: the text format written directly, cached per snapshot.
"""

from spectax.exposition.collector import LoadCurves, ReloadStatus, SnapshotCollector, StoreStatus
from spectax.exposition.families import FAMILIES, Family
from spectax.exposition.text import Page, TextEncoder

__all__ = [
    "FAMILIES",
    "Family",
    "LoadCurves",
    "Page",
    "ReloadStatus",
    "SnapshotCollector",
    "StoreStatus",
    "TextEncoder",
]
