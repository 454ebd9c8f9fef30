"""What a fleet source tells the operator, against a real loopback HTTP server answering
as a Prometheus does: a failed Prometheus is one line for the source (not one per
endpoint), with the window as ISO time; the source's and an endpoint's recovery are told,
so that their next failure is told too."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Sequence

import aiohttp
import pytest
from aiohttp import web

from loopback import serve
from spectax.endpoint import EndpointMonitor
from spectax.endpoint_config import EndpointConfig
from spectax.source_config import PrometheusSource
from spectax.sources.fleet import FleetSource

W = 60.0
T0 = 1_796_000_040.0  # a window boundary: 2026-11-30T00:54:00Z


class FakePrometheus:
    """Answers each window's sums with 5 tokens for the endpoints in `up`; 503 when down."""

    def __init__(self) -> None:
        self.up: list[str] | None = ["a", "b", "c"]

    async def answer(self, request: web.Request) -> web.Response:
        if self.up is None:
            return web.Response(status=503, text="the query engine is restarting")
        form = await request.post()
        result = []
        if "sum by" in str(form["query"]):
            point = [float(str(form["end"])), "5"]
            result = [{"metric": {"model_name": name}, "values": [point]} for name in self.up]
        body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
        return web.Response(text=json.dumps(body), content_type="application/json")


async def test_a_source_failure_is_one_line_and_recoveries_are_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakePrometheus()
    app = web.Application()
    app.router.add_post("/api/v1/{kind}", fake.answer)
    runner, url = await serve(app)
    source = PrometheusSource(url=url, endpoint_labels=["model_name"], delay=1.0)

    async def new_monitors(endpoints: Sequence[EndpointConfig]) -> AsyncIterator[EndpointMonitor]:
        for endpoint in endpoints:
            yield EndpointMonitor(endpoint, None, W)

    def read(k: int) -> float:
        return T0 + k * W + 2.0  # window k is due

    def lines(level: int) -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == level]

    caplog.set_level(logging.INFO)
    try:
        async with aiohttp.ClientSession() as session:
            fleet = FleetSource(source, W, session, new_monitors, lambda m, w: None)
            fleet.next_end = T0 + W
            assert await fleet.read_due(read(1))
            assert sorted(fleet.monitors) == ["a", "b", "c"]
            caplog.clear()
            fake.up = None
            assert not await fleet.read_due(read(2))
            assert not await fleet.read_due(read(2))
            [failed] = lines(logging.WARNING)
            assert "cannot read the windows up to 2026-11-30T00:56:00Z (3 endpoint(s) wait)" in (
                failed
            )
            assert "503" in failed
            assert not any(m.snapshot.up for m in fleet.monitors.values())
            caplog.clear()
            fake.up = ["a", "b"]
            assert await fleet.read_due(read(2))
            assert any("reading windows again from 2026-11-30T00:55:00Z" in m for m in lines(20))
            assert [m for m in lines(logging.WARNING) if "endpoint c" in m], "c is gone"
            caplog.clear()
            fake.up = ["a", "b", "c"]
            assert await fleet.read_due(read(3))
            assert [m for m in lines(logging.INFO) if "again" in m] == [
                "endpoint c: read from its source again"
            ]
            fake.up = ["a", "b"]
            assert await fleet.read_due(read(4))
            assert [m for m in lines(logging.WARNING) if "endpoint c" in m], "told again"
            assert not any(str(T0)[:6] in m for m in caplog.messages), "no epoch seconds"
    finally:
        await runner.cleanup()
