"""The daemon's load curves (issue 34): each endpoint and model's stored windows over the
lookback (`load_curve.lookback`), binned by mean running requests (`economics.load_curve`;
the rolled hours' bins the store keeps, and the windows not rolled up yet: `load_samples`),
made again every `load_curve.refresh_interval` by a job of their own, off the scrape path:
`/metrics` reads the last ones made, with their lines formatted once (`LoadCurves`).

Only models that speculated get a curve (a bin with a speedup): a plain endpoint, a control
say, would show time shares and nothing to decide. Endpoints no longer watched (removed by a
reload, gone from the fleet) are left out although their windows are still in the lookback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from spectax.economics.draft_schedule import draft_schedule
from spectax.economics.k_schedule import schedule_boundaries
from spectax.economics.load_curve import LoadSample, load_curve
from spectax.endpoint import EndpointSnapshot
from spectax.exposition.collector import CurveLines, LoadCurves
from spectax.store import Store, StoreError

log = logging.getLogger(__name__)


class CurveBook:
    """The load curves last made, an endpoint and model at a time; none until the first
    refresh, which the daemon runs as it starts scraping."""

    def __init__(self) -> None:
        self._made: dict[tuple[str, str], CurveLines] = {}
        self._current: LoadCurves | None = LoadCurves()
        self._failing = False
        self._failing_pairs: set[tuple[str, str]] = set()

    @property
    def current(self) -> LoadCurves:
        """The curves as /metrics and the status page read them: gathered again only after
        a pair changed (a read between two steps of a refresh sees each pair once, the
        ones not made again yet as the last refresh left them)."""
        if self._current is None:
            self._current = LoadCurves.gathered(self._made)
        return self._current

    async def refresh(
        self,
        store: Store,
        now: datetime,
        lookback: float,
        endpoints: Mapping[str, EndpointSnapshot],
    ) -> None:
        """Read the lookback's load bins and make the curves again, of the `endpoints` watched
        (by name, their snapshots: their configured K schedules); a store that cannot be
        read keeps the last ones, said once in the log, and its recovery once.

        On the event loop, a pair at a time, each replacing the last one made of it: at
        2,000 endpoints and a day of windows the curves, their K schedules and their lines
        are ~2.5 s of CPU. In a worker thread they held the GIL, and every socket call of
        the loop's scrapes and reads then waited for the interpreter's switch interval (5
        ms) to get it back (scrapes up to 2 s late). Made whole and then swapped, the last
        curves and the new ones were both alive: a pair at a time, what a pair replaces
        can be freed as the next is made (bench/README.md). Not to be run twice at once
        (the daemon's job runs one at a time): each run drops the pairs it did not make."""
        try:
            samples = await store.load_samples(now - timedelta(seconds=lookback), list(endpoints))
        except StoreError as exc:
            if not self._failing:
                log.warning("load curves: keeping the last ones: %s", exc)
            self._failing = True
            return
        if self._failing:
            log.info("load curves: the store is read again")
        self._failing = False
        boundaries: dict[str, tuple[int, ...]] = {}
        engines: dict[str, tuple[str, str | None]] = {}
        for name, snapshot in endpoints.items():
            speculation = snapshot.config.speculation
            if speculation is not None and speculation.schedule is not None:
                boundaries[name] = schedule_boundaries(speculation.schedule)
            engines[name] = (snapshot.config.engine, speculation.method if speculation else None)
        kept = set()
        while samples:  # each pair's samples let go of once its curve is made
            key, found = samples.popitem()
            made = self._made_apart(key, found, boundaries, engines)
            if made is not None:
                self._made[key] = made
                kept.add(key)
            else:
                self._made.pop(key, None)
            self._current = None
            await asyncio.sleep(0)
        for key in set(self._made) - kept:  # an endpoint no longer watched, or a pair gone
            del self._made[key]
        self._current = None

    def _made_apart(
        self,
        key: tuple[str, str],
        samples: Sequence[LoadSample],
        boundaries: Mapping[str, tuple[int, ...]],
        engines: Mapping[str, tuple[str, str | None]],
    ) -> CurveLines | None:
        """`_made`, one pair's failure its own: said once in the log (and its recovery) and
        that pair left without a curve, never the other pairs' refresh stopped."""
        try:
            made = _made(key, samples, boundaries, engines)
        except Exception as exc:  # any type: one pair's odd data must not stop the others
            if key not in self._failing_pairs:
                log.error("load curves: %s, %s: cannot make its curve: %r", *key, exc)
            self._failing_pairs.add(key)
            return None
        if key in self._failing_pairs:
            self._failing_pairs.discard(key)
            log.info("load curves: %s, %s: its curve is made again", *key)
        return made


def speculating_curves(
    samples: Mapping[tuple[str, str], Sequence[LoadSample]],
    boundaries: Mapping[str, tuple[int, ...]] | None = None,
    engines: Mapping[str, tuple[str, str | None]] | None = None,
) -> LoadCurves:
    """The curves of the (endpoint, model) pairs whose samples speculated (a bin with a
    speedup), ready for /metrics, with the boundaries of the endpoints' K schedules (by
    endpoint) and the K schedule each curve implies (`draft_schedule`, for the endpoint's
    engine and method in `engines`: vLLM's, when not given). What `CurveBook.refresh`
    makes, in one go."""
    boundaries, engines = boundaries or {}, engines or {}
    made = {key: _made(key, found, boundaries, engines) for key, found in samples.items()}
    return LoadCurves.gathered({k: m for k, m in made.items() if m is not None})


def _made(
    key: tuple[str, str],
    samples: Sequence[LoadSample],
    boundaries: Mapping[str, tuple[int, ...]],
    engines: Mapping[str, tuple[str, str | None]],
) -> CurveLines | None:
    """One pair's curve, K schedule and lines; None when it did not speculate."""
    curve = load_curve(samples)
    if not any(b.speedup is not None for b in curve.bins):
        return None
    engine, method = engines.get(key[0], ("vllm", None))
    schedule = draft_schedule(curve, engine=engine, method=method)
    return CurveLines.of(key, curve, schedule, boundaries.get(key[0]))
