"""The monthly cost review (`spectax report`, `spectax demo --history`).

- Every number the report shows equals the store's sums for the month, computed here
  independently from the stored *window* rows (the report reads hourly and daily rollups).
- A golden Markdown report from deterministic synthetic history that exercises every
  recommendation, an unconfigured and unpriced endpoint, cold starts and month over month.
- The HTML opened in headless Chromium over the DevTools protocol: no console error, no
  exception, no network request; a screenshot is saved under $SPECTAX_ARTIFACTS (the
  test's tmp_path unless set).
- An empty month, and a month without speculation, give an honest report.
"""

from __future__ import annotations

import asyncio
import base64
import csv
import io
import os
import re
import shlex
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text as sql
from sqlalchemy.ext.asyncio import create_async_engine

from browser import Browser, chromium, save
from report_history import MAY, fill_golden, golden_settings, report_of, window_row
from spectax import economics
from spectax.cli.main import main
from spectax.cli.report import command_path
from spectax.config import Settings, validate
from spectax.report.build import Report
from spectax.report.cells import kind_total_name, per_million, usd, usd_signed
from spectax.report.charts import charts
from spectax.report.csvout import COLUMNS
from spectax.report.figures import EndpointInfo, Figures, HourPoint
from spectax.report.html import render_html
from spectax.report.load_curve_table import load_curve_table
from spectax.report.period import Month
from spectax.report.progress import Progress
from spectax.report.read import ProjectionReader, store_reader
from spectax.report.recommend import recommend, speedup_with_k
from spectax.report.render import render
from spectax.report.spend import DayKey, Spend
from spectax.report.write import pick_month
from spectax.simulate.demo_fleet import DEMO_DEFAULTS, DRAFT_WEIGHT_BYTES, H100_MEMORY_BYTES
from spectax.simulate.demo_history import parse_span, write_demo_history
from spectax.simulate.sim_profiles import DEMO_PROFILES
from spectax.store import Store
from spectax.store.models import WindowRow

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "fixtures" / "report" / "golden.md"
APRIL = Month(2026, 4)
DEMO_NOW = datetime(2026, 5, 3, 12, tzinfo=UTC)  # 4 days of history: 1.5 in April, 2.5 in May


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def demo_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Four days of the demo endpoints' simulated history, through monitors and the store."""
    path = tmp_path_factory.mktemp("report") / "demo.sqlite"
    url = f"sqlite+aiosqlite:///{path}"
    settings = validate({**DEMO_DEFAULTS, "storage_url": url}, "<test>")
    written = asyncio.run(
        write_demo_history(settings, 4 * 86400, now=DEMO_NOW.timestamp(), restarts_per_week=6)
    )
    assert written.cold_starts > 0
    return url


def demo_config(url: str) -> Settings:
    return validate({"storage_url": url}, "<test>")


async def assert_readers_agree(url: str) -> None:
    """The projection reads exactly what `Store.rows()` holds: same values, same types."""
    store = await Store.open(url)
    try:
        async with ProjectionReader(url) as projection:
            through_store = store_reader(store)
            for granularity in ("hour", "day"):
                since, until = APRIL.start, MAY.end
                mine = await projection(granularity, since, until, None)
                theirs = await through_store(granularity, since, until, None)
                assert mine == theirs and len(mine) > 0
                assert [tuple(map(type, r)) for r in mine] == [tuple(map(type, r)) for r in theirs]
                assert all(r.start.tzinfo is not None for r in mine)
                only = await projection(granularity, since, until, ["chat"])
                assert {r.endpoint for r in only} <= {"chat"}
    finally:
        await store.close()


# ---------------------------------------------------------------- independent sums


@dataclass
class Expected:
    spend: Decimal | None = None
    output_tokens: int = 0
    prompt_tokens: int = 0
    savings: float | None = None
    accepted: int = 0
    draft_tokens: int = 0
    drafts: int = 0
    drafted_count: bool = False  # the engine counts drafted tokens (not SGLang, not TGI)
    speculating: bool = False
    cold_starts: int = 0
    cold_start_usd: Decimal = Decimal(0)
    draft_load_usd: Decimal = Decimal(0)
    running_seconds: float = 0.0
    model_seconds: float = 0.0
    verdicts: dict[str, int] = field(default_factory=dict)  # the daemon's, per window
    bases: dict[str, int] = field(default_factory=dict)
    hours_monitored: int = 0
    draft_compute: float = 0.0
    rejected: float = 0.0
    plain_busy: float = 0.0  # the windows' busy time without speculation, and their busy time
    assessed_busy: float = 0.0
    c: float | None = None
    ridge: float | None = None
    h: float | None = None


def expected_from_windows(rows: Iterable[WindowRow]) -> dict[str, Expected]:
    """The month's figures per endpoint, from window rows, without the report's code."""
    result: dict[str, Expected] = defaultdict(Expected)
    restarts: dict[tuple[str, datetime], int] = {}
    monitored: dict[str, set[datetime]] = defaultdict(set)
    rows = sorted(rows, key=lambda r: (r.endpoint, r.start, r.model))

    def speculates(r: WindowRow) -> bool:  # SGLang and TGI count drafts, not drafted tokens
        return r.drafts is not None or r.draft_tokens is not None

    speculating_endpoints = {r.endpoint for r in rows if speculates(r)}
    for r in rows:
        e = result[r.endpoint]
        hour = r.start.replace(minute=0, second=0, microsecond=0)
        monitored[r.endpoint].add(hour)
        if r.spend_usd is not None:
            e.spend = (e.spend or Decimal(0)) + r.spend_usd
        e.output_tokens += r.output_tokens
        e.prompt_tokens += r.prompt_tokens
        e.cold_start_usd += r.cold_start_usd or Decimal(0)
        e.draft_load_usd += r.draft_load_usd or Decimal(0)
        restarts[(r.endpoint, r.start)] = max(restarts.get((r.endpoint, r.start), 0), r.restarts)
        if speculates(r):
            e.speculating = True
            e.accepted += r.accepted_tokens or 0
            e.drafts += r.drafts or 0
            e.drafted_count = r.draft_tokens is not None
            e.draft_tokens += r.draft_tokens or 0
            if r.speculation_savings_usd is not None:
                e.savings = (e.savings or 0.0) + r.speculation_savings_usd
            # The windows' own draft overhead, as the daemon assessed each (its h, its B*).
            e.draft_compute += r.draft_compute_usd or 0.0
            e.rejected += r.rejected_usd or 0.0
            if r.plain_busy_seconds is not None:
                e.plain_busy += r.plain_busy_seconds
                e.assessed_busy += r.assessed_busy_seconds or 0.0
            e.verdicts[r.verdict] = e.verdicts.get(r.verdict, 0) + 1
            if r.verdict_basis is not None:
                e.bases[r.verdict_basis] = e.bases.get(r.verdict_basis, 0) + 1
            e.c, e.ridge = r.draft_cost_ratio or 0.0, r.ridge_batch_requests
            e.h = r.step_overhead_ratio
        if r.model and (speculates(r) or r.endpoint not in speculating_endpoints):
            e.running_seconds += r.running_seconds
            e.model_seconds += r.seconds
    for (endpoint, _), n in restarts.items():
        result[endpoint].cold_starts += n
    for endpoint, seen in monitored.items():
        result[endpoint].hours_monitored = len(seen)
    return dict(result)


