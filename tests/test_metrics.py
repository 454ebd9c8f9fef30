"""The collector and the HTTP endpoints: what a Prometheus scrape of spectax sees."""

from __future__ import annotations

import gzip
import logging
import math
import socket
from dataclasses import replace
from decimal import Decimal

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from builders import monitors_of
from recorded_pages import page, reference_values
from spectax.config import validate
from spectax.economics import MIN_STEP_OVERHEAD_RATIO
from spectax.endpoint import EndpointMonitor
from spectax.exposition import FAMILIES, Page, SnapshotCollector, StoreStatus
from spectax.scrape import ScrapeError, fetch, scrape_session
from spectax.web import make_app


def monitors(*endpoints: dict[str, object]) -> dict[str, EndpointMonitor]:
    return monitors_of(validate({"window": "5m", "endpoints": list(endpoints)}))


def registry_for(ms: dict[str, EndpointMonitor]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        SnapshotCollector(lambda: {n: m.snapshot for n, m in ms.items()}, lambda: StoreStatus(3, 1))
    )
    return registry


SPEC = {"method": "ngram"}


def test_values_and_absences() -> None:
    ms = monitors(
        {"name": "paid", "url": "http://h:1", "price": {"usd_per_hour": 4}, "speculation": SPEC},
        {"name": "unpriced", "url": "http://h:2", "speculation": SPEC},
        {"name": "idle", "url": "http://h:3", "price": {"usd_per_hour": 4}, "speculation": SPEC},
    )
    for name in ("paid", "unpriced"):
        ms[name].observe_page(0, page("spec_ngram_0_before_traffic.txt"), 0.02)
        ms[name].observe_page(60, page("spec_ngram_3_after.txt"), 0.03)
    # running, but high-temperature text: n-gram proposes nothing
    ms["idle"].observe_page(0, page("spec_ngram_inflight_running_waiting.txt"), 0.01)
    ms["idle"].observe_page(60, page("spec_ngram_inflight_after.txt"), 0.01)
    r = registry_for(ms)

    def get(name: str, **labels: str) -> float | None:
        return r.get_sample_value(name, labels)

    paid = {"endpoint": "paid", "model": "tiny-llama"}
    assert get("spectax_acceptance_ratio", **paid) == pytest.approx(564 / 740)
    assert get("spectax_acceptance_length_tokens", **paid) == pytest.approx(1 + 564 / 216)
    assert get("spectax_position_acceptance_ratio", position="3", **paid) == pytest.approx(90 / 216)
    assert get("spectax_speedup_ratio", method="modeled", **paid) > 1
    assert get("spectax_speedup_ratio", method="measured", **paid) is None  # no control
    assert get("spectax_spend_usd_total", endpoint="paid", basis="estimated") == pytest.approx(
        4 * 60 / 3600
    )
    assert get("spectax_cost_per_million_output_tokens_usd", scenario="actual", **paid) > 0
    assert get("spectax_ridge_batch_requests", endpoint="paid", source="configured") == 32
    assert get("spectax_endpoint_up", endpoint="paid") == 1
    assert get("spectax_scrape_duration_seconds", endpoint="paid") == 0.03
    assert get("spectax_output_tokens_total", **paid) == 2186
    # an endpoint without a price has economics but no money, not a $0
    unpriced = {"endpoint": "unpriced", "model": "tiny-llama"}
    assert get("spectax_speedup_ratio", method="modeled", **unpriced) is not None
    for name in ("spectax_cost_per_million_output_tokens_usd",):
        assert get(name, scenario="actual", **unpriced) is None
    assert get("spectax_speculation_savings_usd_per_hour", **unpriced) is None
    assert get("spectax_spend_usd_total", endpoint="unpriced", basis="estimated") is None
    # no drafts: no acceptance, but a price (§3b): at the default h = 0.1 a tax, and with h
    # anywhere in its plausible [h_min, 3] a tax too: the band's top is the speedup at h_min
    # and the smallest B* (B*/4), below 1, so the verdict is tax on the defaults alone
    idle = {"endpoint": "idle", "model": "tiny-llama"}
    assert get("spectax_acceptance_ratio", **idle) is None
    rb = 32 / 1.0  # B* configured over one request running on average
    s = (rb + 1) / (rb * 1.1 + 1)
    assert get("spectax_speedup_ratio", method="modeled", **idle) == pytest.approx(s)
    assert get("spectax_speculation_savings_usd_per_hour", **idle) == pytest.approx(4 * (s - 1))
    assert get("spectax_speedup_band_ratio", bound="low", **idle) < 0.5
    top = (rb / 4 + 1) / (rb / 4 * (1 + MIN_STEP_OVERHEAD_RATIO) + 1)
    assert get("spectax_speedup_band_ratio", bound="high", **idle) == pytest.approx(top)
    assert get("spectax_verdict_info", verdict="tax", basis="default", **idle) == 1
    # what it turns on: a tax at any h above 0, and at no B*; no acceptance priced, no K run
    assert get("spectax_breakeven_step_overhead_ratio", **idle) == pytest.approx(0.0, abs=1e-9)
    assert get("spectax_breakeven_ridge_batch_requests", **idle) is None
    assert get("spectax_no_acceptance_pays", **idle) is None
    assert get("spectax_breakeven_acceptance_ratio", **idle) is None
    assert get("spectax_speculative_tokens", **idle) is None
    verdicts = [
        v
        for v in ("pays", "tax", "uncertain")
        if get("spectax_verdict_info", verdict=v, basis="default", **paid) == 1
    ]
    assert len(verdicts) == 1  # one verdict, on the default basis: no control, no profile
    assert get("spectax_model_info", endpoint="idle", source="configured", profile="") == 1
    # the larger of the gauge's (2 + 0) / 2 and the time vLLM spent on its requests between
    # the pages (decode and prefill: 13 request-seconds), over the 60 s
    ran = [
        sum(
            reference_values(page(name))[f"vllm:{sums}_seconds_sum"]["tiny-llama"]
            for sums in ("inter_token_latency", "request_prefill_time")
        )
        for name in ("spec_ngram_inflight_running_waiting.txt", "spec_ngram_inflight_after.txt")
    ]
    assert 0 < ran[1] - ran[0] < 60
    assert get("spectax_concurrency_requests", **idle) == pytest.approx(1.0)
    assert get("spectax_store_pending_windows") == 3
    assert get("spectax_store_write_errors_total") == 1

    text = generate_latest(r).decode()
    assert "NaN" not in text
    for family in text_string_to_metric_families(text):
        assert family.name in FAMILIES or f"{family.name}_total" in FAMILIES
        for sample in family.samples:
            assert not math.isnan(sample.value)


