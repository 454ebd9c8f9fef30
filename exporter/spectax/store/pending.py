"""What the store writer writes: one endpoint's closed-window rows and the cursor that goes
with them, and its JSON form, the line the spool and the quarantine file keep.

Its own room because three rooms speak of it and none owns it: the endpoints make
them, the write queue (`spool`) holds them, the quarantine keeps the ones the database
refused.
"""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from typing import Any

from spectax.engines.base import EngineSample
from spectax.store.cursor import decode_sample, encode_sample


class PendingWrite:
    """Rows of closed windows of one endpoint, and the cursor that goes with them."""

    __slots__ = ("cursor", "endpoint", "rows")

    def __init__(
        self,
        endpoint: str,
        rows: list[dict[str, Any]],
        cursor: tuple[float, EngineSample] | None,
    ):
        self.endpoint = endpoint
        self.rows = rows
        self.cursor = cursor

    def to_json(self) -> str:
        cursor = None
        if self.cursor is not None:
            cursor = [self.cursor[0], encode_sample(self.cursor[1])]
        rows = [{k: _encode(v) for k, v in row.items()} for row in self.rows]
        return json.dumps({"endpoint": self.endpoint, "rows": rows, "cursor": cursor})

    @classmethod
    def from_json(cls, line: str) -> PendingWrite:
        data = json.loads(line)
        cursor = None
        if data["cursor"] is not None:
            cursor = (float(data["cursor"][0]), decode_sample(data["cursor"][1]))
        rows = [{k: _decode(k, v) for k, v in row.items()} for row in data["rows"]]
        return cls(data["endpoint"], rows, cursor)

    def absorb(self, later: PendingWrite) -> None:
        """Take in a later write of the same endpoint, as if written after this one: a
        window's later rows replace its earlier ones (a window only grows), the later cursor
        wins. So an endpoint's open window, queued at every scrape, waits once, not once per
        scrape."""
        rows = {(row["model"], row["start"]): row for row in self.rows}
        rows.update(((row["model"], row["start"]), row) for row in later.rows)
        self.rows = list(rows.values())
        if later.cursor is not None and (self.cursor is None or later.cursor[0] >= self.cursor[0]):
            self.cursor = later.cursor


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, Decimal):
        return {"decimal": str(value)}
    return value


def _decode(key: str, value: Any) -> Any:
    if isinstance(value, dict):
        if "datetime" in value:
            return datetime.fromisoformat(value["datetime"])
        if "decimal" in value:
            return Decimal(value["decimal"])
    return value