async def window_rows_of(url: str, month: Month) -> list[WindowRow]:
    store = await Store.open(url)
    try:
        return await store.window_rows(since=month.start, until=month.end)
    finally:
        await store.close()


def assert_figures(
    f: Figures, x: Expected, vram_fraction: float | None, overhead: bool = True
) -> None:
    approx = pytest.approx
    assert f.priced == (x.spend is not None)
    if x.spend is not None:
        assert f.spend == x.spend  # exact: integer nano-dollars all the way
        assert f.basis == "estimated"
        assert f.cost_per_million == approx(float(x.spend) / x.output_tokens * 1e6, rel=1e-12)
    assert f.output_tokens == x.output_tokens
    assert f.prompt_tokens == x.prompt_tokens
    assert f.speculating == x.speculating
    assert f.cold_starts == x.cold_starts
    assert f.cold_start_usd == x.cold_start_usd
    assert f.draft_load_usd == x.draft_load_usd
    assert f.hours_monitored == x.hours_monitored
    assert f.concurrency == approx(x.running_seconds / x.model_seconds, rel=1e-9)
    if not x.speculating:
        assert f.savings is None
        assert f.acceptance is None
        assert f.cost_per_million_without_speculation is None
        return
    assert f.accepted_tokens == x.accepted and f.draft_tokens == x.draft_tokens
    assert f.drafts == x.drafts
    assert f.acceptance_length == approx(1 + x.accepted / x.drafts, rel=1e-12)
    if not x.drafted_count:  # speculating, but nothing to price: every window uncertain
        assert f.acceptance is None and f.savings is None
        assert f.windows_uncertain == f.windows_judged == sum(x.verdicts.values()) > 0
        assert f.basis_windows == x.bases == {"default": f.windows_judged}
        return
    assert f.acceptance == approx(x.accepted / x.draft_tokens, rel=1e-12)
    assert f.savings == approx(x.savings, rel=1e-9)
    assert x.spend is not None and x.savings is not None
    assert f.cost_per_million_without_speculation == approx(
        (float(x.spend) + x.savings) / x.output_tokens * 1e6, rel=1e-9
    )
    # The daemon's verdicts and bases, window by window, as the report counts them.
    assert (f.windows_pays, f.windows_tax, f.windows_uncertain) == tuple(
        x.verdicts.get(v, 0) for v in ("pays", "tax", "uncertain")
    )
    assert f.windows_judged > 0 and f.windows_unrecorded == 0
    assert f.basis_windows == x.bases
    if overhead:  # the windows' own, as they were assessed: never recomputed at h = 0
        assert f.draft_compute == approx(x.draft_compute, rel=1e-9)
        assert f.rejected == approx(x.rejected, rel=1e-9)
    assert x.assessed_busy > 0
    assert f.speedup == approx(x.plain_busy / x.assessed_busy, rel=1e-9)
    assert x.c is not None and x.ridge is not None
    if x.h is None:  # the daemon had no plausible h (measured, c or B* off): none at h = 0
        assert f.breakeven is None
        return
    b, q = x.running_seconds / x.model_seconds, (x.output_tokens - x.accepted) / x.draft_tokens
    assert f.breakeven == approx(
        x.c + (max(b, 1) + x.h * x.ridge * q) / (max(b, 1) + x.ridge), rel=1e-12
    )
    if vram_fraction is not None:
        assert f.vram_usd == approx(float(x.spend) * vram_fraction, rel=1e-12)


# ---------------------------------------------------------------- the numbers


async def test_every_number_equals_the_stores_sums(demo_url: str) -> None:
    settings = demo_config(demo_url)
    report = await report_of(demo_url, MAY, settings)
    fractions = {name: DRAFT_WEIGHT_BYTES[name] / H100_MEMORY_BYTES for name in DRAFT_WEIGHT_BYTES}
    for month, figures_of in ((MAY, "month"), (APRIL, "previous")):
        expected = expected_from_windows(await window_rows_of(demo_url, month))
        assert set(expected) == set(DEMO_PROFILES)  # the mixed fleet
        for e in report.endpoints:
            f = getattr(e, figures_of)
            assert f is not None, (e.info.name, month)
            x = expected[e.info.name]
            assert_figures(f, x, fractions.get(e.info.name), overhead=month == MAY)
    # The totals are the sums of the endpoints, ratios recomputed from the sums.
    expected = expected_from_windows(await window_rows_of(demo_url, MAY))
    t = report.total
    assert t.spend == sum((x.spend or Decimal(0) for x in expected.values()), Decimal(0))
    assert t.output_tokens == sum(x.output_tokens for x in expected.values())
    drafted = [x for x in expected.values() if x.drafted_count]
    assert t.acceptance == pytest.approx(
        sum(x.accepted for x in drafted) / sum(x.draft_tokens for x in drafted)
    )
    # Provisioned and priced (a drafted count): all but the serverless chat-creative.
    capacity = [n for n, x in expected.items() if x.drafted_count and n != "chat-creative"]
    assert t.savings_by["capacity"] == pytest.approx(
        sum(expected[name].savings or 0.0 for name in capacity)
    )
    assert t.savings_by["invoice"] == pytest.approx(expected["chat-creative"].savings)
    assert t.windows_tax == sum(x.verdicts.get("tax", 0) for x in expected.values())
    # The month's coverage: 2.5 days of May, 1.5 of April.
    assert report.first == datetime(2026, 5, 1, tzinfo=UTC)
    assert report.last == DEMO_NOW
    assert sum(x.cold_starts for x in expected.values()) > 0
    # No step-time sums from the fast path: a daemon on this store keeps the configured B*.
    assert all(r.inter_token_latency_sum is None for r in await window_rows_of(demo_url, MAY))


