"""Step-time profiles at run time (ECONOMICS.md §3b): read from the store at start-up and
hourly, and learned from every endpoint whose config names a profile and has a control.

A profile carries what a control taught about one (model, hardware, method): the plain
curve and the step overhead h. Endpoints of the same kind without a control name it
(`profile: NAME`) and get a verdict on basis `profile` instead of `default`; where it
stands among the sources of the counterfactual is spectax.counterfactual.in_force's rule.
The store only keeps the rows (spectax.store.profiles).
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Iterable
from datetime import datetime

from spectax.counterfactual.in_force import Counterfactual, ProfileLookup
from spectax.economics import Profile
from spectax.health import LogOnce
from spectax.store import Store, StoreError

# The logger keeps the module's former name (spectax.profiles): log filters select by it.
log = logging.getLogger("spectax.profiles")
REFRESH_SECONDS = 3600.0


def baseline_profile_name(endpoint: str) -> str:
    """The stored name of an endpoint's own baseline; "/" is never in a configured name."""
    return f"baseline/{endpoint}"


def learned_profiles(counterfactual: Counterfactual) -> list[Profile]:
    """What an endpoint teaches, for the store to keep:

    - the profile its config names, when it has a control whose plain curve is fitted
      and its windows have implied a step overhead against it;
    - its own baseline (`baseline_profile_name`), when it speculates and its windows
      from before speculation gave a plain curve: restored windows reach back a day
      only, so without this the baseline would be lost at the first restart.
    """
    config, spec = counterfactual.config, counterfactual.config.speculation
    learned = []
    curve = counterfactual.control_curve()
    overheads = counterfactual.implied_overheads
    if config.profile is not None and curve is not None and overheads:
        learned.append(
            Profile(
                name=config.profile,
                source="control",
                learned_from=f"endpoint {config.name} against control {config.control}",
                ridge_batch=curve.ridge_batch or config.ridge_batch,
                step_overhead_ratio=statistics.median(overheads),
                draft_cost_ratio=spec.cost_ratio if spec else None,
                plain=curve,
                points=curve.points,
            )
        )
    own = counterfactual.calibration.fit
    if own is not None and spec is not None:
        learned.append(
            Profile(
                name=baseline_profile_name(config.name),
                source="baseline",
                learned_from=f"endpoint {config.name} before speculation",
                ridge_batch=own.ridge_batch or config.ridge_batch,
                step_overhead_ratio=config.step_overhead_ratio,
                plain=own,
                points=own.points,
            )
        )
    return learned


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
        self, store: Store, endpoints: Iterable[Counterfactual], now: datetime
    ) -> None:
        """Save what each teaching endpoint learned, then read every profile back."""
        endpoints = list(endpoints)
        try:
            for endpoint in endpoints:
                for learned in learned_profiles(endpoint):
                    await store.save_profile(learned, now)
            self.known = await store.profiles()
        except StoreError as exc:
            self._health.failed("cannot refresh step-time profiles: %s", exc)
            return
        self._health.recovered("step-time profiles read again")
        for endpoint in endpoints:
            config = endpoint.config
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
