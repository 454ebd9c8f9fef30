"""The whole `/metrics` page, line by line, against a golden file (node_exporter's e2e-output.txt).

The demo's simulated mixed fleet (`spectax.simulate.DEMO_PROFILES`, fixed seeds: three
vLLM servers, an SGLang, a TensorRT-LLM, a TGI and a llama.cpp one, each page its engine's
shape), configured as `spectax demo` configures them (prices, control,
speculation, draft weights), are scraped every 15 s for ten minutes of a frozen
clock: the sliding window is full, history windows have closed, chat-creative is
measured against its control, and its engine restarts once (two refused scrapes,
a cold start). The load curves are those of the closed windows, as the daemon bins the
stored ones. The page the collector then serves on `/metrics` (the text
format, `SnapshotCollector.render_text`) must equal tests/fixtures/e2e-output.txt
line for line, and `promtool check metrics` must find nothing to say about it.
Nothing on the page comes from the machine: the clock, the build labels, the
reload time and the billing snapshot are passed in.

Regenerate the golden file with

    SPECTAX_UPDATE_GOLDEN=1 pytest tests/test_golden_metrics.py

and commit it with the change that caused it. That is legitimate when what
`/metrics` shows changes on purpose: a new family or label, a reworded help
text, an economics or simulator change whose figures move for a stated reason;
the golden diff is then part of the review. It is not legitimate to make a
refactoring pass (a refactoring changes no line of this file), nor to accept
figures that moved without a reason you can name.
"""

from __future__ import annotations

import difflib
import os
from decimal import Decimal
from pathlib import Path

import pytest

from promstack import run_tool
from spectax.billing.coordinator import BillingSnapshot, SourceStatus
from spectax.config import validate
from spectax.curve_book import speculating_curves
from spectax.economics.load_curve import LoadSample, sample_of
from spectax.endpoint import EndpointMonitor
from spectax.exposition import ReloadStatus, SnapshotCollector, StoreStatus
from spectax.scrape import ScrapeError
from spectax.simulate import DEMO_PROFILES, SimulatedVllm
from spectax.simulate.demo_fleet import DEMO_DEFAULTS, demo_settings

GOLDEN = Path(__file__).parent / "fixtures" / "e2e-output.txt"
UPDATE = os.environ.get("SPECTAX_UPDATE_GOLDEN") == "1"

START = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC, the frozen clock's first scrape
SCRAPE_SECONDS = 15.0
SCRAPES = 41  # ten minutes: ten closed one-minute history windows
END = START + (SCRAPES - 1) * SCRAPE_SECONDS  # the last scrape
RESTART_AT = 8  # chat-creative's engine restarts before this scrape (30 s cold start)
RESTARTED = "chat-creative"
FETCH_SECONDS = 0.004  # the scrape duration every successful fetch reports
REFUSED_SECONDS = 0.002  # the same for the 503s of a loading engine


def demo_page() -> str:
    """What `/metrics` serves after the scrapes above, at the frozen clock."""
    base = validate({**DEMO_DEFAULTS, "scrape_interval": "15s"}, "<golden>")
    urls = {name: f"http://127.0.0.1:{18001 + i}" for i, name in enumerate(DEMO_PROFILES)}
    settings = demo_settings(base, urls)
    monitors: dict[str, EndpointMonitor] = {}
    closed: dict[tuple[str, str], list[LoadSample]] = {}  # the load curves' windows
    for endpoint in settings.config.endpoints:
        control = endpoint.control
        monitors[endpoint.name] = EndpointMonitor(
            endpoint,
            settings.usd_per_hour.get(endpoint.name),
            settings.config.window,
            control_window=(lambda c=control: monitors[c].window()) if control else None,
        )
    servers = {name: SimulatedVllm(profile, START) for name, profile in DEMO_PROFILES.items()}
    for scrape in range(SCRAPES):
        now = START + scrape * SCRAPE_SECONDS
        for name, server in servers.items():
            if scrape > 0:
                server.advance(SCRAPE_SECONDS, fast=None)  # as the demo's servers advance
            if scrape == RESTART_AT and name == RESTARTED:
                server.restart()
            if server.ready:
                observed = monitors[name].observe_page(now, server.render(), FETCH_SECONDS)
                for window in observed.closed if observed is not None else ():
                    for model in window.window.models:
                        if (sample := sample_of(window, model)) is not None:
                            closed.setdefault((name, model), []).append(sample)
            else:  # the demo's server answers 503 while the engine loads
                error = ScrapeError("http_status", "HTTP 503 from the simulated server")
                monitors[name].observe_failure(error, REFUSED_SECONDS)
    billing = BillingSnapshot(
        sources=(
            SourceStatus("runpod", "runpod", up=True, last_success=END - 120),
            SourceStatus("focus", "focus", up=False, last_success=END - 3600),
        ),
        billed_usd_total={RESTARTED: Decimal("0.25")},
        drift={"focus": 0.125},
    )
    curves = speculating_curves(closed)
    collector = SnapshotCollector(
        lambda: {name: monitor.snapshot for name, monitor in monitors.items()},
        lambda: StoreStatus(pending_windows=2, write_errors=1, up=True),
        lambda: ReloadStatus(successful=True, success_timestamp=START - 60),
        lambda: billing,
        load_curves=lambda: curves,
        version="0.0.0+golden",
        python_version="3.0.0",
    )
    return collector.render_text().decode()


@pytest.fixture(scope="module")
def page() -> str:
    return demo_page()


def test_metrics_page_is_the_golden_file_line_by_line(page: str) -> None:
    if UPDATE:
        GOLDEN.write_text(page, encoding="utf-8")
        pytest.skip(f"SPECTAX_UPDATE_GOLDEN=1: wrote {GOLDEN}; review its diff before committing")
    expected = GOLDEN.read_text(encoding="utf-8").splitlines()
    served = page.splitlines()
    if served != expected:
        diff = list(difflib.unified_diff(expected, served, str(GOLDEN), "served", lineterm=""))
        gone = sum(1 for line in diff[2:] if line.startswith("-"))
        new = sum(1 for line in diff[2:] if line.startswith("+"))
        pytest.fail(
            f"/metrics differs from the golden file: {gone} lines expected and not served,"
            f" {new} served and not expected (see this module's docstring for when"
            " SPECTAX_UPDATE_GOLDEN=1 is the right answer):\n" + "\n".join(diff),
            pytrace=False,
        )


@pytest.mark.e2e  # runs promtool
def test_promtool_check_metrics_finds_nothing_on_the_page(page: str) -> None:
    """A missing promtool skips here, and fails under SPECTAX_CI=1 (see promstack)."""
    result = run_tool("promtool", "check", "metrics", stdin=page)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not result.stdout.strip() and not result.stderr.strip()
