"""The status page at `/`: verdicts and figures a person reads when Grafana is not at hand.

Rendered from snapshots built by feeding recorded vLLM pages through the endpoint
monitor; and in headless Chromium, served by a real `spectax run` over the simulated
demo servers, where the verdicts shown must be those `/metrics` gives and nothing may
be fetched from anywhere but 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import re
from collections.abc import AsyncIterator
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from browser import Browser, chromium
from builders import monitors_of
from e2e import Samples, Spectax, free_port, value, wait_until, write_config
from recorded_pages import page
from spectax.config import validate
from spectax.economics import window_capacities
from spectax.economics.draft_schedule import draft_schedule
from spectax.economics.load_curve import LoadSample, load_curve
from spectax.endpoint import EndpointMonitor
from spectax.engines import not_exposed
from spectax.engines.vllm import parse
from spectax.load_curve_text import ranges_text
from spectax.pipeline.counts import delta
from spectax.pipeline.quantiles import bucket_quantile
from spectax.scrape import ScrapeError
from spectax.settle import Target, settle_steps, turns_on
from spectax.simulate import DEMO_PROFILES, start_simulated_servers
from spectax.simulate.demo_fleet import demo_endpoints
from spectax.status import StatusHistory, render_status_page
from spectax.status.page import DOCS_URL, RUNBOOK_URL
from status_cards import cards

NGRAM = {"method": "ngram"}
HOSTILE = '<img src=x onerror=alert(1)>&"'
PAGES = {  # endpoint: (first page, second page) of the recorded vLLM 0.32.0 fixtures
    "ngram": ("spec_ngram_0_before_traffic.txt", "spec_ngram_3_after.txt"),
    "draft": ("spec_draft_0_before_traffic.txt", "spec_draft_3_after.txt"),
    "heavy-draft": ("spec_draft_0_before_traffic.txt", "spec_draft_3_after.txt"),
    "plain": ("nospec_0_before_traffic.txt", "nospec_3_after.txt"),
    "idle": ("spec_ngram_inflight_running_waiting.txt", "spec_ngram_inflight_after.txt"),
    "hostile": ("spec_ngram_0_before_traffic.txt", "spec_ngram_3_after.txt"),
}


def fixture_page() -> tuple[str, dict[str, EndpointMonitor], StatusHistory]:
    settings = validate(
        {
            "window": "5m",
            "endpoints": [
                {
                    "name": "ngram",
                    "url": "http://h:1",
                    "price": {"usd_per_hour": 4},
                    "speculation": NGRAM,
                    "latency_slo": {"metric": "tpot", "quantile": 0.99, "seconds": 0.002},
                },
                {
                    "name": "draft",
                    "url": "http://h:2",
                    "price": {"usd_per_hour": 4},
                    "billing_mode": "serverless",
                    "speculation": {"method": "draft_model", "draft_cost_ratio": 0.1},
                },
                {
                    "name": "heavy-draft",  # a draft as costly as the target: a tax
                    "url": "http://h:3",
                    "price": {"usd_per_hour": 4},
                    "speculation": {"method": "draft_model", "draft_cost_ratio": 1.0},
                },
                {"name": "plain", "url": "http://h:4", "price": {"usd_per_hour": 4}},
                {"name": "idle", "url": "http://h:5", "speculation": NGRAM},
                {"name": "hostile", "url": "http://h:6", "speculation": NGRAM},
                {"name": "down", "url": "http://h:7", "speculation": NGRAM},
            ],
        }
    )
    monitors = monitors_of(settings)
    history = StatusHistory(step_seconds=60.0)
    for name, (first, second) in PAGES.items():
        texts = [page(first), page(second)]
        if name == "hostile":  # a target names its model with markup
            texts = [
                t.replace(
                    'model_name="tiny-llama"',
                    'model_name="{}"'.format(HOSTILE.replace('"', '\\"')),
                )
                for t in texts
            ]
        for at, text in ((0.0, texts[0]), (60.0, texts[1]), (120.0, texts[1])):
            monitors[name].observe_page(at, text, 0.01)
            history.record(name, monitors[name].snapshot)
    monitors["down"].observe_failure(ScrapeError("connect", "connection refused"), 0.01)
    html = render_status_page({n: m.snapshot for n, m in monitors.items()}, history, 180.0)
    return html, monitors, history


def test_the_page_shows_each_endpoints_verdict_with_its_basis_and_figures() -> None:
    html, monitors, _ = fixture_page()
    shown = cards(html)
    verdicts = {n: re.findall(r'data-verdict="([^"]+)"', c) for n, c in shown.items()}
    # No control, history or profile: the defaults' band straddles 1 except for a draft
    # as costly as the target, and the idle n-gram window, which proposed nothing: its
    # steps paid the proposer's floor h_min for no accepted token, a tax.
    assert verdicts == {
        "heavy-draft": ["tax"],
        "down": [],
        "idle": ["tax"],
        "ngram": ["uncertain"],
        "draft": ["uncertain"],
        "hostile": ["uncertain"],
        "plain": ["no_speculation"],
    }
    for name, card in shown.items():  # what economics concluded, model by model
        for model, assessment in monitors[name].snapshot.assessments.items():
            assert f'data-model="{escape(model)}" data-verdict="{assessment.verdict}"' in card
    # What needs a person comes first: the endpoint down, the taxes, then the uncertain.
    assert list(shown)[:4] == ["down", "heavy-draft", "idle", "draft"]
    assert "no_drafts" not in html
    ngram = monitors["ngram"].snapshot.assessments["tiny-llama"]
    card = shown["ngram"]
    assert (
        f"{564 / 740:.3f} of drafted tokens accepted; it pays above"
        f" {ngram.breakeven_acceptance_ratio:.3f}" in card
    )
    assert f"estimated {ngram.speedup_ratio:.2f}× · measured —" in card
    low, high = ngram.speedup_low_ratio, ngram.speedup_high_ratio
    assert low is not None and high is not None and low < 1 < high
    assert 'data-verdict="uncertain" data-basis="default"' in card
    # What it rests on, in words (issue 32: "B* and h guessed", "band —–—" were jargon).
    assert (
        "a guess, nothing measured yet (no control, no history before speculation, no"
        " profile); the GPU's ridge batch and the step overhead are assumed"
        f" · speedup somewhere from {low:.2f}× to {high:.2f}×" in card
    )
    assert "spectax's defaults · step overhead 0.10, assumed" in card
    # The money first and larger; uncertain, the counterfactual money is the band's range,
    # not one precise dollar figure.
    lead = card.index("<div class=lead><dt>$ per million output tokens</dt>")
    assert lead < card.index("<dt>p99 TPOT</dt>") < card.index("<dt>acceptance</dt>")
    assert f"${ngram.cost_per_million_output_tokens_usd:,.3f} actual" in card
    without = ngram.cost_per_million_no_speculation_band_usd
    assert without is not None and without[0] < without[1]
    assert f"${without[0]:,.3f} to ${without[1]:,.3f} without speculation" in card
    band = [ngram.per_hour(v) for v in ngram.speculation_savings_band_usd or ()]
    assert len(band) == 2 and band[0] is not None and band[1] is not None
    assert band[0] < 0 < band[1]  # the band straddles 1: a tax at one end, a saving at the other
    assert f"savings per hour (capacity)</dt><dd>−${-band[0]:,.3f}/h to +${band[1]:,.3f}/h" in card
    assert f"recommended K</dt><dd>{ngram.recommended_speculative_tokens} (running 4)" in card
    assert "savings per hour (invoice)" in shown["draft"]  # serverless: money on the bill
    heavy = monitors["heavy-draft"].snapshot.assessments["tiny-llama"]
    heavy_savings = heavy.per_hour(heavy.speculation_savings_usd)
    assert heavy_savings is not None and heavy_savings < 0
    assert f"−${-heavy_savings:,.3f}/h" in shown["heavy-draft"]
    assert "#speculationisatax" in shown["heavy-draft"]
    assert "— (no price configured)" in shown["idle"]
    assert "last error: connection refused" in shown["down"]
    assert "<svg" in card and card.count("<path") == 2  # the chart: acceptance, break-even
    assert "<svg" not in shown["plain"]  # nothing to chart without speculation


def test_each_card_shows_kv_cache_headroom_and_what_the_draft_takes() -> None:
    html, monitors, history = fixture_page()
    shown = cards(html)
    assert "KV-cache headroom</dt><dd>100% of 8,192 blocks" in shown["plain"]
    assert "waiting · preempted</dt><dd>0.0 requests · 0/h" in shown["plain"]
    assert "draft takes" not in shown["plain"] and "draft takes" not in shown["draft"]
    # The draft-model server against the plain one as its control: measured.
    draft = monitors["draft"].snapshot
    draft_window = monitors["draft"].window()
    assert draft_window is not None
    control = monitors["plain"].window()
    capacities = window_capacities(draft_window, control)
    config = draft.config.model_copy(update={"control": "plain"})
    snap = dataclasses.replace(draft, capacities=capacities, config=config)
    card = cards(render_status_page({"draft": snap}, history, 180.0))["draft"]
    assert "KV-cache headroom</dt><dd>100% of 5,461 blocks" in card
    assert "draft takes</dt><dd>2,731 blocks (33.3%), measured against plain" in card
    per_request = capacities["tiny-llama"].blocks_per_request
    assert per_request is not None
    held, without = 5461 / per_request, 8192 / per_request
    shown = f"{math.floor(held):,} requests · {math.floor(without):,} without the draft"
    assert held != math.floor(held) and f"KV cache holds</dt><dd>{shown}" in card  # floored


def test_the_page_shows_p99_tpot_beside_the_verdict_with_its_slo_and_basis() -> None:
    html, monitors, _ = fixture_page()
    shown = cards(html)
    # The p99 of the two recorded pages' bucket growth (the quantile Prometheus computes:
    # tests/test_quantiles.py), in the card's first figure, against the SLO of 2 ms.
    first, second = (parse(page(name)).models["tiny-llama"] for name in PAGES["ngram"])
    grown = delta(first, second, (0.0,)).time_per_output_token
    assert grown is not None
    p99 = bucket_quantile(0.99, grown.buckets)
    assert p99 is not None and p99 > 0.002
    card = shown["ngram"]
    assert f"p99 TPOT</dt><dd>{p99 * 1000:.1f} ms (SLO 2.0 ms: broken)" in card
    # No control: the latency verdict is modelled from the mean speedup, and says so.
    speedup = monitors["ngram"].snapshot.assessments["tiny-llama"].speedup_ratio
    assert speedup is not None
    effect = "worse" if speedup < 1 else "better"
    factor = 1 / speedup if speedup < 1 else speedup
    assert f"speculation makes p99 TPOT {factor:.1f}x {effect} here (modelled: 1 / the" in card
    # Without speculation there is a p99 and no latency verdict.
    assert "p99 TPOT</dt><dd>" in shown["plain"] and "speculation makes" not in shown["plain"]


@pytest.mark.parametrize(
    ("basis", "source", "said"),
    [
        ("measured", "control", "measured against its control ctl</span>"),
        ("calibrated", "control", "estimated from its control ctl's plain decoding · speedup"),
        ("calibrated", "baseline", "estimated from its own windows before speculation was on"),
        ("profile", "profile", "estimated from the stored profile llama-h100 · speedup"),
        ("profile", "sweep", "the stored profile llama-h100 (a benchmark sweep) · speedup"),
    ],
)
def test_each_verdict_says_how_it_was_reached(basis: str, source: str, said: str) -> None:
    """A reader acts on a tax measured or calibrated; one on defaults is a guess."""
    _, monitors, history = fixture_page()
    snapshot = monitors["heavy-draft"].snapshot
    (model, a), *_ = snapshot.assessments.items()
    measured = 0.8 if basis == "measured" else None
    changed = dataclasses.replace(
        a,
        verdict_basis=basis,
        model_source=source,
        speedup_measured_ratio=measured,
        speedup_low_ratio=measured or a.speedup_low_ratio,
        speedup_high_ratio=measured or a.speedup_high_ratio,
    )
    config = snapshot.config.model_copy(update={"control": "ctl", "profile": "llama-h100"})
    fields = {**_fields(snapshot), "config": config, "assessments": {model: changed}}
    page_ = render_status_page({"e": type(snapshot)(**fields)}, history, 180.0)
    card = cards(page_)["e"]
    assert said in card and f'data-basis="{basis}"' in card
    if basis != "measured":  # with a control configured, why it is not measured yet
        assert "measured once a full window has 10 finished requests on each side" in card
        assert "no control" not in card  # issue 32: the card denied the control it had


def test_a_guess_with_a_control_configured_says_it_waits_for_it() -> None:
    _, monitors, history = fixture_page()
    snapshot = monitors["ngram"].snapshot
    config = snapshot.config.model_copy(update={"control": "ctl"})
    fields = {**_fields(snapshot), "config": config}
    card = cards(render_status_page({"e": type(snapshot)(**fields)}, history, 180.0))["e"]
    assert "a guess, until its control ctl is measured (a full window with 10" in card
    assert "no control" not in card


def test_an_uncertain_card_says_what_it_turns_on_and_what_would_settle_it() -> None:
    """The words are settle.py's, for this endpoint: the same `spectax assess` prints."""
    html, monitors, _ = fixture_page()
    shown = cards(html)
    ngram = monitors["ngram"].snapshot
    a = ngram.assessments["tiny-llama"]
    said = turns_on(a)
    assert a.verdict == "uncertain" and said is not None
    steps = settle_steps(Target("ngram", "tiny-llama", "http://h:1", method="ngram"), a)
    assert [s.split(":", 1)[0] for s in steps] == ["a control", "a sweep", "a baseline"]
    card = shown["ngram"]
    assert f"it turns on this: {escape(said)}" in card
    assert "What would settle it, cheapest first:" in card
    assert all(f"<li>{escape(step)}</li>" in card for step in steps)
    assert "control: ngram-control" in card and "--base-url http://h:1 " in card
    assert "what is this?" in card
    # Served by spectax itself (tests/test_served_docs.py opens it), not a file:// link.
    assert DOCS_URL == "/docs/economics#what-an-uncertain-verdict-turns-on"
    assert f'<a href="{DOCS_URL}">what is this?</a>' in card
    for settled in ("heavy-draft", "idle", "plain"):  # a tax or no speculation: nothing to settle
        assert "data-settle" not in shown[settled]


