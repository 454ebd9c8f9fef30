"""Step-time profiles at run time (ECONOMICS.md §3b): read from the store at start-up and
hourly, and learned from every endpoint whose config names a profile and has a control.

A profile carries what a control taught about one (model, hardware, method): the plain
curve and the step overhead h. Endpoints of the same kind without a control name it
(`profile: NAME`) and get a verdict on basis `profile` instead of `default`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from spectax.economics import Profile
from spectax.endpoint import EndpointMonitor, ProfileLookup
from spectax.health import LogOnce
from spectax.store import Store, StoreError

log = logging.getLogger(__name__)
REFRESH_SECONDS = 3600.0


class ProfileBook:
    """The profiles known, by name, and the hourly round that learns and re-reads them."""

    def __init__(self) -> None:
        self.known: dict[str, Profile] = {}
        self._health = LogOnce(log, "profiles")
        self._missing: set[str] = set()  # names already warned about

    def lookup(self, name: str | None) -> ProfileLookup | None:
        """What an endpoint reads its profile through: always the latest one read."""
        if name is None:
            return None
        return lambda: self.known.get(name)

    async def refresh(
        self, store: Store, monitors: Iterable[EndpointMonitor], now: datetime
    ) -> None:
        """Save what each teaching endpoint learned, then read every profile back."""
        monitors = list(monitors)
        try:
            for monitor in monitors:
                learned = monitor.learned_profile()
                if learned is not None:
                    await store.save_profile(learned, now)
            self.known = await store.profiles()
        except StoreError as exc:
            self._health.failed("cannot refresh step-time profiles: %s", exc)
            return
        self._health.recovered("step-time profiles read again")
        for monitor in monitors:
            config = monitor.config
            name = config.profile
            if name and not config.control and name not in self.known and name not in self._missing:
                self._missing.add(name)
                log.warning(
                    "endpoint %s: profile %r is not stored yet: it is learned by an endpoint "
                    "that names it and has a control, or saved by `spectax model fit "
                    "--save-profile`; until then the verdict's basis is default",
                    config.name,
                    name,
                )
