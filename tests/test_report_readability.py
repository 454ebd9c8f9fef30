"""The monthly report read as a reader reads it (issue 32): what the figures say in words.

- a quantile in the +Inf bucket is no measured value: it reads "≥ 80 s", not "80,000.0 ms";
- two quantiles in one histogram bucket cannot be told apart: "within one bucket", in the
  report and on the status page (one wording, spectax.economics.latency.effect_words),
  never "unchanged" nor a ratio of two interpolations;
- the capacity chart's legend covers no bar and no label.

The histories are stored windows (SQLite, through the store and the rollups), the buckets
vLLM's TPOT and e2e bounds.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from report_history import (
    MAY,
    fill_golden,
    golden_settings,
    report_of,
    stored,
    window_row,
    with_buckets,
)
from spectax.economics import assess_latency, latency_verdict
from spectax.engines.base import Histogram
from spectax.pipeline.counts import Counts
from spectax.pipeline.quantiles import quantiles
from spectax.pipeline.windows import Window
from spectax.report.charts import capacity_figure
from spectax.report.period import Month
from spectax.report.render import render

TPOT_BOUNDS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
E2E_BOUNDS = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 80.0)


def cumulative(bounds: tuple[float, ...], per_bucket: list[int]) -> list[tuple[float, float]]:
    """Cumulative buckets from the count in each bucket, the last one +Inf's own."""
    assert len(per_bucket) == len(bounds) + 1
    out, total = [], 0
    for bound, n in zip((*bounds, math.inf), per_bucket, strict=True):
        total += n
        out.append((bound, float(total)))
    return out


def tpot(in_bucket: int) -> list[tuple[float, float]]:
    """1,000 requests: 900 under 25 ms, the rest in the 50-75 ms bucket, `in_bucket` of
    them there (so p99 falls in 50-75 ms, interpolated higher the fewer there are)."""
    counts = [0] * (len(TPOT_BOUNDS) + 1)
    counts[1] = 1000 - in_bucket
    counts[3] = in_bucket
    return cumulative(TPOT_BOUNDS, counts)


def e2e_beyond() -> list[tuple[float, float]]:
    """Requests whose p95 and p99 end to end fall beyond 80 s, the largest finite bound."""
    counts = [0] * (len(E2E_BOUNDS) + 1)
    counts[4] = 900
    counts[-1] = 100
    return cumulative(E2E_BOUNDS, counts)


def histogram(buckets: list[tuple[float, float]]) -> Histogram:
    return Histogram(0.0, buckets[-1][1], buckets)


def rows() -> list[dict[str, Any]]:
    """creative (speculating) and its control creative-plain, one day each: both p99 TPOTs
    inside the 50-75 ms bucket (50 requests there against 20), e2e beyond 80 s."""
    out = []
    for endpoint, in_bucket in (("creative", 50), ("creative-plain", 20)):
        row = window_row(
            endpoint,
            datetime(2026, 5, 4, 10, tzinfo=UTC),
            concurrency=4.0,
            output_tokens=20_000,
            positions=(0.3, 0.1) if endpoint == "creative" else (),
            c=0.1 if endpoint == "creative" else None,
            usd_per_hour="3",
            billing="serverless",
        )
        with_buckets(row, "time_per_output_token", histogram(tpot(in_bucket)))
        with_buckets(row, "e2e_request_latency", histogram(e2e_beyond()))
        out.append(row)
    return out


@pytest.fixture
async def store_url(tmp_path: Path) -> str:
    return await stored(f"sqlite+aiosqlite:///{tmp_path / 'readability.sqlite'}", rows())


def latency_section(markdown: str) -> str:
    return markdown.split("## Latency: p50, p95 and p99 over the month")[1].split(
        "\n## ", maxsplit=1
    )[0]


async def test_a_quantile_in_the_inf_bucket_reads_at_least_the_last_bound(store_url: str) -> None:
    report = await report_of(store_url, MAY, golden_settings(store_url))
    section = latency_section(render(report, "md"))
    # p50 is measured (in 10-15 s); p95 and p99 are beyond 80 s: at least that, no value.
    assert "| creative | end to end | 12,777.8 ms | ≥ 80 s | ≥ 80 s |" in section, section
    assert "80,000.0 ms" not in section
    assert "a rank in the +Inf bucket reads ≥ the largest finite bound" in section