def test_a_break_even_above_1_is_shown_as_no_acceptance_pays_here() -> None:
    _, monitors, history = fixture_page()
    snapshot = monitors["idle"].snapshot
    (model, a), *_ = snapshot.assessments.items()
    changed = dataclasses.replace(a, no_acceptance_pays=True, breakeven_acceptance_ratio=None)
    fields = {**_fields(snapshot), "assessments": {model: changed}}
    card = cards(render_status_page({"e": type(snapshot)(**fields)}, history, 180.0))["e"]
    assert "accepted; no acceptance pays at this load</dd>" in card and "above —" not in card


def test_a_hostile_model_name_is_shown_as_text_never_as_markup() -> None:
    html, _, _ = fixture_page()
    assert "<img" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;&amp;&quot;" in cards(html)["hostile"]


def test_the_page_is_self_contained_refreshes_itself_and_has_no_script() -> None:
    html, _, _ = fixture_page()
    assert '<meta http-equiv="refresh" content="30">' in html
    assert "<script" not in html.lower() and "@import" not in html and "url(" not in html
    refs = re.findall(r"""\b(?:src|href)\s*=\s*["']([^"']*)["']""", html)
    fetched = re.findall(r"""\bsrc\s*=\s*["']([^"']*)["']""", html)
    assert fetched == []  # a link is followed by a person; nothing is loaded with the page
    local = ("/", "#", RUNBOOK_URL, *([DOCS_URL] if DOCS_URL else []))
    assert {r for r in refs if not r.startswith(local)} == {"data:,"}
    assert "prefers-color-scheme:dark" in html


