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

_TIMES = frozenset(("start", "end"))


class PendingWrite:
    """Rows of closed windows of one endpoint, and the cursor that goes with them."""

    __slots__ = ("_cursor", "_encoded", "endpoint", "rows")
    _cursor: tuple[float, EngineSample] | None
    _encoded: tuple[float, str] | None  # (time, sample as JSON text): not decoded yet

    def __init__(
        self,
        endpoint: str,
        rows: list[dict[str, Any]],
        cursor: tuple[float, EngineSample] | None,
    ):
        self.endpoint = endpoint
        self.rows = rows
        self.cursor = cursor

    @property
    def cursor(self) -> tuple[float, EngineSample] | None:
        """The cursor, its sample decoded on first use: a write read back from the spool
        keeps it as text until then (decoding was 70 % of reading a spool back, and start-up
        needs only each endpoint's latest: `cursor_time` orders them)."""
        if self._encoded is not None:
            self._cursor = (self._encoded[0], decode_sample(self._encoded[1]))
            self._encoded = None
        return self._cursor

    @cursor.setter
    def cursor(self, cursor: tuple[float, EngineSample] | None) -> None:
        self._cursor, self._encoded = cursor, None

    @property
    def cursor_time(self) -> float | None:
        """When the cursor was observed, without decoding its sample."""
        if self._encoded is not None:
            return self._encoded[0]
        return None if self._cursor is None else self._cursor[0]

    @property
    def stored_cursor(self) -> tuple[float, EngineSample | str] | None:
        """The cursor as the store takes it, its sample still the spool's text when it is:
        encoding it again took half of writing a spool back (bench/spool_startup.py)."""
        return self._encoded if self._encoded is not None else self._cursor

    def to_json(self) -> str:
        cursor: list[Any] | None = None
        if self._encoded is not None:
            cursor = list(self._encoded)
        elif self._cursor is not None:
            cursor = [self._cursor[0], encode_sample(self._cursor[1])]
        rows = [{k: _encode(v) for k, v in row.items()} for row in self.rows]
        return json.dumps({"endpoint": self.endpoint, "rows": rows, "cursor": cursor})

    @classmethod
    def from_json(cls, line: str) -> PendingWrite:
        data = json.loads(line)
        rows = [{k: _decode(k, v) for k, v in row.items()} for row in data["rows"]]
        write = cls(data["endpoint"], rows, None)
        if data["cursor"] is not None:
            observed, sample = data["cursor"]
            if not isinstance(sample, str):
                raise TypeError("the cursor's sample is not a string")
            write._encoded = (float(observed), sample)
        return write

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


def record_rows(line: bytes) -> int:
    """The rows a spool line holds, or ValueError saying why it cannot be written back: the
    shape `PendingWrite.to_json` writes (an endpoint, rows of columns with their times
    encoded, a cursor or null), so that no line can stop a start-up later."""
    try:
        data = json.loads(line)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"not JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict) or set(data) != {"endpoint", "rows", "cursor"}:
        raise ValueError("not a spool record: want an object of endpoint, rows and cursor")
    cursor, rows = data["cursor"], data["rows"]
    if not isinstance(data["endpoint"], str) or not isinstance(rows, list):
        raise ValueError("not a spool record: endpoint must be a string, rows a list")
    if cursor is not None and not (
        isinstance(cursor, list)
        and len(cursor) == 2
        and isinstance(cursor[0], int | float)
        and isinstance(cursor[1], str)
    ):
        raise ValueError("not a spool record: cursor must be null or [time, sample]")
    for row in rows:
        if not isinstance(row, dict):
            raise ValueError("not a spool record: a row is not an object")
        if not all(isinstance(row[t], dict) and "datetime" in row[t] for t in _TIMES & row.keys()):
            raise ValueError("not a spool record: a row's start or end is not a time")
    return len(rows) or 1
