"""A test's fake HTTP API on loopback: the app started on a free port, its URL handed back."""

from __future__ import annotations

from aiohttp import web

from e2e import free_port


async def serve(app: web.Application, shutdown_timeout: float = 60.0) -> tuple[web.AppRunner, str]:
    """Start `app` on 127.0.0.1; the caller stops it with `runner.cleanup()`."""
    runner = web.AppRunner(app, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"