async def test_two_p99s_in_one_bucket_read_within_one_bucket(store_url: str) -> None:
    report = await report_of(store_url, MAY, golden_settings(store_url))
    (creative,) = [e for e in report.endpoints if e.info.name == "creative"]
    f = creative.latency
    assert f is not None and f.basis == "measured"
    ratio = f.ratio("tpot", "p99")
    # The interpolations differ by over 5 %: "1.1x worse" without the bucket check.
    assert ratio is not None and ratio > 1.05
    section = latency_section(render(report, "md"))
    assert (
        "**p99 TPOT within one bucket with and without speculation (50–75 ms): the histogram"
        " cannot tell them apart (measured against creative-plain)**"
    ) in section, section
    assert "worse" not in section and "unchanged" not in section


def test_the_status_pages_verdict_says_within_one_bucket_too() -> None:
    """The daemon's verdict (the status page shows economics.latency_verdict) on the same
    buckets, in the same words, " here" after the effect as the page has it."""
    ours = Counts(requests_finished=1000.0, time_per_output_token=histogram(tpot(50)))
    theirs = Counts(requests_finished=1000.0, time_per_output_token=histogram(tpot(20)))
    control = Window(0.0, 3600.0, models={"m": theirs})
    latency = assess_latency("m", ours, True, None, control)
    assert latency.basis == "measured" and latency.ratios[("tpot", "p99")] > 1.05
    assert latency.one_bucket[("tpot", "p99")] == (0.05, 0.075)
    assert latency_verdict(latency) == (
        "p99 TPOT within one bucket with and without speculation here (50–75 ms): the"
        " histogram cannot tell them apart (measured against the control)"
    )
    # Across a bucket's bound it is a difference the histogram sees: a ratio, as before.
    apart = Counts(requests_finished=1000.0, time_per_output_token=histogram(tpot(5)))
    seen = assess_latency("m", ours, True, None, Window(0.0, 3600.0, models={"m": apart}))
    assert ("tpot", "p99") not in seen.one_bucket
    assert "x worse here" in latency_verdict(seen)


def test_a_quantiles_bucket_is_the_one_holding_its_rank() -> None:
    found = quantiles(histogram(e2e_beyond()))
    assert found is not None
    assert found.bucket("p50") == (10.0, 15.0) and not found.beyond_finite("p50")
    assert found.bucket("p99") == (80.0, math.inf) and found.beyond_finite("p99")
    assert found.p99 == 80.0  # Prometheus' answer: the largest finite bound


async def test_the_modelled_verdict_reads_makes_never_makes_unchanged(tmp_path: Path) -> None:
    """ "speculation makes p99 TPOT unchanged" was the report's: a modelled speedup within
    5 % of 1 reads "leaves ... unchanged", as the status page says it."""
    row = window_row(
        "batch",
        datetime(2026, 5, 4, 10, tzinfo=UTC),
        concurrency=4.0,
        output_tokens=20_000,
        positions=(0.3, 0.1),
        usd_per_hour="3",
        billing="serverless",
    )
    with_buckets(row, "time_per_output_token", histogram(tpot(50)))
    url = await stored(f"sqlite+aiosqlite:///{tmp_path / 'modelled.sqlite'}", [row])
    report = await report_of(url, MAY, golden_settings(url))
    (batch,) = [e for e in report.endpoints if e.info.name == "batch"]
    assert batch.latency is not None and batch.latency.basis == "modeled"
    batch.latency.modeled_speedup = 1.02  # within 5 % of no speedup
    section = latency_section(render(report, "md"))
    assert "**speculation leaves p99 TPOT unchanged (modelled: 1 / the windows' speedup)**" in (
        section
    ), section
    assert "makes p99 TPOT unchanged" not in section


async def test_the_capacity_charts_legend_covers_no_bar_and_no_label(tmp_path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    url = f"sqlite+aiosqlite:///{tmp_path / 'golden.sqlite'}"
    await fill_golden(url)
    for month in (MAY, Month(2026, 6)):
        report = await report_of(url, month, golden_settings(url))
        fig = capacity_figure(report)
        if fig is None:
            continue
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        renderer = canvas.get_renderer()
        (ax,) = fig.axes
        legend = ax.get_legend()
        assert legend is not None
        box = legend.get_window_extent(renderer)
        drawn = [p.get_window_extent(renderer) for p in ax.patches]
        drawn += [t.get_window_extent(renderer) for t in ax.texts]  # the bars' labels
        assert len(drawn) >= 6  # two endpoints: two bars and a label each
        covered = [b for b in drawn if b.overlaps(box)]
        assert covered == [], f"the legend {box} covers {covered}"