def test_past_100_endpoints_the_worst_are_shown_and_the_rest_counted() -> None:
    endpoints = [{"name": f"e{i:03}", "url": f"http://h:{i + 1}"} for i in range(105)]
    settings = validate({"endpoints": endpoints})
    monitors = monitors_of(settings)  # none priced
    monitors["e104"].observe_failure(ScrapeError("connect", "connection refused"), 0.01)
    html = render_status_page({n: m.snapshot for n, m in monitors.items()}, StatusHistory(), 0.0)
    shown = cards(html)
    assert len(shown) == 100 and next(iter(shown)) == "e104"  # down, so first
    assert "5 more endpoint(s)" in html


def test_the_history_keeps_a_point_per_step_and_forgets_removed_endpoints() -> None:
    _, monitors, history = fixture_page()
    points = history.points("ngram")
    assert [p.at for p in points] == [60.0, 120.0]  # the first page opens no window
    assert points[-1].acceptance == pytest.approx(564 / 740, rel=1e-6)
    small = StatusHistory(step_seconds=1.0, points=3)
    for at in range(5):
        snapshot = monitors["ngram"].snapshot
        small.record(
            "ngram", type(snapshot)(**{**_fields(snapshot), "last_success_timestamp": float(at)})
        )
    assert [p.at for p in small.points("ngram")] == [2.0, 3.0, 4.0]  # the ring wraps
    render_status_page({}, small, 10.0)
    assert small.points("ngram") == []