async def test_csv_and_markdown_show_the_same_numbers(demo_url: str) -> None:
    settings = demo_config(demo_url)
    report = await report_of(demo_url, MAY, settings)
    expected = expected_from_windows(await window_rows_of(demo_url, MAY))

    rows = list(csv.DictReader(io.StringIO(render(report, "csv"))))
    assert tuple(rows[0]) == COLUMNS
    days = sorted({r["date"] for r in rows})
    assert days == ["2026-05-01", "2026-05-02", "2026-05-03"]  # one row per endpoint and day
    assert len(rows) == len(expected) * len(days)
    for name, x in expected.items():
        mine = [r for r in rows if r["endpoint"] == name]
        assert sum(Decimal(r["spend_usd"]) for r in mine) == x.spend
        assert sum(int(r["output_tokens"]) for r in mine) == x.output_tokens
        assert sum(int(r["cold_starts"]) for r in mine) == x.cold_starts
        assert sum(Decimal(r["cold_start_usd"]) for r in mine) == x.cold_start_usd
        assert sum(int(r["hours_monitored"]) for r in mine) == x.hours_monitored
        if x.speculating and not x.drafted_count:  # SGLang, TGI: nothing to price it on
            assert {r["speculation_net_usd"] for r in mine} == {""}
            assert sum(int(r["windows_uncertain"]) for r in mine) == x.verdicts["uncertain"] > 0
        elif x.speculating:
            assert sum(float(r["speculation_net_usd"]) for r in mine) == pytest.approx(x.savings)
            assert sum(int(r["windows_tax"]) for r in mine) == x.verdicts.get("tax", 0)
            assert sum(int(r["windows_pays"]) for r in mine) == x.verdicts.get("pays", 0)
            assert sum(float(r["draft_compute_usd"]) for r in mine) == pytest.approx(
                x.draft_compute
            )
            meaning = "invoice" if name == "chat-creative" else "capacity_freed"
            assert {r["speculation_net_meaning"] for r in mine} == {meaning}
        else:
            assert {r["speculation_net_usd"] for r in mine} == {""}  # not a 0 that looks real

    md = render(report, "md")
    cost_section = md.split("## Spend, cost per million output tokens", 1)[1].split("\n## ")[0]
    for name, x in expected.items():
        assert x.spend is not None
        line = next(x for x in cost_section.splitlines() if x.startswith(f"| {name} | "))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[2] == f"${x.spend:,.2f}"
        assert cells[4] == f"{x.output_tokens:,}"
        cost = float(x.spend) / x.output_tokens * 1e6
        assert cells[5] == (f"${cost:,.3f}" if cost < 10 else f"${cost:,.2f}")
        if x.speculating and x.savings is not None:
            sign = "+" if x.savings > 0 else "-"
            assert cells[7].startswith(f"{sign}${abs(x.savings):,.2f}")
            word = "invoice" if name == "chat-creative" else "capacity"
            assert word in cells[7]
    assert "chat-creative | turn off | Turn speculation off" in md
    # All of code-assistant's windows were uncertain, on defaults: its advice says it is a
    # guess; and no change of K rests on a position it never drafted (issue 29).
    assert "| code-assistant | keep | Keep speculation as it is (a guess: default) |" in md
    assert "extrapolated" not in md.split("## Spend", 1)[0]


async def test_billed_spend_replaces_the_estimate_through_the_seam(demo_url: str) -> None:
    """A billing source plugs in as a SpendSource: its days are `billed`, and every money
    figure of those days scales with the bill."""

    class BilledTwice:
        async def daily(
            self, store: Store, estimated: dict[DayKey, Decimal | None]
        ) -> dict[DayKey, Spend]:
            assert store.backend == "sqlite"  # the report's own store, to read billed lines from
            assert ("code-assistant", date(2026, 5, 1)) in estimated
            return {
                key: Spend(amount * 2, "billed")
                for key, amount in estimated.items()
                if key == ("code-assistant", date(2026, 5, 2)) and amount is not None
            }

    settings = demo_config(demo_url)
    plain = await report_of(demo_url, MAY, settings)
    billed = await report_of(demo_url, MAY, settings, spend_source=BilledTwice())
    before = next(e for e in plain.endpoints if e.info.name == "code-assistant")
    after = next(e for e in billed.endpoints if e.info.name == "code-assistant")
    day = date(2026, 5, 2)
    assert after.days[day].spend == 2 * before.days[day].spend
    assert after.days[day].basis == "billed"
    assert after.days[day].savings == pytest.approx(2 * (before.days[day].savings or 0))
    assert after.month.basis == "mixed"
    assert after.month.spend == before.month.spend + before.days[day].spend
    assert billed.total.basis == "mixed"
    assert "| code-assistant | provisioned |" in render(billed, "md")
    assert "mixed" in render(billed, "md")


# ---------------------------------------------------------------- honest edge cases


async def test_an_empty_month_gives_an_honest_report(demo_url: str) -> None:
    settings = demo_config(demo_url)
    report = await report_of(demo_url, Month(2026, 1), settings)
    assert report.empty
    md = render(report, "md")
    assert "No history in the store for 2026-01" in md
    assert "$" not in md  # no spend, no $0.00 that looks real
    assert render(report, "csv").strip() == ",".join(COLUMNS)
    html = render(report, "html")
    assert "No history in the store for 2026-01" in html
    assert "<svg" not in html


async def test_a_month_without_speculation_gives_an_honest_report(demo_url: str) -> None:
    settings = demo_config(demo_url)
    report = await report_of(demo_url, MAY, settings, only=["chat-control"])
    assert [e.info.name for e in report.endpoints] == ["chat-control"]
    md = render(report, "md")
    assert "No endpoint used speculative decoding in 2026-05" in md
    assert "— (no speculation)" in md
    assert "+$" not in md and "-$" not in md  # no savings or tax claimed anywhere
    html = render(report, "html")
    assert "No endpoint proposed drafts this month." in html
    assert html.count("<svg") == 1  # the cost chart; the other three say why they are empty
    rows = list(csv.DictReader(io.StringIO(render(report, "csv"))))
    assert {r["acceptance_ratio"] for r in rows} == {""}


# ---------------------------------------------------------------- golden Markdown


@pytest.fixture(scope="module")
def golden_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("golden") / "golden.sqlite"
    url = f"sqlite+aiosqlite:///{path}"
    asyncio.run(fill_golden(url))
    return url


async def test_golden_markdown(golden_url: str) -> None:
    report = await report_of(golden_url, MAY, golden_settings(golden_url))
    text = render(report, "md")
    if os.environ.get("SPECTAX_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8"), (
        "the Markdown report changed: review it, then regenerate with SPECTAX_UPDATE_GOLDEN=1"
    )