def test_what_a_verdict_turns_on_is_exported_from_the_windows_own_assessment() -> None:
    """The break-even h and B*, the draft length run and the speedup at the recommended one
    are the assessment's figures, not recomputed; a break-even acceptance above 1 is never
    shown: spectax_no_acceptance_pays says so instead."""
    ms = monitors({"name": "paid", "url": "http://h:1", "speculation": SPEC})
    ms["paid"].observe_page(0, page("spec_ngram_0_before_traffic.txt"), 0.02)
    ms["paid"].observe_page(60, page("spec_ngram_3_after.txt"), 0.03)
    found = ms["paid"].snapshot.assessments["tiny-llama"]
    r = registry_for(ms)
    labels = {"endpoint": "paid", "model": "tiny-llama"}
    expected = {
        "spectax_breakeven_step_overhead_ratio": found.breakeven_step_overhead_ratio,
        "spectax_breakeven_ridge_batch_requests": found.breakeven_ridge_batch_requests,
        "spectax_speculative_tokens": found.speculative_tokens,
        "spectax_recommended_speedup_ratio": found.recommended_speedup_ratio,
        "spectax_breakeven_acceptance_ratio": found.breakeven_acceptance_ratio,
        "spectax_no_acceptance_pays": 0.0,
    }
    assert None not in expected.values()
    assert {name: r.get_sample_value(name, labels) for name in expected} == expected
    assert found.speculative_tokens == 4  # the fixture's four positions counted

    # The same window where the overhead alone outweighs any acceptance.
    snap = ms["paid"].snapshot
    beyond = replace(found, breakeven_acceptance_ratio=None, no_acceptance_pays=True)
    ms["paid"].snapshot = replace(snap, assessments={"tiny-llama": beyond})
    r = registry_for(ms)
    assert r.get_sample_value("spectax_no_acceptance_pays", labels) == 1
    assert r.get_sample_value("spectax_breakeven_acceptance_ratio", labels) is None


