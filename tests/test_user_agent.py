"""Who spectax says it is: a scrape and a fleet source's query, through the daemon's HTTP
session, reach a real loopback server with `User-Agent: spectax/<version>`, not
aiohttp's default (a target's or a Prometheus's access log names the scraper)."""

from __future__ import annotations

import json

from aiohttp import web

from loopback import serve
from recorded_pages import page
from spectax import __version__
from spectax.scrape import fetch, scrape_session
from spectax.source_config import PrometheusSource
from spectax.sources.prometheus import PrometheusReader

EMPTY = {"status": "success", "data": {"resultType": "matrix", "result": []}}


async def test_scrapes_and_source_queries_send_spectax_user_agent() -> None:
    seen: list[tuple[str, str]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append((request.path, request.headers.get("User-Agent", "")))
        if request.path == "/metrics":
            return web.Response(text=page("spec_ngram_0_before_traffic.txt"))
        return web.Response(text=json.dumps(EMPTY), content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner, url = await serve(app)
    try:
        async with scrape_session() as session:
            assert await fetch(session, f"{url}/metrics", 5.0, 1 << 20)
            source = PrometheusSource(url=url, endpoint_labels=["model_name"])
            assert await PrometheusReader(source, session).windows([600.0, 900.0]) == {900.0: {}}
    finally:
        await runner.cleanup()
    assert {path for path, _ in seen} >= {"/metrics", "/api/v1/query", "/api/v1/query_range"}
    assert {agent for _, agent in seen} == {f"spectax/{__version__}"}
