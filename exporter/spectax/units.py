"""Units and small value types shared by every room: durations, money precision, UTC time,
names, and the strict base of every configuration model. Defined once, here."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

#: Money is kept to the nano-dollar: amounts are quantized to this before they are summed.
NANO = Decimal("0.000000001")

#: What an endpoint, billing source or account name may look like (a label value, a file name).
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,62}$")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: Any) -> Any:
    """Seconds as a number, or a string such as `15s`, `500ms`, `5m`, `1h`, `3d`."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise ValueError(f"{value!r} is not a duration (examples: 15, 15s, 500ms, 5m, 1h, 3d)")
        return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    return value


#: A positive number of seconds in a configuration file (`15`, `15s`, `5m`, ...).
Duration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]


class InvalidFile(ValueError):
    """A file that fails validation; `problems` lists each one with its path, all at once,
    so one run of `spectax check-config` shows everything wrong."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: {len(problems)} problem(s):\n  " + "\n  ".join(problems))


class StrictModel(BaseModel):
    """A configuration model: unknown keys are errors, values are frozen once read."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def utc(value: datetime) -> datetime:
    """A timezone-aware UTC datetime (naive input is taken as UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def from_timestamp(t: float) -> datetime:
    """Unix seconds as an aware UTC datetime."""
    return datetime.fromtimestamp(t, UTC)


def now_utc() -> datetime:
    return datetime.now(UTC)


def parse_time(text: str) -> datetime:
    """An ISO 8601 / RFC 3339 date or date-time (`Z` allowed); without a zone it is UTC.

    ValueError when it is not one: argparse turns that into its usage error, and billing
    sources into a BillingError naming the value.
    """
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    return utc(datetime.fromisoformat(value))


def floor_time(value: datetime, step: timedelta) -> datetime:
    """`value` rounded down to a multiple of `step` since the Unix epoch (hours, days)."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    steps = (utc(value) - epoch) // step
    return epoch + steps * step


def ceil_time(value: datetime, step: timedelta) -> datetime:
    floored = floor_time(value, step)
    return floored if floored == utc(value) else floored + step


class Span(Protocol):
    """Anything that lasts from `start` to `end`: a billing line or period, a history row."""

    @property
    def start(self) -> datetime: ...

    @property
    def end(self) -> datetime: ...


def overlap(span: Span, start: datetime, end: datetime) -> timedelta:
    """How much of [start, end) `span` covers."""
    return max(timedelta(0), min(span.end, end) - max(span.start, start))


def covers(spans: Iterable[Span], start: datetime, end: datetime) -> bool:
    """Whether the union of `spans` covers [start, end) (an empty span is covered)."""
    reach = start
    for span in sorted(spans, key=lambda s: s.start):
        if span.start > reach:
            break
        reach = max(reach, span.end)
        if reach >= end:
            return True
    return reach >= end