def test_page_without_engine_metrics_is_a_clear_state(caplog) -> None:
    ms = monitors({"name": "quiet", "url": "http://h:1", "price": {"usd_per_hour": 4}})
    caplog.set_level(logging.WARNING)
    for t in (0, 15, 30):
        ms["quiet"].observe_page(t, page("spec_ngram_disable_log_stats_3_after.txt"), 0.01)
    r = registry_for(ms)
    assert r.get_sample_value("spectax_endpoint_up", {"endpoint": "quiet"}) == 1
    assert r.get_sample_value("spectax_engine_metrics_present", {"endpoint": "quiet"}) == 0
    warnings = [r.getMessage() for r in caplog.records if "no engine metrics" in r.getMessage()]
    assert len(warnings) == 1 and "--disable-log-stats" in warnings[0]
    # spend accrues all the same: two 15 s intervals at 4 USD/h, each rounded to 1e-9 USD
    assert ms["quiet"].snapshot.spend_usd_total == 2 * Decimal("0.016666667")


def test_a_down_endpoint_is_not_a_page_without_engine_metrics() -> None:
    """Both read spectax_engine_metrics_present 0: an on-call engineer could not tell a dead
    server from `--disable-log-stats`. Down, the series is absent (unknown)."""
    ms = monitors({"name": "gone", "url": "http://h:1"})
    ms["gone"].observe_page(0, page("spec_ngram_2_mid.txt"), 0.01)
    assert (
        registry_for(ms).get_sample_value("spectax_engine_metrics_present", {"endpoint": "gone"})
        == 1
    )
    ms["gone"].observe_failure(ScrapeError("connection", "connection refused"), 0.01)
    r = registry_for(ms)
    assert r.get_sample_value("spectax_endpoint_up", {"endpoint": "gone"}) == 0
    assert r.get_sample_value("spectax_engine_metrics_present", {"endpoint": "gone"}) is None


def test_malformed_page_marks_the_endpoint_down_and_counts_a_parse_failure() -> None:
    ms = monitors({"name": "bad", "url": "http://h:1"})
    ms["bad"].observe_page(0, 'vllm:generation_tokens_total{model_name="m"} x\n', 0.01)
    r = registry_for(ms)
    assert r.get_sample_value("spectax_endpoint_up", {"endpoint": "bad"}) == 0
    labels = {"endpoint": "bad", "reason": "parse"}
    assert r.get_sample_value("spectax_scrape_failures_total", labels) == 1
    assert "line 1" in (ms["bad"].snapshot.last_error or "")


