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
from collections.abc import Generator, Mapping, Sequence
from datetime import datetime, timedelta

from spectax.economics.draft_schedule import DraftSchedule, draft_schedule
from spectax.economics.k_schedule import schedule_boundaries
from spectax.economics.load_curve import LoadCurve, LoadSample, load_curve
from spectax.endpoint import EndpointSnapshot
from spectax.exposition.collector import LoadCurves, drained
from spectax.store import Store, StoreError

log = logging.getLogger(__name__)


class CurveBook:
    """The last load curves made; none until the first refresh, which the daemon runs as it
    starts scraping."""

    def __init__(self) -> None:
        self.current = LoadCurves()
        self._failing = False

    async def refresh(
        self,
        store: Store,
        now: datetime,
        lookback: float,
        endpoints: Mapping[str, EndpointSnapshot],
    ) -> None:
        """Read the lookback's load bins and make the curves again, of the `endpoints` watched
        (by name, their snapshots: their configured K schedules); a store that cannot be
        read keeps the last ones, said once in the log, and its recovery once."""
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
        # On the event loop, a step at a time: at 2,000 endpoints the curves, their K
        # schedules and their lines are ~3.5 s of CPU. In a worker thread they held the GIL,
        # and every socket call of the loop's scrapes and reads then waited for the
        # interpreter's switch interval (5 ms) to get it back. A step is ~2 ms at most.
        making = _making(samples, boundaries, engines)
        while True:
            try:
                next(making)
            except StopIteration as done:
                self.current = done.value
                return
            await asyncio.sleep(0)


def speculating_curves(
    samples: Mapping[tuple[str, str], Sequence[LoadSample]],
    boundaries: Mapping[str, tuple[int, ...]] | None = None,
    engines: Mapping[str, tuple[str, str | None]] | None = None,
) -> LoadCurves:
    """The curves of the (endpoint, model) pairs whose samples speculated (a bin with a
    speedup), ready for /metrics, with the boundaries of the endpoints' K schedules and the
    K schedule each curve implies (`draft_schedule`, for the endpoint's engine and method
    in `engines`: vLLM's, when not given). What `CurveBook.refresh` makes, in one go."""
    return drained(_making(samples, boundaries or {}, engines or {}))


def _making(
    samples: Mapping[tuple[str, str], Sequence[LoadSample]],
    boundaries: Mapping[str, tuple[int, ...]],
    engines: Mapping[str, tuple[str, str | None]],
) -> Generator[None, None, LoadCurves]:
    """`speculating_curves`, yielding after each pair's curve and K schedule and each
    curve's lines."""
    curves: dict[tuple[str, str], LoadCurve] = {}
    schedules: dict[tuple[str, str], DraftSchedule] = {}
    for key, found in samples.items():
        curve = load_curve(found)
        if any(b.speedup is not None for b in curve.bins):
            engine, method = engines.get(key[0], ("vllm", None))
            curves[key] = curve
            schedules[key] = draft_schedule(curve, engine=engine, method=method)
        yield
    return (yield from LoadCurves.formatting(curves, boundaries, schedules))
