"""The calendar month a report covers: UTC, [first day 00:00, first day of the next month)."""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


@dataclass(frozen=True, slots=True, order=True)
class Month:
    year: int
    month: int

    @classmethod
    def parse(cls, text: str) -> Month:
        """`YYYY-MM`; raises ValueError with a message fit for the command line."""
        match = _MONTH.match(text.strip())
        if not match or not 1 <= int(match.group(2)) <= 12:
            raise ValueError(f"{text!r} is not a month: give YYYY-MM, for example 2026-05")
        return cls(int(match.group(1)), int(match.group(2)))

    @classmethod
    def of(cls, t: datetime) -> Month:
        t = t.astimezone(UTC)
        return cls(t.year, t.month)

    def __str__(self) -> str:
        return f"{self.year:04d}-{self.month:02d}"

    @property
    def start(self) -> datetime:
        return datetime(self.year, self.month, 1, tzinfo=UTC)

    @property
    def end(self) -> datetime:
        return self.next().start

    @property
    def days(self) -> int:
        return calendar.monthrange(self.year, self.month)[1]

    @property
    def hours(self) -> int:
        return self.days * 24

    def dates(self) -> list[date]:
        first = self.start.date()
        return [first + timedelta(days=i) for i in range(self.days)]

    def previous(self) -> Month:
        return Month(self.year - 1, 12) if self.month == 1 else Month(self.year, self.month - 1)

    def next(self) -> Month:
        return Month(self.year + 1, 1) if self.month == 12 else Month(self.year, self.month + 1)