def _fields(snapshot: Any) -> dict[str, Any]:
    return {name: getattr(snapshot, name) for name in snapshot.__slots__}


# ---------------------------------------------------------------- in Chromium, live


@pytest.fixture
async def demo(tmp_path: Path) -> AsyncIterator[Spectax]:
    """`spectax run` over the demo's simulated servers at 4x speed, 1 s scrapes, 6 s windows."""
    async with await start_simulated_servers(DEMO_PROFILES, speed=4.0) as fleet:
        port = free_port()
        endpoints = demo_endpoints(dict(fleet.urls), DEMO_PROFILES)
        spectax = Spectax(write_config(tmp_path, port, endpoints, window="6s"), port)
        await spectax.start()
        try:
            yield spectax
        finally:
            assert await spectax.stop() == 0


def verdicts_of(m: Samples) -> dict[tuple[str, str], tuple[str, str]]:
    """(verdict, basis) per (endpoint, model) as /metrics says (spectax_verdict_info)."""
    found: dict[tuple[str, str], tuple[str, str]] = {}
    for (name, labels), v in m.items():
        if name == "spectax_verdict_info" and v == 1:
            label = dict(labels)
            found[(label["endpoint"], label["model"])] = (label["verdict"], label["basis"])
    return found


SHOWN = """JSON.stringify({
  verdicts: [...document.querySelectorAll("[data-model]")].map(e => [
    e.closest("[data-endpoint]").dataset.endpoint, e.dataset.model, e.dataset.verdict,
    e.dataset.basis]),
  charts: document.querySelectorAll("svg.chart").length,
  width: document.documentElement.scrollWidth,
  background: getComputedStyle(document.body).backgroundColor})"""


