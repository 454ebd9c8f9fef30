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
from spectax.exposition.collector import LoadCurves
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
        boundaries, engines = {}, {}
        for name, snapshot in endpoints.items():
            speculation = snapshot.config.speculation
            if speculation is not None and speculation.schedule is not None:
                boundaries[name] = schedule_boundaries(speculation.schedule)
            engines[name] = (snapshot.config.engine, speculation.method if speculation else None)
        # In a worker thread: at 2,000 endpoints binning and formatting the curves took
        # ~0.8 s of CPU, which on the event loop would hold every scrape and /metrics read.
        self.current = await asyncio.to_thread(speculating_curves, samples, boundaries, engines)


def speculating_curves(
    samples: Mapping[tuple[str, str], Sequence[LoadSample]],
    boundaries: Mapping[str, tuple[int, ...]] | None = None,
    engines: Mapping[str, tuple[str, str | None]] | None = None,
) -> LoadCurves:
    """The curves of the (endpoint, model) pairs whose samples speculated (a bin with a
    speedup), ready for /metrics, with the boundaries of the endpoints' K schedules and the
    K schedule each curve implies (`draft_schedule`, for the endpoint's engine and method
    in `engines`: vLLM's, when not given)."""
    made = {key: load_curve(found) for key, found in samples.items()}
    curves = {key: c for key, c in made.items() if any(b.speedup is not None for b in c.bins)}
    engines = engines or {}
    schedules = {}
    for (endpoint, model), curve in curves.items():
        engine, method = engines.get(endpoint, ("vllm", None))
        schedules[(endpoint, model)] = draft_schedule(curve, engine=engine, method=method)
    return LoadCurves.of(curves, boundaries, schedules)
