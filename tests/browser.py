"""The one headless Chromium the tests drive, over the DevTools protocol on loopback.

`Browser(chromium())` starts it; `browser.page()` is a tab that records every event
(console, exceptions, log entries, network requests, loads); `browser.open(path, shot)`
loads a file and returns the problems seen. The report's HTML and the status page are
checked with it. What a test renders goes to its `artifacts` fixture (conftest.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest


def chromium() -> str:
    """The Chromium binary; skip the test without one (fail it under SPECTAX_CI=1)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        reason = "chromium is not installed (bash .ci/install-chromium.sh)"
        if os.environ.get("SPECTAX_CI") == "1":
            pytest.fail(f"SPECTAX_CI=1 and {reason}")
        pytest.skip(reason)
    return found


class Browser:
    """Headless Chromium driven over the DevTools protocol (loopback only): load a file,
    collect console errors, exceptions, error log entries and network requests, screenshot."""

    def __init__(self, binary: str):
        self.binary = binary
        self.profile = tempfile.mkdtemp(prefix="spectax-chromium-")
        self.process: asyncio.subprocess.Process | None = None
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Browser:
        self.process = await asyncio.create_subprocess_exec(
            self.binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-quic",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={self.profile}",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "about:blank",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        self.session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.session is not None:
            await self.session.close()
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    async def _page_socket_url(self) -> str:
        port_file = Path(self.profile) / "DevToolsActivePort"
        assert self.session is not None
        for _ in range(300):  # up to 30 s for the browser to come up
            if port_file.exists() and port_file.read_text().strip():
                port = port_file.read_text().split()[0]
                with contextlib.suppress(aiohttp.ClientError):
                    async with self.session.get(f"http://127.0.0.1:{port}/json/list") as r:
                        pages = [t for t in await r.json() if t.get("type") == "page"]
                        if pages:
                            return str(pages[0]["webSocketDebuggerUrl"])
            await asyncio.sleep(0.1)
        raise AssertionError("chromium's DevTools endpoint did not come up in 30 s")

    @contextlib.asynccontextmanager
    async def page(self) -> AsyncIterator[Page]:
        """The browser's page over DevTools: `call` a method, `events` seen, `loaded` set
        at each load event."""
        assert self.session is not None
        pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        ids = iter(range(1, 10_000))
        async with self.session.ws_connect(await self._page_socket_url(), max_msg_size=0) as ws:

            async def call(method: str, **params: Any) -> dict[str, Any]:
                i = next(ids)
                pending[i] = asyncio.get_running_loop().create_future()
                await ws.send_json({"id": i, "method": method, "params": params})
                reply = await asyncio.wait_for(pending[i], 60)
                assert "error" not in reply, (method, reply)
                return dict(reply.get("result", {}))

            page = Page(call)

            async def read() -> None:
                async for message in ws:
                    data = json.loads(message.data)
                    if "id" in data and data["id"] in pending:
                        pending.pop(data["id"]).set_result(data)
                    elif "method" in data:
                        page.events.append(data)
                        if data["method"] == "Page.loadEventFired":
                            page.loaded.set()

            reader = asyncio.create_task(read())
            try:
                yield page
            finally:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader

    async def open(self, path: Path, screenshot: Path | None) -> list[str]:
        """Load `path`; returns the problems seen (empty when it rendered cleanly)."""
        page_url = path.as_uri()  # callers pass absolute paths
        async with self.page() as page:
            call = page.call
            for domain in ("Page", "Runtime", "Log", "Network"):
                await call(f"{domain}.enable")
            await call(
                "Emulation.setDeviceMetricsOverride",
                width=1280,
                height=900,
                deviceScaleFactor=1,
                mobile=False,
            )
            await call("Page.navigate", url=page_url)
            await asyncio.wait_for(page.loaded.wait(), 30)
            await asyncio.sleep(0.5)  # late console messages, lazy requests
            if screenshot is not None:
                await page.screenshot(screenshot, 1280)
            return _problems(page.events, page_url)


@dataclass
class Page:
    """One browser tab over DevTools: `call` a method, every event seen, set at each load."""

    call: Callable[..., Awaitable[dict[str, Any]]]
    events: list[dict[str, Any]] = field(default_factory=list)
    loaded: asyncio.Event = field(default_factory=asyncio.Event)

    def requested(self) -> list[str]:
        """Every URL the tab asked for, in order."""
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e["method"] == "Network.requestWillBeSent"
        ]

    async def screenshot(self, path: Path, width: int) -> None:
        """The whole page `width` px wide (at most 16,000 px tall), as a PNG at `path`."""
        metrics = await self.call("Page.getLayoutMetrics")
        height = min(int(metrics["cssContentSize"]["height"]) + 1, 16_000)
        shot = await self.call(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        )
        await asyncio.to_thread(save, path, base64.b64decode(shot["data"]))


def save(path: Path, data: bytes) -> None:
    """`data` at `path`, its directory made first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _problems(events: list[dict[str, Any]], page_url: str) -> list[str]:
    problems = []
    for event in events:
        method, params = event["method"], event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = [a.get("value", a.get("description")) for a in params.get("args", [])]
            problems.append(f"console.{params['type']}: {args}")
        elif method == "Runtime.exceptionThrown":
            problems.append(f"exception: {params['exceptionDetails'].get('text')}")
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            problems.append(f"log error: {params['entry'].get('text')}")
        elif method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if url != page_url and not url.startswith("data:"):
                problems.append(f"network request: {url}")
    return problems