async def look(browser: Browser, url: str, dark: bool, shot: Path) -> dict[str, Any]:
    """Load `url` at 800 px wide (light or dark), screenshot it; what the page shows, and
    every URL the browser requested for it."""
    async with browser.page() as tab:
        await tab.call("Page.enable")
        await tab.call("Network.enable")
        await tab.call(
            "Emulation.setDeviceMetricsOverride",
            width=800,
            height=900,
            deviceScaleFactor=1,
            mobile=False,
        )
        scheme = "dark" if dark else "light"
        features = [{"name": "prefers-color-scheme", "value": scheme}]
        await tab.call("Emulation.setEmulatedMedia", features=features)
        await tab.call("Page.navigate", url=url)
        await asyncio.wait_for(tab.loaded.wait(), 30)
        result = await tab.call("Runtime.evaluate", expression=SHOWN, returnByValue=True)
        shown: dict[str, Any] = json.loads(result["result"]["value"])
        await tab.screenshot(shot, 800)
        return {**shown, "requested": tab.requested()}


def engine_of(name: str) -> str:
    return DEMO_PROFILES[name].serving_engine


@pytest.mark.e2e
async def test_the_demos_status_page_in_chromium_shows_the_verdicts_of_metrics(
    demo: Spectax, artifacts: Path
) -> None:
    binary = chromium()

    # The mixed fleet: every speculating endpoint gets a verdict; those whose engine counts
    # drafted tokens (vLLM, TensorRT-LLM) a modelled speedup and a chart of it.
    speculating = {n for n, p in DEMO_PROFILES.items() if p.speculative}
    drafted = {n for n in speculating if "draft_tokens" not in not_exposed(engine_of(n))}

    def speculating_assessed(m: Samples) -> bool:
        return all(
            value(m, "spectax_speedup_ratio", endpoint=e, method="modeled") is not None
            for e in drafted
        ) and speculating <= {e for e, _ in verdicts_of(m)}

    await demo.wait_for(speculating_assessed)
    async with Browser(binary) as browser:

        async def agrees() -> dict[str, Any] | None:
            """The page against /metrics read just before and just after it (a scrape a
            second may turn a verdict between two reads: then look again)."""
            before = verdicts_of(await demo.metrics())
            light = await look(browser, f"{demo.url}/", False, artifacts / "status-page.png")
            after = verdicts_of(await demo.metrics())
            shown = {(e, m): (v, b) for e, m, v, b in light["verdicts"] if b}
            charted = light["charts"] == len(drafted)  # each with a modelled speedup
            return light if charted and before == after == shown else None

        light = await wait_until(agrees, 30, "the page's verdicts to equal /metrics'", [demo])
        dark = await look(browser, f"{demo.url}/", True, artifacts / "status-page-dark.png")
    verdicts = {v for _, _, v, _ in light["verdicts"]}
    weighed = {e for e, _, v, b in light["verdicts"] if b}
    assert weighed == speculating  # vLLM's two, SGLang's, TensorRT-LLM's, TGI's
    assert "no_speculation" in verdicts  # chat-control, the tax's control, speculates not
    for seen in (light, dark):
        assert seen["requested"] and all(
            urlsplit(u).hostname == "127.0.0.1" for u in seen["requested"]
        ), seen["requested"]
        assert seen["width"] <= 800  # readable at 800 px: nothing runs off to the right
    assert light["background"] != dark["background"]  # dark mode is honoured
    assert (artifacts / "status-page.png").read_bytes().startswith(b"\x89PNG")


