"""`spectax demo` tells the three bases a verdict can rest on within its first minute.

The process a new user starts (`python -m spectax demo`: the simulated servers on loopback,
the daemon on SQLite) must show, within 60 s of its start and all at once:

- the code assistant pays, on a basis better than defaults (a stored profile: the demo
  stores what a simulated benchmark sweep of its model teaches before the daemon starts);
- the saturated chat endpoint is a tax, measured against its control;
- an endpoint without either is uncertain, and its status-page card says what it turns
  on and what would settle it for that endpoint (settle.py's words).

Issue 29 found a demo that after nine minutes showed 1 tax, 5 uncertain and never "pays".
"""

from __future__ import annotations

import contextlib
import re
import time
from html import unescape
from pathlib import Path

import aiohttp
import pytest

from e2e import Samples, Spectax, free_port, wait_until
from spectax.simulate.demo_fleet import DEMO_SWEPT

pytestmark = pytest.mark.e2e

STORY_SECONDS = 60.0  # issue 29: "within 60 s of start"
# A measured speedup needs full windows both sides (0.8 of the live demo's 30 s window,
# checked at a scrape, each endpoint at its own phase in the 5 s interval): start-up + 5 +
# 24 + 5 s at worst. With the 1 min window of the history demo it came at 53-61 s.
MEASURED_SECONDS = STORY_SECONDS
PAYS, TAX = "code-assistant", "chat-creative"


def verdicts(m: Samples) -> dict[str, tuple[str, str]]:
    """(verdict, basis) per endpoint, as /metrics says (spectax_verdict_info)."""
    found = {}
    for (name, labels), v in m.items():
        if name == "spectax_verdict_info" and v == 1:
            label = dict(labels)
            found[label["endpoint"]] = (label["verdict"], label["basis"])
    return found


def cards(html: str) -> dict[str, str]:
    """Each endpoint's card on the status page, by endpoint name."""
    found = re.findall(r'(<section class="[^"]*" data-endpoint="([^"]*)".*?</section>)', html, re.S)
    return {unescape(name): section for section, name in found}


def settled_in_words(name: str, card: str) -> bool:
    """Whether an uncertain card says what it turns on and what would settle it, for it."""
    text = unescape(card)
    return (
        "it turns on this: " in text
        and "what is this?" in text
        and "What would settle it, cheapest first:" in text
        and f"`control: {name}-control` under `{name}`" in text  # the cheapest: a control
        and f"a baseline: run {name} without speculation" in text
    )


async def story(demo: Spectax) -> tuple[dict[str, tuple[str, str]], dict[str, str]] | None:
    """The verdicts and cards once the three bases show together; None until then."""
    shown = verdicts(await demo.metrics())
    if shown.get(PAYS, ("", ""))[0] != "pays" or shown.get(TAX, ("", ""))[0] != "tax":
        return None
    status, html = await demo.get("/")
    assert status == 200
    page = cards(html)
    uncertain = [n for n, (v, _) in shown.items() if v == "uncertain"]
    if not any(settled_in_words(n, page.get(n, "")) for n in uncertain):
        return None
    return shown, page


async def test_the_demo_shows_pays_on_a_profile_a_measured_tax_and_an_uncertain_to_settle(
    tmp_path: Path,
) -> None:
    port = free_port()
    demo = Spectax(tmp_path / "unused.yml", port)
    started = time.monotonic()
    await demo.start_demo(tmp_path)
    try:

        async def told() -> tuple[dict[str, tuple[str, str]], dict[str, str]] | None:
            with contextlib.suppress(aiohttp.ClientError, AssertionError, OSError):
                return await story(demo)  # none of these until it listens and serves
            return None

        left = STORY_SECONDS - (time.monotonic() - started)
        shown, page = await wait_until(told, left, "the demo's three-basis story", [demo], 1.0)
        assert shown[PAYS] == ("pays", "profile")
        assert f"the stored profile {DEMO_SWEPT[PAYS]} (a benchmark sweep)" in page[PAYS]
        assert "data-settle" not in page[PAYS] and "data-settle" not in page[TAX]

        async def measured() -> str | None:
            shown = verdicts(await demo.metrics())
            if shown.get(TAX) != ("tax", "measured") or shown[PAYS] != ("pays", "profile"):
                return None
            return cards((await demo.get("/"))[1])[TAX]

        left = MEASURED_SECONDS - (time.monotonic() - started)
        card = await wait_until(measured, left, "the tax measured", [demo], 1.0)
        assert "measured against its control chat-control" in card
        assert "B* = inf" not in demo.log  # no flat plain curve is fitted, let alone kept
    finally:
        assert await demo.stop() == 0
