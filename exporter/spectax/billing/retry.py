"""Retries for billing reads: exponential backoff with full jitter, Retry-After honoured.

Every attempt and every wait fits in the read's deadline: a provider that asks
for a longer pause than the deadline leaves is not waited for (the read fails
now, and the next scheduled read tries again).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from spectax.billing.types import BillingError

T = TypeVar("T")
log = logging.getLogger(__name__)
MAX_RETRY_AFTER_SECONDS = 3600.0


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    base: float = 1.0  # seconds before the first retry, before jitter
    cap: float = 60.0  # the longest single wait
    rng: Callable[[], float] = random.random

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """The wait before attempt `attempt + 1` (attempt counts from 1)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), MAX_RETRY_AFTER_SECONDS)
        ceiling = min(self.cap, self.base * float(2 ** (attempt - 1)))
        return ceiling * float(self.rng())  # "full jitter"


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a Retry-After header: delay-seconds or an HTTP-date (RFC 9110)."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = now if now is not None else datetime.now(UTC).timestamp()
    return max(0.0, when.timestamp() - current)


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    deadline: float | None = None,
    what: str = "billing read",
) -> T:
    """Run `attempt` until it succeeds, raises a non-retryable BillingError, runs out of
    attempts, or the next wait would pass `deadline` (a `time.monotonic()` value)."""
    tries, started = 0, time.monotonic()
    while True:
        tries += 1
        try:
            return await attempt()
        except BillingError as exc:
            if not exc.retryable:
                raise
            # What was tried goes into the message: a bare error after 14 s (issue 17)
            # told the operator neither that it was retried nor for how long.
            tried = f"{tries} attempt(s) over {time.monotonic() - started:.1f} s"
            if tries >= policy.attempts:
                raise BillingError(
                    f"{exc} (giving up after {tried})",
                    retryable=True,
                    retry_after=exc.retry_after,
                ) from None
            wait = policy.delay(tries, exc.retry_after)
            if deadline is not None and time.monotonic() + wait >= deadline:
                raise BillingError(
                    f"{exc} (giving up after {tried}: the next retry, in {wait:.0f} s, would"
                    " pass the read's timeout)",
                    retryable=True,
                    retry_after=exc.retry_after,
                ) from None
            log.debug("%s: %s; retrying in %.2f s", what, exc, wait)
            await asyncio.sleep(wait)