async def test_http_endpoints() -> None:
    ms = monitors({"name": "a", "url": "http://h:1", "speculation": SPEC})
    ready = {"value": False}
    app = make_app(registry_for(ms), lambda: ready["value"], lambda: [("a", False, "timeout <x>")])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    base = f"http://{host}:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/-/healthy") as r:
                assert r.status == 200
            async with session.get(f"{base}/-/ready") as r:
                assert r.status == 503
            ready["value"] = True
            async with session.get(f"{base}/-/ready") as r:
                assert r.status == 200
            async with session.get(f"{base}/") as r:
                body = await r.text()
                assert "/metrics" in body and "timeout &lt;x&gt;" in body  # escaped
            async with session.get(f"{base}/metrics") as r:
                assert r.headers["Content-Type"].startswith("text/plain")
                assert "spectax_build_info" in await r.text()
            headers = {"Accept": "application/openmetrics-text; version=1.0.0"}
            async with session.get(f"{base}/metrics", headers=headers) as r:
                assert r.headers["Content-Type"].startswith("application/openmetrics-text")
                assert (await r.text()).endswith("# EOF\n")
    finally:
        await runner.cleanup()


# What Prometheus 2.42 sends when it scrapes a target.
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


async def test_prometheus_gets_the_prerendered_text_format_gzipped() -> None:
    """Prometheus prefers OpenMetrics but takes the text format: it gets the text format,
    from the pre-rendered path (the generic encoder is what made /metrics take a second
    with 2,000 endpoints), gzipped when asked, with the same samples as the registry's."""
    ms = monitors({"name": "a", "url": "http://h:1", "speculation": SPEC})
    ms["a"].observe_page(0, page("spec_ngram_0_before_traffic.txt"), 0.01)
    ms["a"].observe_page(60, page("spec_ngram_3_after.txt"), 0.01)
    collector = SnapshotCollector(lambda: {"a": ms["a"].snapshot}, lambda: StoreStatus(0, 0))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    rendered: list[bytes] = []

    def render_page() -> Page:
        page = collector.render_page()
        body = b"".join(page.parts)
        rendered.append(body)
        return Page(page.generation, [body])

    app = make_app(registry, lambda: True, lambda: [], render_page=render_page)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            for encoding in ("gzip", "identity"):
                headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": encoding}
                async with session.get(f"http://{host}:{port}/metrics", headers=headers) as r:
                    assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
                    raw = await r.read()
                if encoding == "gzip":
                    assert r.headers["Content-Encoding"] == "gzip"
                    raw = gzip.decompress(raw)
                else:
                    assert "Content-Encoding" not in r.headers
                assert raw == rendered[-1]
                assert _samples(raw.decode()) == _samples(generate_latest(registry).decode())
        # A new snapshot, a new page: its gzip is the new page's, not the kept one's (the
        # gzip is kept by the page's generation, not by the page).
        ms["a"].observe_page(120, page("spec_ngram_3_after.txt"), 0.01)
        headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}
        async with (
            aiohttp.ClientSession(auto_decompress=False) as session,
            session.get(f"http://{host}:{port}/metrics", headers=headers) as r,
        ):
            fresh = gzip.decompress(await r.read())
        assert fresh == rendered[-1] != rendered[0]
    finally:
        await runner.cleanup()
    assert len(rendered) == 3


