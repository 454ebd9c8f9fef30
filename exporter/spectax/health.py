"""The health of one remote thing (an endpoint, a billing source, the store): whether its
last attempt succeeded, and the rule that a failure is logged once and the recovery once;
and why an endpoint's scrape failed (`ScrapeError`, one of `REASONS`).

One implementation, as Home Assistant's DataUpdateCoordinator has it: a flapping source
writes two lines per outage, not one per attempt.
"""

from __future__ import annotations

import logging
from typing import Literal

Reason = Literal["timeout", "connection", "http_status", "too_large", "parse", "decode"]
#: Why a scrape failed: the `reason` label of spectax_scrape_failures_total.
REASONS: tuple[Reason, ...] = (
    "timeout",
    "connection",
    "http_status",
    "too_large",
    "parse",
    "decode",
)


class ScrapeError(Exception):
    """An endpoint's page could not be had or read: a `reason` from REASONS, and a message
    that never includes credentials. The fetch raises it; a monitor shows it as its health
    (fleet sources make one for their endpoints too)."""

    def __init__(self, reason: Reason, message: str):
        self.reason: Reason = reason
        super().__init__(message)


class LogOnce:
    """Logs the first failure of a run of failures, and the first success after it."""

    def __init__(self, logger: logging.Logger, kind: str, name: str | None = None):
        """Lines read `<kind> <name>: <message>`, or `<kind>: <message>` without a name
        ("endpoint %s: ..." is what the JSON log format takes an endpoint's name from)."""
        self._log = logger
        self._prefix = f"{kind} %s: " if name is not None else f"{kind}: "
        self._args: tuple[object, ...] = (name,) if name is not None else ()
        self.failing = False

    def failed(self, message: str, *args: object, level: int = logging.WARNING) -> bool:
        """Log `message` if this is the first failure in a row; True if it was."""
        if self.failing:
            return False
        self.failing = True
        self._log.log(level, self._prefix + message, *self._args, *args)
        return True

    def recovered(self, message: str, *args: object) -> bool:
        """Log `message` at info if the last attempt had failed; True if it had."""
        if not self.failing:
            return False
        self.failing = False
        self._log.info(self._prefix + message, *self._args, *args)
        return True
