"""The monthly report's latency section, from stored windows whose buckets are real.

Windows carry the TPOT and TTFT bucket growth between recorded vLLM pages (the draft-model
server, its plain control, the n-gram server); each day holds one half of a server's
traffic, so the month's quantile is the quantile of the whole run's growth, computed
straight from the two end pages: the rollups must add the buckets bound by bound, and the
report must take the quantile of the sum (not average the days' quantiles).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from recorded_pages import page
from report_history import MAY, golden_settings, report_of, stored, window_row, with_buckets
from spectax.engines.base import Histogram
from spectax.engines.vllm import parse
from spectax.pipeline.counts import delta
from spectax.pipeline.quantiles import bucket_quantile
from spectax.report.charts import charts
from spectax.report.html import render_html
from spectax.report.render import render

SERVERS = {  # endpoint: recorded pages (before, midway, after) of the server it stands for
    "creative": ("spec_draft_0_before_traffic", "spec_draft_2_mid", "spec_draft_3_after"),
    "creative-plain": ("nospec_0_before_traffic", "nospec_2_mid", "nospec_3_after"),
    "batch": ("spec_ngram_0_before_traffic", "spec_ngram_2_mid", "spec_ngram_3_after"),
}
POSITIONS = {"creative": (0.3, 0.1), "batch": (0.5, 0.3), "creative-plain": ()}


def grown(endpoint: str, first: int, last: int, field: str) -> Histogram:
    pages = SERVERS[endpoint]
    a, b = (parse(page(f"{pages[i]}.txt")).models["tiny-llama"] for i in (first, last))
    found = getattr(delta(a, b, (0.0,)), field)
    assert found is not None and found.buckets
    return found


def rows() -> list[dict[str, Any]]:
    out = []
    for endpoint in SERVERS:
        for day, (first, last) in ((4, (0, 1)), (5, (1, 2))):
            row = window_row(
                endpoint,
                datetime(2026, 5, day, 10, tzinfo=UTC),
                concurrency=4.0,
                output_tokens=20_000,
                positions=POSITIONS[endpoint],
                c=0.1 if endpoint == "creative" else None,
                usd_per_hour="3",
                billing="serverless",
            )
            for field in ("time_per_output_token", "time_to_first_token"):
                with_buckets(row, field, grown(endpoint, first, last, field))
            out.append(row)
    return out


@pytest.fixture
async def store_url(tmp_path: Path) -> str:
    return await stored(f"sqlite+aiosqlite:///{tmp_path / 'latency.sqlite'}", rows())


def p99(endpoint: str, field: str = "time_per_output_token") -> float:
    found = bucket_quantile(0.99, grown(endpoint, 0, 2, field).buckets)
    assert found is not None
    return found


async def test_the_months_quantile_is_the_quantile_of_its_summed_buckets(store_url: str) -> None:
    report = await report_of(store_url, MAY, golden_settings(store_url))
    by_name = {e.info.name: e for e in report.endpoints}
    creative = by_name["creative"].latency
    assert creative is not None and creative.days_with_buckets == 2
    assert creative.quantiles["tpot"].p99 == pytest.approx(p99("creative"), rel=1e-12)
    assert creative.quantiles["ttft"].p99 == pytest.approx(
        p99("creative", "time_to_first_token"), rel=1e-12
    )
    # With a control: measured, the control's quantile over the same days.
    assert creative.basis == "measured" and creative.control == "creative-plain"
    expected = p99("creative") / p99("creative-plain")
    assert creative.ratio("tpot", "p99") == pytest.approx(expected, rel=1e-12)
    # Without one: modelled, TPOT only.
    batch = by_name["batch"].latency
    assert batch is not None and batch.basis == "modeled"
    assert batch.ratio("ttft", "p99") is None
    ratio = batch.ratio("tpot", "p99")
    assert ratio is not None and batch.modeled_speedup is not None
    assert ratio == pytest.approx(1 / batch.modeled_speedup)
    # The windows' own speedup over the month (a ratio of sums), never a mean of hours'.
    assert batch.modeled_speedup == pytest.approx(by_name["batch"].month.speedup)
    # The plain control has quantiles and no with / without.
    plain = by_name["creative-plain"].latency
    assert plain is not None and plain.basis is None and plain.ratio("tpot", "p99") is None


async def test_the_report_shows_latency_with_its_basis_and_a_chart(store_url: str) -> None:
    report = await report_of(store_url, MAY, golden_settings(store_url))
    md = render(report, "md")
    section = md.split("## Latency: p50, p95 and p99 over the month")[1]
    ratio = p99("creative") / p99("creative-plain")
    assert "| creative | TPOT |" in section
    assert (
        f"{p99('creative') * 1000:,.1f} ms | {ratio:.2f}x | measured against creative-plain |"
        in (section)
    )
    assert "| batch | TPOT |" in section and "modelled from the windows' speedup" in section
    effect = f"{ratio:.1f}x worse" if ratio > 1 else f"{1 / ratio:.1f}x better"
    assert f"**speculation makes p99 TPOT {effect} (measured against creative-plain)**" in section
    assert "a tail modelled from means, not measured" in section
    chart = {c.key: c for c in charts(report)}["latency"]
    assert chart.svg is not None and chart.svg.count("<path") >= 2  # creative and its control
    assert 'id="chart-latency"' in render_html(report)