def test_the_monthly_review_command_is_the_one_that_works_here(tmp_path) -> None:
    """The header said `spectax report --config YOUR-CONFIG.yml` in the demo, which has no
    configuration file: its month is `spectax demo --history 30d`'s."""
    _, monitors, history = fixture_page()
    snapshots = {n: m.snapshot for n, m in monitors.items()}
    demo = render_status_page(snapshots, history, 180.0)
    assert "spectax demo --history 30d, then: spectax report --format html" in demo
    config = tmp_path / "spectax.yml"
    run = render_status_page(snapshots, history, 180.0, config)
    assert f"spectax report --config {config} --format html --out report.html" in run
    assert "YOUR-CONFIG" not in demo + run


def test_a_measured_verdicts_plain_decoding_is_its_controls_not_the_defaults() -> None:
    """The demo's measured tax read "plain decoding estimated from: spectax's defaults"."""
    _, monitors, history = fixture_page()
    snapshot = monitors["heavy-draft"].snapshot
    (model, a), *_ = snapshot.assessments.items()
    changed = dataclasses.replace(
        a, verdict_basis="measured", speedup_measured_ratio=0.8, model_source="configured"
    )
    config = snapshot.config.model_copy(update={"control": "ctl"})
    fields = {**_fields(snapshot), "config": config, "assessments": {model: changed}}
    card = cards(render_status_page({"e": type(snapshot)(**fields)}, history, 180.0))["e"]
    assert "plain decoding estimated from</dt><dd>measured on its control ctl" in card
    assert "spectax's defaults" not in card