async def test_a_page_of_many_endpoints_is_served_whole_from_its_parts() -> None:
    """The page is joined or gzipped a few families at a time: what a client gets, gzipped
    or not, is the whole page, every family once, in order."""
    ms = monitors(
        *({"name": f"r{i:02d}", "url": f"http://h:{i + 1}", "speculation": SPEC} for i in range(12))
    )
    for m in ms.values():
        m.observe_page(0, page("spec_ngram_0_before_traffic.txt"), 0.01)
        m.observe_page(60, page("spec_ngram_3_after.txt"), 0.01)
    collector = SnapshotCollector(
        lambda: {n: m.snapshot for n, m in ms.items()}, lambda: StoreStatus(0, 0)
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    assert len(list(collector.render_page().parts)) > 1  # joined or gzipped in parts
    whole = collector.render_text()
    app = make_app(registry, lambda: True, lambda: [], render_page=collector.render_page)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            for encoding in ("gzip", "identity"):
                headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": encoding}
                async with session.get(f"http://{host}:{port}/metrics", headers=headers) as r:
                    raw = await r.read()
                assert (gzip.decompress(raw) if encoding == "gzip" else raw) == whole
    finally:
        await runner.cleanup()
    text = whole.decode()
    assert [text.count(f"# TYPE {name} ") for name in FAMILIES] == [1] * len(FAMILIES)
    assert _samples(text) == _samples(generate_latest(registry).decode())


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_fast_text_exposition_says_what_the_collector_says() -> None:
    """The pre-rendered text path and prometheus_client's own rendering agree, sample for
    sample, including model names that need escaping; and a changed snapshot is re-rendered."""
    odd = 'tiny "llama" \\ v2\nlora'  # a quote, a backslash and a newline
    escaped = odd.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    ms = monitors(
        {"name": "paid", "url": "http://h:1", "price": {"usd_per_hour": 4}, "speculation": SPEC},
        {
            "name": "plain",
            "url": "http://h:2",
            "billing_mode": "serverless",
            "price": {"usd_per_hour": 1.5},
        },
    )
    before = page("spec_ngram_0_before_traffic.txt").replace('"tiny-llama"', f'"{escaped}"')
    after = page("spec_ngram_3_after.txt").replace('"tiny-llama"', f'"{escaped}"')
    ms["paid"].observe_page(0, before, 0.02)
    ms["paid"].observe_page(60, after, 0.03)
    ms["plain"].observe_page(0, page("nospec_0_before_traffic.txt"), 0.01)
    ms["plain"].observe_page(60, page("nospec_3_after.txt"), 0.01)
    collector = SnapshotCollector(
        lambda: {n: m.snapshot for n, m in ms.items()}, lambda: StoreStatus(0, 0)
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    fast = collector.render_text().decode()
    assert _samples(fast) == _samples(generate_latest(registry).decode())
    model = {n: v for n, v in _samples(fast).items() if n[0] == "spectax_acceptance_ratio"}
    assert [dict(labels)["model"] for _, labels in model] == [odd]

    ms["paid"].observe_page(120, after, 0.5)  # a new snapshot: no traffic in this interval
    again = collector.render_text().decode()
    assert _samples(again) == _samples(generate_latest(registry).decode())
    assert _samples(again) != _samples(fast)

    # The settings families are formatted again only when what they show changed (issue
    # 31): a failure, then a page again, must move the failure count on the text path too.
    failures = ("spectax_scrape_failures_total", (("endpoint", "paid"), ("reason", "timeout")))
    assert _samples(again)[failures] == 0
    ms["paid"].observe_failure(ScrapeError("timeout", "no answer"), 10.0)
    ms["paid"].observe_page(180, after, 0.5)
    later = collector.render_text().decode()
    assert _samples(later) == _samples(generate_latest(registry).decode())
    assert _samples(later)[failures] == 1


async def test_a_failed_connect_reads_as_what_happened_not_as_aiohttp_wrote_it() -> None:
    """aiohttp says "Cannot connect to host 127.0.0.1:N ssl:default [Connect call failed
    ('127.0.0.1', N)]", ssl:default even for plain http. The status page, the log and
    check-config --probe show this message."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed at the end of the block: nothing listens
    async with scrape_session() as session:
        with pytest.raises(ScrapeError) as refused:
            await fetch(session, f"http://127.0.0.1:{port}/metrics", 5.0, 1 << 20)
        with pytest.raises(ScrapeError) as unknown:
            await fetch(session, "http://spectax-no-such-host.invalid/metrics", 5.0, 1 << 20)
    assert refused.value.reason == "connection"
    assert str(refused.value) == (
        f"http://127.0.0.1:{port}/metrics: connection refused (nothing listening on "
        f"127.0.0.1:{port})"
    )
    assert "cannot resolve spectax-no-such-host.invalid" in str(unknown.value)
    for text in (str(refused.value), str(unknown.value)):
        assert "ssl:default" not in text and "Connect call failed" not in text
