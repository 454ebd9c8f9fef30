"""Serve simulated engines' /metrics pages over HTTP on loopback (aiohttp).

One web server per profile, each on its own port.  Every request first advances
that endpoint's simulation by the wall-clock time elapsed since its last advance
(times ``speed``), so the pages evolve in real time (or ``speed`` times faster;
``fleet.speed = 0`` pauses the traffic, freezing every counter).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from types import TracebackType

from aiohttp import web

from spectax.engines import ENGINES
from spectax.simulate.sim_profiles import SimProfile
from spectax.simulate.vllm_engine import SimulatedVllm

__all__ = ["METRICS_CONTENT_TYPE", "SimulatedFleet", "start_simulated_servers"]

# As sent by vLLM 0.32.0 (fixtures/vllm-0.32.0/spec_draft_headers.txt).
METRICS_CONTENT_TYPE = "text/plain; version=1.0.0; charset=utf-8"
VLLM_VERSION = "0.32.0"


class SimulatedFleet:
    """Running simulated servers: ``urls`` and ``sims`` by profile name."""

    def __init__(self, speed: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.urls: dict[str, str] = {}
        self.sims: dict[str, SimulatedVllm] = {}
        self.speed = speed
        self._clock = clock
        self._last: dict[str, float] = {}
        self._runners: list[web.AppRunner] = []
        self._closed = False

    def sync(self, name: str) -> SimulatedVllm:
        """Advance one simulation to the present and return it."""
        sim = self.sims[name]
        now = self._clock()
        elapsed = now - self._last[name]
        self._last[name] = now
        if elapsed > 0:
            # Real-time spans run step by step; long jumps (high speed, long gaps
            # between scrapes) aggregate, so a request never stalls the event loop.
            sim.advance(elapsed * self.speed, fast=None)
        return sim

    def restart(self, name: str) -> None:
        """Cold-start one endpoint now: counters reset, new process_start_time_seconds.

        /metrics and /health answer 503 until ``cold_start_s`` of simulated time
        has passed.
        """
        self.sync(name).restart()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()

    async def __aenter__(self) -> SimulatedFleet:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _app(self, name: str) -> web.Application:
        # While a restarted engine loads (cold_start_s of simulated time) the real
        # server is not up; the closest an aiohttp handler can get is a 503.
        async def metrics(_request: web.Request) -> web.Response:
            sim = self.sync(name)
            if not sim.ready:
                return web.Response(status=503, text="engine starting")
            return web.Response(
                body=sim.render().encode(), headers={"Content-Type": sim.content_type}
            )

        async def health(_request: web.Request) -> web.Response:
            return web.Response(status=200 if self.sync(name).ready else 503)

        async def version(_request: web.Request) -> web.Response:
            return web.json_response({"version": VLLM_VERSION})

        async def models(_request: web.Request) -> web.Response:
            sim = self.sims[name]
            body = {
                "object": "list",
                "data": [
                    {
                        "id": sim.profile.model_name,
                        "object": "model",
                        "owned_by": "vllm",
                        "max_model_len": sim.profile.max_model_len,
                    }
                ],
            }
            return web.Response(text=json.dumps(body), content_type="application/json")

        app = web.Application()
        engine = self.sims[name].profile.serving_engine
        app.router.add_get(ENGINES[engine].metrics_path, metrics)  # trtllm: /prometheus/metrics
        app.router.add_get("/health", health)
        app.router.add_get("/version", version)
        app.router.add_get("/v1/models", models)
        return app


async def start_simulated_servers(
    profiles: Mapping[str, SimProfile],
    host: str = "127.0.0.1",
    port: int = 0,
    speed: float = 1.0,
    start_time: float | None = None,
) -> SimulatedFleet:
    """Start one HTTP server per profile and return the fleet.

    ``port=0`` gives every server an ephemeral port; otherwise the servers take
    ``port``, ``port + 1``, ... in the order of ``profiles``.  ``start_time`` is the
    simulated epoch time the engines come up at (default: now).  Use as
    ``async with await start_simulated_servers(...) as fleet:`` or call ``close()``.
    """
    if speed < 0:
        raise ValueError("speed must be >= 0 (0 pauses the simulated traffic)")
    fleet = SimulatedFleet(speed)
    t0 = time.time() if start_time is None else start_time
    try:
        for i, (name, profile) in enumerate(profiles.items()):
            fleet.sims[name] = SimulatedVllm(profile, t0)
            fleet._last[name] = fleet._clock()
            runner = web.AppRunner(fleet._app(name), access_log=None)
            await runner.setup()
            fleet._runners.append(runner)
            site = web.TCPSite(runner, host, port + i if port else 0)
            await site.start()
            actual = runner.addresses[0][1]
            shown = f"[{host}]" if ":" in host else host
            fleet.urls[name] = f"http://{shown}:{actual}"
    except BaseException:
        await fleet.close()
        raise
    return fleet
