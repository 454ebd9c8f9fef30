"""The models an endpoint holds over time: at most `MAX_MODELS_HELD`, each forgotten once it
has been on no page for `expiry` seconds (the window's length).

A page is capped at 64 models (spectax.engines), but a target rotating its model names from
scrape to scrape was not: every name it ever showed stayed in the endpoint's token counters,
its windows and its rows (issue 30: 6,208 models exported and a 50 MB database after two
minutes, RSS climbing, other endpoints' writes locked out). A name the endpoint holds is
kept while pages show it; a new name is taken only while fewer than the cap are held, and
refused otherwise (not exported, not stored), until names that left the pages expire.

The expiry is one window: a model on no page for a whole window has no interval left in the
sliding window, so its live gauges are already gone; its counters go with them. The cap is
two pages' worth, so that a redeploy renaming every model of a full page is taken whole
while the old names wait to expire.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from spectax.engines.vllm import MAX_MODELS

MAX_MODELS_HELD = 2 * MAX_MODELS
#: The reasons of spectax_models_dropped_total: a new name refused past the cap (counted on
#: each page it is refused on), a held name forgotten after a window on no page.
DROP_REASONS = ("limit", "expired")


@dataclass(frozen=True, slots=True)
class Admission:
    """What one page's names came to: `kept` None when every name is held (nothing to filter),
    the number refused past the cap, the names that expired."""

    kept: frozenset[str] | None
    refused: int
    expired: tuple[str, ...]


class ModelLedger:
    """Each held model's last sight. At most `limit` entries; checked once per page."""

    def __init__(self, expiry: float, limit: int = MAX_MODELS_HELD):
        self.expiry, self.limit = expiry, limit
        self._seen: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def admit(self, now: float, names: Iterable[str]) -> Admission:
        """Refresh the held names on the page, forget those on no page for `expiry` s, then
        take new names while there is room. A page's names are refreshed before anything
        expires, so an endpoint coming back after an outage keeps its models. At most 128
        entries are walked: a few µs a scrape."""
        seen, new = self._seen, []
        for name in names:
            if name in seen:
                seen[name] = now
            else:
                new.append(name)
        horizon = now - self.expiry
        expired = tuple(name for name, when in seen.items() if when < horizon)
        for name in expired:
            del seen[name]
        room = max(self.limit - len(seen), 0)
        for name in new[:room]:
            seen[name] = now
        refused = new[room:]
        kept = frozenset(seen) if refused else None
        return Admission(kept, len(refused), expired)