def test_each_card_shows_its_models_load_curve_with_the_crossover_and_a_stalled_load() -> None:
    """Under the card, a row per load bin of the stored windows (spectax.curve_book): time,
    speedup with its basis, net, the rate per request and the drafted tokens per step; the
    stalled bin marked, the crossover in the caption. Only the card of the curve's endpoint
    has it."""
    _, monitors, history = fixture_page()

    def windows(
        running: float, speedup: float, rate: float, net: float, per_step: float = 2.0
    ) -> list[LoadSample]:
        output = rate * running * 300.0
        return [
            LoadSample(
                end=300.0 * i,
                seconds=300.0,
                concurrency=running,
                output_tokens=output,
                accepted_tokens=output / 2,
                draft_tokens=per_step * output / 2,  # output - accepted: the steps
                drafts=output / 2,
                plain_busy_seconds=300.0 * speedup,
                assessed_busy_seconds=300.0,
                low_busy_seconds=300.0 * (speedup - 0.05),
                high_busy_seconds=300.0 * (speedup + 0.05),
                basis="profile",
                savings_usd=net,
            )
            for i in range(3)
        ]

    curve = load_curve(
        windows(4.0, 1.4, 29.0, 0.5)
        + windows(8.0, 0.6, 12.0, -0.25)
        + windows(16.0, 0.8, 20.0, -0.1, per_step=0.0)  # a K schedule's 0 from 16
    )
    snapshots = {n: m.snapshot for n, m in monitors.items()}
    key = ("ngram", "tiny-llama")
    schedule = draft_schedule(curve, engine="vllm")
    html = render_status_page(
        snapshots, history, 180.0, curves={key: curve}, schedules={key: schedule}
    )
    card = cards(html)["ngram"]
    table = card[card.index('<table class="curve" data-model="tiny-llama">') :]
    assert "a tax from 8 running requests, 67% of the time" in table
    rows = re.findall(r'<tr class="(\w+)" data-running="(\d+)"><td>([^<]*)</td>', table)
    assert rows == [("bin", "4", "4-7"), ("stalled", "8", "8-15"), ("bin", "16", "16-31")]
    assert "<td>33%</td><td>0.60× (profile)</td>" in table
    assert "<td>−$0.750</td><td>12.0 stalled</td>" in table  # 3 windows of -$0.25
    assert "<td>20.0</td><td>0.00</td><td>0</td></tr>" in table  # drafted nothing; K off
    # No per-position counts: no K to choose where it pays, 0 where it is a tax; the line
    # under the table gives the schedule by batch size and the advice.
    assert "12.0 stalled</td><td>2.00</td><td>0</td></tr>" in table
    line = table[table.index('<p class="schedule" data-model="tiny-llama">') :]
    assert f"K by batch size: {ranges_text(schedule.ranges)}. {schedule.advice}" in line
    assert all('class="curve"' not in c for n, c in cards(html).items() if n != "ngram")