async def test_an_engine_without_a_drafted_count_still_speculates(golden_url: str) -> None:
    """SGLang counts verify calls but no drafted tokens: the report shows the endpoint as
    speculating, with its acceptance length (derived), its acceptance ratio as not exposed
    by the engine, and the daemon's uncertain verdicts (no control: nothing to price)."""
    report = await report_of(golden_url, MAY, golden_settings(golden_url))
    (support,) = [e for e in report.endpoints if e.info.name == "support"]
    f = support.month
    assert support.info.engine == "sglang"
    assert f.speculating and f.acceptance is None
    assert f.acceptance_length == pytest.approx(1 + f.accepted_tokens / f.drafts)
    assert f.windows_uncertain == f.windows_judged > 0 and f.windows_pays == f.windows_tax == 0
    assert f.basis_windows == {"default": f.windows_judged}
    md = render(report, "md")
    header = next(line for line in md.splitlines() if line.startswith("| Endpoint | Engine |"))
    rows = md[md.index(header) :].splitlines()
    row = next(line for line in rows if line.startswith("| support |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    length = f"{f.acceptance_length:.2f} (derived)"
    assert cells[1:5] == ["sglang", "eagle", "not exposed by sglang", length]
    days = [
        r for r in csv.DictReader(io.StringIO(render(report, "csv"))) if r["endpoint"] == "support"
    ]
    assert days and all(r["engine"] == "sglang" and r["acceptance_ratio"] == "" for r in days)
    assert all(float(r["acceptance_length_tokens"]) > 1 for r in days)
    # The month's total acceptance is that of the endpoints with a drafted count only.
    t = report.total
    assert t.acceptance == pytest.approx(t.drafted_accepted_tokens / t.draft_tokens)
    assert t.drafted_accepted_tokens == t.accepted_tokens - f.accepted_tokens


async def test_rollups_from_before_the_verdicts_were_counted(tmp_path: Path) -> None:
    """A store upgraded to 0005 keeps its older rollups, whose verdict counts are NULL: the
    report says their basis was not recorded and never makes up counts for them."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'old.sqlite'}"
    await fill_golden(url)
    engine = create_async_engine(url)
    async with engine.begin() as conn:
        for table in ("rollup_hourly", "rollup_daily"):
            await conn.execute(
                sql(
                    f"UPDATE {table} SET windows_pays = NULL, windows_tax = NULL, "
                    "windows_uncertain = NULL, windows_basis_calibrated = NULL, "
                    "ridge_batch_source = NULL, speedup_low_ratio = NULL, "
                    "speedup_high_ratio = NULL, step_overhead_ratio = NULL "
                    "WHERE endpoint = 'coder'"
                )
            )
    await engine.dispose()
    report = await report_of(url, MAY, golden_settings(url))
    coder = next(e for e in report.endpoints if e.info.name == "coder")
    f = coder.month
    assert (f.windows_judged, f.windows_unrecorded, f.basis_windows) == (0, 12, {})
    assert f.model_source is None and f.speedup_band is None
    # The hours fall back to the rule on their sums (S > 1: all of coder's hours paid).
    assert {h.verdict for h in coder.hours} == {"pays"}
    assert [r.action for r in coder.recommendations] == ["keep"]
    md = render(report, "md")
    # Without the h its windows were assessed with, no break-even (never one at h = 0).
    assert (
        "| coder | vllm | eagle | 0.500 | 2.50 | — | 2.0 | basis not recorded "
        "| basis not recorded |" in md
    )
    assert "| coder | basis not recorded | basis not recorded | — | — | 1.885 | — |" in md
    total = next(line for line in md.splitlines() if line.startswith("| **Total** | measured"))
    assert "not recorded 33.3%" in total  # coder's windows and legacy's (before 0004), of 72
    rows = list(csv.DictReader(io.StringIO(render(report, "csv"))))
    coder_rows = [r for r in rows if r["endpoint"] == "coder"]
    assert {r["verdict_basis"] for r in coder_rows} == {"basis not recorded"}
    assert sum(int(r["windows_verdict_not_recorded"]) for r in coder_rows) == 12


async def test_the_same_report_from_postgresql(pg_server: Any) -> None:
    """Money is integer nano-dollars on both backends: the report is the same to the cent."""
    url = pg_server.database()
    await fill_golden(url)
    await assert_readers_agree(url)
    report = await report_of(url, MAY, golden_settings(url))
    assert render(report, "md") == GOLDEN.read_text(encoding="utf-8")


async def test_the_projection_reads_what_the_store_holds(golden_url: str) -> None:
    await assert_readers_agree(golden_url)


async def test_every_recommendation_with_its_evidence(golden_url: str) -> None:
    report = await report_of(golden_url, MAY, golden_settings(golden_url))
    actions = {(r.endpoint, r.action) for r in report.recommendations}
    assert ("coder", "keep") in actions
    assert ("creative", "route_high_temperature") in actions
    assert ("batch", "turn_off") in actions
    by = {(r.endpoint, r.action): r for r in report.recommendations}
    route = by[("creative", "route_high_temperature")]
    assert route.semantics == "invoice" and route.usd_at_stake and route.usd_at_stake > 0
    assert any("creative-plain" in line for line in route.evidence)  # the control, by name
    off = by[("batch", "turn_off")]
    assert off.semantics == "capacity"
    batch = next(e for e in report.endpoints if e.info.name == "batch")
    assert off.usd_at_stake == pytest.approx(-(batch.month.savings or 0))
    keep = by[("coder", "keep")]
    coder = next(e for e in report.endpoints if e.info.name == "coder")
    assert keep.usd_at_stake == pytest.approx(coder.month.savings)
    legacy = next(e for e in report.endpoints if e.info.name == "legacy")
    assert not legacy.info.configured and not legacy.month.priced
    assert all(r.usd_at_stake is None for r in legacy.recommendations)
    assert report.without_history == ["idle-endpoint", "retired"]
    assert set(report.previous_only) == {"retired"}
    assert report.previous_total is not None
    assert report.previous_total.spend == report.total.spend - Decimal("0.05") + 12  # retired
    md = render(report, "md")
    assert "| retired | $12.00 → — | 120,000 → — |" in md


async def test_a_vllm_endpoint_taxed_at_high_load_gets_a_k_schedule_from_its_month_curve(
    golden_url: str,
) -> None:
    report = await report_of(golden_url, MAY, golden_settings(golden_url))
    schedules = {r.endpoint: r for r in report.recommendations if r.action == "schedule_k"}
    assert set(schedules) == {"chat"}  # sglang's endpoint has no per-batch K: none there
    chat = next(e for e in report.endpoints if e.info.name == "chat")
    drafting = [h for h in chat.hours if h.drafting]
    low = [h for h in drafting if h.concurrency < 8]
    high = [h for h in drafting if h.concurrency >= 64]
    assert len(low) + len(high) == len(drafting)  # the month's curve: bins 4 and 64
    # Bin 64 is a tax; its K = 0 is worth its busy spend times (1 - its summed speedup).
    busy_s = sum(h.assessed_busy_seconds or 0.0 for h in high)
    speedup = sum((h.speedup or 0.0) * (h.assessed_busy_seconds or 0.0) for h in high) / busy_s
    assert speedup < 1.0
    off_above = sum(h.busy_usd or 0.0 for h in high) * (1.0 - speedup)
    schedule = schedules["chat"]
    assert schedule.usd_at_stake is not None and schedule.usd_at_stake >= off_above > 0
    tax = sum(h.savings_usd or 0.0 for h in high)
    share = sum(h.seconds for h in high) / sum(h.seconds for h in drafting)
    assert (
        f"Speculation was a tax {share:.0%} of the hours, when 64 or more requests ran: "
        f"-${-tax:,.2f}."
    ) in schedule.evidence
    assert schedule.title.endswith(", 0 from 48")  # speculation off well before bin 64
    config = next(line for line in schedule.evidence if "--speculative-config" in line)
    assert '"num_speculative_tokens_per_batch_size": [[1, ' in config
    assert ", 1024, 0]]" in config  # covering the engine's largest batch


async def test_the_k_schedule_supersedes_the_load_cap_on_vllm_and_each_tax_hour_counts_once(
    golden_url: str,
) -> None:
    """chat (vLLM) is a tax above 17 requests: its K schedule sets K = 0 there, which is the
    load cap applied by vLLM itself, so it is not advised besides (the same hours' tax in
    two stakes). On an engine without a per-batch K the cap is the advice, with its stake
    the net tax of exactly those hours and a knob that engine has."""
    report = await report_of(golden_url, MAY, golden_settings(golden_url))
    chat = next(e for e in report.endpoints if e.info.name == "chat")
    assert {r.action for r in chat.recommendations} == {"schedule_k"}
    above = [h for h in chat.hours if h.concurrency > 17]
    on_sglang = {
        r.action: r for r in recommend(replace(chat.info, engine="sglang"), chat.month, chat.hours)
    }
    assert set(on_sglang) == {"disable_above"}
    disable = on_sglang["disable_above"]
    assert disable.title == "Disable speculation above 17 concurrent requests"
    assert disable.usd_at_stake == pytest.approx(-sum(h.savings_usd or 0 for h in above))
    assert disable.evidence[-1] == (
        "sglang cannot switch speculation by load on its own: route overflow traffic to "
        "replicas without speculation, or cap --max-running-requests near B_x."
    )
    # On vLLM without per-position counts no K per bin can be chosen: the cap is advised,
    # and it says vLLM can apply it itself (Dynamic Speculative Decoding).
    uncounted = [
        replace(
            h,
            positions=(),
            bins=tuple(replace(s, accepted_per_position=()) for s in h.bins),
        )
        for h in chat.hours
    ]
    assert all(h.bins for h in chat.hours)  # the curve is the windows' (rollup_load_bins)
    (disable,) = recommend(chat.info, chat.month, uncounted)
    assert disable.action == "disable_above"
    assert "num_speculative_tokens_per_batch_size" in disable.evidence[-1]
    assert "K = 0 from batch 18" in disable.evidence[-1]


async def test_a_billed_day_of_an_unpriced_endpoint(golden_url: str) -> None:
    class BilledLegacy:
        async def daily(
            self, store: Store, estimated: dict[DayKey, Decimal | None]
        ) -> dict[DayKey, Spend]:
            assert estimated[("legacy", date(2026, 5, 1))] is None  # no price: no estimate
            return {("legacy", date(2026, 5, 1)): Spend(Decimal("5.00"), "billed")}

    settings = golden_settings(golden_url)
    report = await report_of(golden_url, MAY, settings, spend_source=BilledLegacy())
    legacy = next(e for e in report.endpoints if e.info.name == "legacy")
    assert legacy.month.priced and legacy.month.spend == Decimal("5.00")
    assert legacy.month.basis == "billed"
    # Per million of the tokens of the day that has a spend, not of the whole month's.
    assert legacy.month.cost_per_million == pytest.approx(5.00 / 300_000 * 1e6)
    assert legacy.month.savings is None  # nothing estimated to scale: undefined, not 0
    assert report.total.basis == "mixed"


def test_speedup_with_the_same_k_is_the_hours_own() -> None:
    """At the K it ran, the what-if gives back the speedup its windows were assessed with: at
    their h, never h = 0; without a recorded h there is no what-if."""
    g, a, dt, dr = 100_000, 60_000, 160_000, 40_000
    hour = HourPoint(
        endpoint="e",
        model="m",
        start=datetime(2026, 5, 1, tzinfo=UTC),
        output_tokens=g,
        accepted_tokens=a,
        draft_tokens=dt,
        drafts=dr,
        positions=(30_000, 18_000, 9_000, 3_000),
        seconds=3600.0,
        concurrency=8.0,
        ridge_batch=32.0,
        draft_cost_ratio=0.05,
        busy_usd=10.0,
        draft_load_usd=0.0,
        speedup=economics.modelled_speedup(g, a, dt, 8.0, 32.0, 0.05, 0.1),
        step_overhead=0.1,
    )
    assert speedup_with_k(hour, 4) == pytest.approx(hour.speedup)
    assert speedup_with_k(replace(hour, step_overhead=None), 4) is None
    assert speedup_with_k(hour, 0) == pytest.approx(1.0)
    three = speedup_with_k(hour, 3)
    assert three is not None and hour.speedup is not None and three > hour.speedup


# ---------------------------------------------------------------- HTML in Chromium


def assert_self_contained(html: str) -> None:
    assert "<script" not in html.lower() and "<link" not in html.lower()
    assert "@import" not in html
    refs = re.findall(r"""\b(?:src|href)\s*=\s*["']([^"']*)["']""", html)
    refs += re.findall(r"url\(([^)]*)\)", html)
    assert refs, "the charts refer to their own clip paths and markers"
    for ref in refs:
        assert ref.startswith("#"), f"only in-document references: {ref}"
    ids = re.findall(r'\sid="([^"]+)"', html)
    assert len(ids) == len(set(ids)), "no id twice in the document"
    for ref in refs:
        assert ref[1:] in ids, f"a reference to a missing id: {ref}"


@pytest.mark.e2e
async def test_html_renders_in_chromium_without_errors(
    demo_url: str, tmp_path: Path, artifacts: Path
) -> None:
    binary = chromium()
    settings = demo_config(demo_url)
    report = await report_of(demo_url, MAY, settings)
    html = render(report, "html")
    assert_self_contained(html)
    assert html.count("<svg") == 6  # cost, acceptance, savings, hours, latency, capacity
    for title in (
        "Daily cost per million output tokens",
        "Daily acceptance against break-even",
        "net savings (negative: tax) by endpoint",
        "Windows in which speculation paid, was a tax, or was uncertain",
        "Daily p99 time per output token, against the control without speculation",
        "Requests the KV cache holds at once, with the draft and without it",
    ):
        assert title in html
    page = artifacts / f"report-{MAY}.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(html, encoding="utf-8")
    empty = artifacts / "report-empty-month.html"
    empty.write_text(
        render(await report_of(demo_url, Month(2026, 1), settings), "html"), encoding="utf-8"
    )
    bad = tmp_path / "bad.html"  # the check itself must see what it is looking for
    bad.write_text(
        '<html><body><script>console.error("boom")</script>'
        '<img src="http://127.0.0.1:9/x.png"></body></html>'
    )
    async with Browser(binary) as browser:
        assert await browser.open(page, artifacts / f"report-{MAY}.png") == []
        assert await browser.open(empty, artifacts / "report-empty-month.png") == []
        problems = await browser.open(bad, None)
    assert any("boom" in p for p in problems), problems
    assert any("network request: http://127.0.0.1:9/x.png" in p for p in problems), problems
    shot = (artifacts / f"report-{MAY}.png").read_bytes()
    assert shot.startswith(b"\x89PNG") and len(shot) > 50_000


#: Paper sizes (mm) the report is printed on, and the print stylesheet's page margin.
PAPERS = {"A4": (210.0, 297.0), "Letter": (215.9, 279.4)}
PRINT_MARGIN_MM = 12.0

#: What does not fit the printed page: tables (and their cells) past its right edge, boxes
#: that would print a scroll bar, and the document's own width.
PRINT_LAYOUT = """(() => {
  const width = document.documentElement.clientWidth;
  const name = (e) => (e.closest(".scroll, .chart")?.previousElementSibling?.textContent
    || e.closest(".chart")?.querySelector("h3")?.textContent || e.tagName).slice(0, 60);
  const wide = [], scrolling = [], cut = new Set();
  for (const t of document.querySelectorAll("table, svg")) {
    const r = t.getBoundingClientRect();
    if (r.left < -0.5 || r.right > width + 0.5) wide.push([name(t), Math.round(r.width)]);
  }
  for (const c of document.querySelectorAll("th, td")) {
    if (c.getBoundingClientRect().right > width + 0.5) cut.add(c.textContent.slice(0, 40));
  }
  for (const e of document.querySelectorAll("body *")) {
    const x = getComputedStyle(e).overflowX;
    if ((x === "auto" || x === "scroll") && e.scrollWidth > e.clientWidth + 1)
      scrolling.push([name(e), e.scrollWidth, e.clientWidth]);
  }
  return {width, wide, scrolling, cut: [...cut].slice(0, 20),
          document: document.documentElement.scrollWidth};
})()"""


async def print_layout(browser: Browser, path: Path, paper: str, pdf: Path) -> dict[str, Any]:
    """Lay `path` out as Chromium prints it on `paper` (print media, the page's width less
    its margins), measure what does not fit, and print it to `pdf`."""
    width_mm, height_mm = PAPERS[paper]
    inch = 25.4
    content_px = round((width_mm - 2 * PRINT_MARGIN_MM) / inch * 96)
    async with browser.page() as page:
        await page.call("Page.enable")
        await page.call("Emulation.setEmulatedMedia", media="print")
        await page.call(
            "Emulation.setDeviceMetricsOverride",
            width=content_px,
            height=round((height_mm - 2 * PRINT_MARGIN_MM) / inch * 96),
            deviceScaleFactor=1,
            mobile=False,
        )
        await page.call("Page.navigate", url=path.as_uri())
        await asyncio.wait_for(page.loaded.wait(), 30)
        found = await page.call("Runtime.evaluate", expression=PRINT_LAYOUT, returnByValue=True)
        margin = PRINT_MARGIN_MM / inch
        printed = await page.call(
            "Page.printToPDF",
            paperWidth=width_mm / inch,
            paperHeight=height_mm / inch,
            marginTop=margin,
            marginBottom=margin,
            marginLeft=margin,
            marginRight=margin,
        )
    data = base64.b64decode(printed["data"])
    await asyncio.to_thread(save, pdf, data)
    layout = dict(found["result"]["value"])
    layout["pdf_pages"] = len(re.findall(rb"/Type\s*/Page\b", data))
    layout["content_px"] = content_px
    return layout


@pytest.mark.e2e
async def test_the_report_prints_on_a4_and_letter_with_every_column(
    demo_url: str, artifacts: Path
) -> None:
    """Chromium's print to PDF (the README's advice) of the month's report: no table and no
    chart wider than the page, no cell past its edge ("Speculation, net" was cut off), no box
    that prints a scroll bar. The same page laid out for the screen is wider than paper:
    the check sees what it is looking for there, and only the print stylesheet makes it fit."""
    binary = chromium()
    report = await report_of(demo_url, MAY, demo_config(demo_url))
    html = render(report, "html")
    assert "Speculation, net" in html and "@media print" in html
    page = artifacts / f"report-{MAY}-print.html"
    await asyncio.to_thread(save, page, html.encode())
    screen = artifacts / f"report-{MAY}-no-print-stylesheet.html"
    without = re.sub(r"@media print \{.*?\n\}\n(?=</style>)", "", html, flags=re.DOTALL)
    assert "@media print" not in without and without != html
    await asyncio.to_thread(save, screen, without.encode())
    async with Browser(binary) as browser:
        for paper in PAPERS:
            layout = await print_layout(
                browser, page, paper, artifacts / f"report-{MAY}-{paper}.pdf"
            )
            assert layout["width"] == layout["content_px"], layout
            assert layout["wide"] == [] and layout["cut"] == [], layout
            assert layout["scrolling"] == [], layout
            assert layout["document"] <= layout["width"], layout
            assert layout["pdf_pages"] >= 2, layout
        bare = await print_layout(browser, screen, "A4", artifacts / "report-unstyled-A4.pdf")
    assert bare["cut"] and bare["scrolling"], bare  # the screen layout does not fit paper
    assert any("Speculation" in cell for cell in bare["cut"]) or bare["wide"], bare


# ---------------------------------------------------------------- command line


def test_demo_history_then_report_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "spectax.yml"
    config.write_text(f"storage_url: sqlite+aiosqlite:///{tmp_path}/h.sqlite\n")
    assert main(["demo", "--history", "1d", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    command = re.search(r"spectax report --month (\d{4}-\d{2}) --format html --out (\S+)", out)
    assert command is not None, out
    month = command.group(1)
    assert main(["report", "--month", month, "--config", str(config), "--out", "r.md"]) == 0
    text = (tmp_path / "r.md").read_text()
    assert f"# spectax monthly cost review: {month}" in text
    assert "code-assistant" in text
    assert main(["report", "--month", month, "--config", str(config), "--out", "r.csv"]) == 0
    assert (tmp_path / "r.csv").read_text().startswith("date,endpoint,")
    capsys.readouterr()
    assert main(["report", "--month", "2026-13", "--config", str(config)]) == 2
    assert "not a month" in capsys.readouterr().err
    missing = tmp_path / "other.yml"
    missing.write_text(f"storage_url: sqlite+aiosqlite:///{tmp_path}/none.sqlite\n")
    assert main(["report", "--month", month, "--config", str(missing)]) == 1
    assert "no history store" in capsys.readouterr().err
    assert not (tmp_path / "none.sqlite").exists()  # a report never creates a database


def test_history_spans() -> None:
    assert parse_span("30d") == 30 * 86400
    assert parse_span("720h") == 720 * 3600
    assert parse_span("2w") == 14 * 86400
    for bad in ("30", "0h", "500d", "a month"):
        with pytest.raises(ValueError):
            parse_span(bad)


def test_month_parsing() -> None:
    assert str(Month.parse("2026-05")) == "2026-05"
    assert Month.parse("2026-01").previous() == Month(2025, 12)
    assert Month(2026, 12).end == datetime(2027, 1, 1, tzinfo=UTC)
    assert Month(2028, 2).hours == 29 * 24
    for bad in ("2026-5", "2026-13", "May", "2026/05"):
        with pytest.raises(ValueError):
            Month.parse(bad)


def test_progress_bar_only_on_a_terminal() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty, pipe = Terminal(), io.StringIO()
    for stream in (tty, pipe):
        bar = Progress(4, stream=stream)
        bar.stage("reading")
        for _ in range(4):
            bar.advance(label="computing")
        bar.close()
    assert pipe.getvalue() == ""
    drawn = tty.getvalue()
    assert "\rreport [" in drawn and "100% computing" in drawn
    assert drawn.endswith("\r")  # the line is cleared at the end


def test_endpoint_info_semantics() -> None:
    assert EndpointInfo("a", True, "provisioned").semantics == "capacity"
    assert EndpointInfo("a", True, "serverless").semantics == "invoice"
    assert EndpointInfo("a").semantics == "unknown"
    assert EndpointInfo("a", draft_weight_bytes=2, gpu_memory_bytes=8).vram_fraction == 0.25


# ---------------------------------------------------------------- asking for what is there


def _store_config(tmp_path: Path, url: str) -> str:
    config = tmp_path / "spectax.yml"
    config.write_text(f"storage_url: {url}\n")
    return str(config)


def test_the_report_defaults_to_the_last_complete_month_with_history(
    demo_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _store_config(tmp_path, demo_url)
    out = tmp_path / "r.md"
    assert main(["report", "--config", config, "--out", str(out)]) == 0
    assert out.read_text().startswith(f"# spectax monthly cost review: {MAY}")
    assert f"(md, {MAY}, {len(DEMO_PROFILES)} endpoint(s))" in capsys.readouterr().err


def test_a_month_without_history_is_refused_naming_the_months_with_some(
    demo_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _store_config(tmp_path, demo_url)
    out = tmp_path / "r.md"
    assert main(["report", "--month", "2026-03", "--config", config, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no history for 2026-03" in err and "2026-04, 2026-05" in err, err
    assert not out.exists()


def test_the_current_month_is_the_default_when_it_is_the_only_one_with_history() -> None:
    today = Month(2026, 12)
    assert pick_month(None, {today}, today) == today
    assert pick_month(None, {today, Month(2026, 10), Month(2026, 11)}, today) == Month(2026, 11)
    assert pick_month(Month(2026, 10), {today, Month(2026, 10)}, today) == Month(2026, 10)


def test_an_unknown_endpoint_is_refused_naming_the_known_ones(
    demo_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _store_config(tmp_path, demo_url)
    out = tmp_path / "r.md"
    assert (
        main(
            [
                "report",
                "--month",
                "2026-05",
                "--endpoint",
                "nope",
                "--config",
                config,
                "--out",
                str(out),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "unknown endpoint(s) nope" in err
    assert "code-assistant" in err and "chat-creative" in err, err
    assert not out.exists()


def test_a_pdf_is_refused_naming_the_formats(
    demo_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _store_config(tmp_path, demo_url)
    out = tmp_path / "x.pdf"
    assert main(["report", "--month", "2026-05", "--config", config, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "does not write PDF" in err and "html, md and csv" in err, err
    assert not out.exists()


def test_the_next_command_names_the_spectax_the_user_can_run(tmp_path: Path) -> None:
    script = tmp_path / ".venv" / "bin" / "spectax"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    assert command_path(str(script), cwd=tmp_path, on_path="") == ".venv/bin/spectax"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert command_path(str(script), cwd=elsewhere, on_path="") == str(script.resolve())
    assert command_path(str(script), cwd=tmp_path, on_path=str(script)) == "spectax"


@pytest.mark.e2e
def test_the_printed_next_command_runs_as_printed(tmp_path: Path) -> None:
    """A real `spectax demo --history` process, then its printed command, from the same cwd."""
    exe = Path(sys.executable).parent / "spectax"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "exporter")}
    config = _store_config(tmp_path, f"sqlite+aiosqlite:///{tmp_path}/h.sqlite")
    demo = subprocess.run(
        [str(exe), "demo", "--history", "1d", "--config", config],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    line = demo.stdout.strip().splitlines()[-1]
    report = subprocess.run(
        shlex.split(line),
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, (line, report.stderr)
    assert list(tmp_path.glob("spectax-report-*.html")), report.stderr


# ---------------------------------------------------------------- two kinds of money

KINDS_CONFIG: dict[str, Any] = {
    "endpoints": [
        {
            "name": "always-on",
            "url": "http://127.0.0.1:1",
            "billing_mode": "provisioned",
            "price": {"usd_per_hour": 2.5},
            "gpu_memory_bytes": 80 * 10**9,
            "speculation": {"method": "eagle", "draft_weight_bytes": 400 * 10**6},
        },
        {
            "name": "per-second",
            "url": "http://127.0.0.1:2",
            "billing_mode": "serverless",
            "price": {"usd_per_hour": 3.0},
            "gpu_memory_bytes": 80 * 10**9,
            "speculation": {"method": "ngram", "draft_weight_bytes": 2 * 10**9},
        },
    ]
}


@pytest.fixture(scope="module")
def kinds_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """April and May: a provisioned endpoint where speculation pays, a serverless one in tax."""
    url = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('kinds') / 'kinds.sqlite'}"

    async def fill() -> None:
        store = await Store.open(url)
        try:
            for day in (date(2026, 4, 29), date(2026, 5, 2)):
                for hour in (2, 9, 17):
                    t = datetime(day.year, day.month, day.day, hour, tzinfo=UTC)
                    common = {"output_tokens": 400_000, "usd_per_hour": None}
                    pays = window_row(
                        "always-on",
                        t,
                        **{**common, "usd_per_hour": "2.5"},
                        concurrency=2.0,
                        positions=(0.8, 0.6, 0.4),
                        c=0.05,
                    )
                    tax = window_row(
                        "per-second",
                        t,
                        **{**common, "usd_per_hour": "3.0"},
                        concurrency=90.0,
                        positions=(0.3, 0.1, 0.05),
                        c=0.02,
                        billing="serverless",
                    )
                    await store.save("always-on", [pays], None)
                    await store.save("per-second", [tax], None)
            await store.rollup()
        finally:
            await store.close()

    asyncio.run(fill())
    return url


def _total_rows(report: Report) -> list[str]:
    """Every Total row the report prints, in Markdown and in HTML, as text."""
    md = [line for line in render(report, "md").splitlines() if line.startswith("| **Total")]
    html = render_html(report, [])  # the tables only: the charts hold no total
    rows = re.findall(r'<tr class="total">(.*?)</tr>', html, flags=re.S)
    return md + [re.sub(r"<[^>]+>", " ", row) for row in rows]


async def test_no_total_adds_invoice_money_to_freed_capacity(kinds_url: str) -> None:
    settings = validate({**KINDS_CONFIG, "storage_url": kinds_url}, "<kinds>")
    report = await report_of(kinds_url, MAY, settings)
    by_name = {e.info.name: e for e in report.endpoints}
    capacity, invoice = by_name["always-on"], by_name["per-second"]
    assert capacity.info.semantics == "capacity" and invoice.info.semantics == "invoice"
    mixed: dict[str, float] = {}
    for when, a, b in (
        ("now", capacity.month, invoice.month),
        ("before", capacity.previous, invoice.previous),
    ):
        assert a is not None and b is not None and a.savings and b.savings
        assert a.savings > 0 > b.savings  # speculation pays on one, is a tax on the other
        mixed[f"net {when}"] = a.savings + b.savings
        tokens = a.priced_output_tokens + b.priced_output_tokens
        mixed[f"$/M without {when}"] = float(a.spend + b.spend) * 1e6 / tokens + (
            mixed[f"net {when}"] * 1e6 / tokens
        )
    for name in ("draft_compute", "rejected", "vram_usd"):
        mine, theirs = getattr(capacity.month, name), getattr(invoice.month, name)
        assert mine and theirs, name
        mixed[name] = mine + theirs
    rows = _total_rows(report)
    shown = {what: (usd(v) if "$/M" not in what else per_million(v)) for what, v in mixed.items()}
    for row in rows:
        amounts = {m.lstrip("+-") for m in re.findall(r"[-+]?\$[\d,]+\.\d+", row)}
        for what, text in shown.items():
            assert text.lstrip("-") not in amounts, f"{what} ({text}) in a total: {row}"
    # md and html: a Total in 5 tables (the basis table's has no money), one per kind in the
    # 3 with money
    assert len(rows) == 2 * (5 + 3 * 2), rows
    for figures in (report.total, report.previous_total):
        assert figures is not None and figures.mixed
        assert figures.savings is None and figures.cost_per_million_without_speculation is None
    for e in (capacity, invoice):  # each kind's own total: that endpoint's figures
        kind_rows = [r for r in rows if kind_total_name(e.info.semantics).strip("*") in r]
        assert len(kind_rows) == 6
        assert sum(usd_signed(e.month.savings) in r for r in kind_rows) >= 2  # md and html
    assert "Total" not in render(report, "csv")  # one row per endpoint and day, no total


async def test_a_month_of_one_day_draws_its_charts_on_that_day(
    kinds_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One day of history: the date axis spans that day, not the 2,287 days matplotlib picks."""
    settings = validate({**KINDS_CONFIG, "storage_url": kinds_url}, "<kinds>")
    report = await report_of(kinds_url, MAY, settings)
    assert {d for e in report.endpoints for d in e.days} == {date(2026, 5, 2)}
    with caplog.at_level("WARNING", logger="matplotlib"):
        drawn = charts(report)
    # Every chart drawn but capacity's, which has no date axis (these rows store no KV cache),
    # and latency's (these windows have no latency buckets: that one says so;
    # tests/test_report_latency.py draws it).
    assert sorted(c.key for c in drawn if not c.svg) == ["capacity", "latency"]
    assert {c.key: c.empty for c in drawn}["latency"].startswith("No speculating endpoint")
    assert [r.getMessage() for r in caplog.records if "MAXTICKS" in r.getMessage()] == []


def test_the_load_curve_table_marks_a_load_where_throughput_stalled() -> None:
    """A month whose hours at 8 running requests got 12 output tokens a second per request,
    against 29 at 4 and 20 at 16 (vLLM issue 49548's shape): the report's curve marks 8-15."""

    def hours(running: float, rate: float, speedup: float) -> list[HourPoint]:
        return [
            HourPoint(
                endpoint="mtp",
                model="m",
                start=datetime(2026, 5, 1, i, tzinfo=UTC),
                output_tokens=round(rate * running * 3600),
                accepted_tokens=1000,
                draft_tokens=3000,
                drafts=1000,
                positions=(600, 400),
                seconds=3600.0,
                concurrency=running,
                ridge_batch=32.0,
                draft_cost_ratio=0.05,
                busy_usd=1.0,
                draft_load_usd=0.0,
                speedup=speedup,
                judged=(12, 0, 0),
                assessed_busy_seconds=3600.0,
                speedup_band=(speedup - 0.1, speedup + 0.1),
                basis="profile",
            )
            for i in range(3)
        ]

    month = hours(4.0, 29.0, 1.5) + hours(8.0, 12.0, 0.6) + hours(16.0, 20.0, 0.9)
    endpoint = type("EndpointReport", (), {"info": EndpointInfo("mtp"), "hours": month})
    table = load_curve_table(type("Report", (), {"endpoints": [endpoint]})())
    assert [row[2] for row in table.rows] == ["4-7", "8-15 (stalled)", "16-31"]
    assert "mtp (m): speculation was a tax 67% of the hours, when 8 or more requests ran" in (
        " ".join(table.notes)
    )
