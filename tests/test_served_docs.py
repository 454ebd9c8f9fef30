"""The runbook and the economics, served by spectax itself: every link the alerts, the
dashboards and the status page carry opens a page and lands on its section (issue 32: they
pointed at a file:// URL, which a browser does not open from an http page, and the file
was not there)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import aiohttp
import pytest
import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry

from promstack import ALERTS
from spectax.status import served_documents
from spectax.status.page import DOCS_URL, RUNBOOK_URL
from spectax.web import make_app


@pytest.fixture
async def spectax_pages() -> AsyncIterator[str]:
    """spectax's web app, as the daemon builds it, on a real loopback port."""
    app = make_app(CollectorRegistry(), lambda: True, lambda: [], documents=served_documents())
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield f"http://{host}:{port}"
    await runner.cleanup()


async def fetch(url: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, response.content_type, await response.text()


def anchors(html: str) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', html))


async def test_every_alerts_runbook_url_opens_its_section(spectax_pages: str) -> None:
    rules = yaml.safe_load((ALERTS / "spectax.alerts.yml").read_text(encoding="utf-8"))
    urls = [r["annotations"]["runbook_url"] for g in rules["groups"] for r in g["rules"]]
    assert len(urls) >= 10
    status, kind, html = await fetch(f"{spectax_pages}/runbook")
    assert (status, kind) == (200, "text/html")
    found = anchors(html)
    for url in urls:
        base, anchor = url.split("#")
        assert base == "http://localhost:9837/runbook"  # spectax's default address
        assert anchor in found, (anchor, sorted(found))
    # Rendered, not raw Markdown: headings, tables and code are HTML.
    assert "<table>" in html and "<h2" in html and "## " not in html


async def test_the_status_pages_links_open_on_spectax_itself(spectax_pages: str) -> None:
    for link in (RUNBOOK_URL, DOCS_URL):
        path, _, anchor = link.partition("#")
        assert path.startswith("/"), link  # served here: no file:// link
        status, _, html = await fetch(f"{spectax_pages}{path}")
        assert status == 200, link
        assert not anchor or anchor in anchors(html), link
    _, _, economics = await fetch(f"{spectax_pages}/docs/economics")
    assert "the-floor-under-h" in anchors(economics)
