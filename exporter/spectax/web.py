"""The HTTP face: a landing page, `/metrics`, and the health endpoints Prometheus users expect."""

from __future__ import annotations

import html
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from spectax import __version__

REGISTRY_KEY = web.AppKey("registry", CollectorRegistry)
EndpointStates = Callable[[], list[tuple[str, bool, str]]]
READY_KEY: web.AppKey[Callable[[], bool]] = web.AppKey("ready")
ENDPOINTS_KEY: web.AppKey[EndpointStates] = web.AppKey("endpoints")


def make_app(
    registry: CollectorRegistry,
    ready: Callable[[], bool],
    endpoints: Callable[[], list[tuple[str, bool, str]]],
) -> web.Application:
    """`endpoints()` gives (name, up, last error or "") for the landing page."""
    app = web.Application()
    app[REGISTRY_KEY] = registry
    app[READY_KEY] = ready
    app[ENDPOINTS_KEY] = endpoints
    app.router.add_get("/", landing)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/-/healthy", healthy)
    app.router.add_get("/-/ready", ready_handler)
    return app


async def metrics(request: web.Request) -> web.Response:
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    body = encoder(request.app[REGISTRY_KEY])
    return web.Response(body=body, headers={"Content-Type": content_type})


async def healthy(request: web.Request) -> web.Response:
    return web.Response(text="spectax is healthy.\n")


async def ready_handler(request: web.Request) -> web.Response:
    if request.app[READY_KEY]():
        return web.Response(text="spectax is ready.\n")
    return web.Response(status=503, text="spectax is starting.\n")


async def landing(request: web.Request) -> web.Response:
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{'up' if up else 'down'}</td>"
        f"<td>{html.escape(error)}</td></tr>"
        for name, up, error in request.app[ENDPOINTS_KEY]()
    )
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>spectax</title></head>
<body>
<h1>spectax {html.escape(__version__)}</h1>
<p>Is speculative decoding paying for itself? Derived gauges per endpoint are at
<a href="/metrics">/metrics</a>. Health: <a href="/-/healthy">/-/healthy</a>,
readiness: <a href="/-/ready">/-/ready</a>.</p>
<table border="1" cellpadding="4"><tr><th>endpoint</th><th>state</th><th>last error</th></tr>
{rows}</table>
</body></html>
"""
    return web.Response(text=page, content_type="text/html")
