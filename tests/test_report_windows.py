"""The report takes its figures from the daemon's own window assessments (issue 29).

The demo endpoints are simulated through the real monitors, whose closed windows are
assessed by `assess_window` and written through the real store, then rolled up into hours
and days; the report built from those rollups must say, for the same hours, the speedup,
savings and draft-overhead dollars that the windows' own `Assessment`s said, summed. A
report that judged an hour again from its counters (h = 0, say, where the daemon assessed
each window at its own h) disagrees with them, and so fails here.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

import spectax.simulate.demo_history
from report_history import MAY, golden_windows
from spectax.cli.report import described_endpoints
from spectax.config import validate
from spectax.economics.assessment import AssessedWindow
from spectax.observed import Observed
from spectax.report.build import Report, build_report
from spectax.report.figures import majority
from spectax.report.read import ProjectionReader
from spectax.report.render import render
from spectax.report.write import endpoint_infos
from spectax.simulate.demo_fleet import DEMO_DEFAULTS
from spectax.simulate.demo_history import write_demo_history
from spectax.store import Store
from spectax.store.pending import PendingWrite
from spectax.store.rollup import ASSESSED
from spectax.store.rows import pending_write

NOW = datetime(2026, 5, 2, 12, tzinfo=UTC)  # a day and a half of May
WINDOW_SECONDS = 1800.0  # two windows an hour: an hour's figure is a sum, not one window's


@dataclass
class Sums:
    """What the windows' own assessments said, summed over a span."""

    plain_busy: float = 0.0  # busy seconds x the speedup in force
    busy: float = 0.0  # busy seconds of the windows that had a speedup
    savings: float = 0.0
    draft_compute: float = 0.0
    rejected: float = 0.0
    priced: bool = False
    verdicts: tuple[int, int, int] = (0, 0, 0)

    @property
    def speedup(self) -> float | None:
        return self.plain_busy / self.busy if self.busy else None


def approx_or_none(value: float | None) -> Any:
    """What a figure must equal: the value, to rounding; None (SGLang, TGI: no speedup)."""
    return None if value is None else pytest.approx(value, rel=1e-9)


def _hour(timestamp: float) -> datetime:
    t = datetime.fromtimestamp(timestamp, UTC)
    return t.replace(minute=0, second=0, microsecond=0)


def sums_of(windows: Iterable[tuple[str, AssessedWindow]], by_hour: bool) -> dict[Any, Sums]:
    """Per (endpoint, model[, hour]): the assessments' own conclusions, added up here."""
    result: dict[Any, Sums] = defaultdict(Sums)
    for endpoint, closed in windows:
        for model, a in closed.assessments.items():
            if a.draft_tokens is None and a.drafts is None:
                continue  # not speculating
            key = (endpoint, model, _hour(closed.window.start)) if by_hour else (endpoint, model)
            s = result[key]
            speedup = a.speedup_in_force
            if speedup is not None:
                s.plain_busy += closed.window.busy_seconds * speedup
                s.busy += closed.window.busy_seconds
            if a.speculation_savings_usd is not None:
                s.savings += a.speculation_savings_usd
            if a.draft_compute_usd is not None:
                s.priced = True
                s.draft_compute += a.draft_compute_usd
                s.rejected += a.rejected_usd or 0.0
            if a.verdict in ("pays", "tax", "uncertain"):
                i = ("pays", "tax", "uncertain").index(a.verdict)
                s.verdicts = tuple(n + (j == i) for j, n in enumerate(s.verdicts))  # type: ignore[assignment]
    return result


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def assessed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, list[tuple[str, AssessedWindow]]]:
    """A day and a half of the demo fleet in the store, and every window it closed, as the
    monitors assessed them (caught on their way to the store's row codec). Written once a
    backend for the tests that only read it: six writes took 11.7 s of the fast tier."""
    if request.param == "sqlite":
        database_url = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('assessed')}/history.sqlite"
    else:
        database_url = request.getfixturevalue("pg_server").database()
    caught: list[tuple[str, AssessedWindow]] = []

    def catching(observed: Observed) -> PendingWrite:
        caught.extend((observed.endpoint, w) for w in observed.closed)
        if observed.open_window is not None:  # the history's last window, flushed at its end
            caught.append((observed.endpoint, observed.open_window))
        return pending_write(observed)

    settings = validate({**DEMO_DEFAULTS, "storage_url": database_url}, "<test>")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(spectax.simulate.demo_history, "pending_write", catching)
        asyncio.run(
            write_demo_history(
                settings, 1.5 * 86400, now=NOW.timestamp(), window_seconds=WINDOW_SECONDS
            )
        )
    return database_url, [(e, w) for e, w in caught if w.window.start >= MAY.start.timestamp()]


async def report_of(url: str) -> Report:
    store = await Store.open(url)
    try:
        async with ProjectionReader(url) as reader:
            settings = validate({"storage_url": url}, "<test>")
            infos = endpoint_infos(described_endpoints(settings))
            return await build_report(store, MAY, infos, None, reader=reader)
    finally:
        await store.close()


async def test_the_reports_hours_say_what_their_windows_assessments_said(
    assessed: tuple[str, list[tuple[str, AssessedWindow]]],
) -> None:
    url, windows = assessed
    report = await report_of(url)
    hours = sums_of(windows, by_hour=True)
    compared = 0
    for e in report.endpoints:
        for point in e.hours:
            x = hours[(point.endpoint, point.model, point.start)]
            assert point.speedup == approx_or_none(x.speedup), point
            if x.priced:
                assert point.savings_usd == pytest.approx(x.savings, rel=1e-9, abs=1e-9)
            assert point.judged == x.verdicts
            compared += 1
    assert compared > 100  # every speculating hour of the month, of five endpoints


async def test_the_reports_month_says_what_its_windows_assessments_said(
    assessed: tuple[str, list[tuple[str, AssessedWindow]]],
) -> None:
    url, windows = assessed
    report = await report_of(url)
    months = sums_of(windows, by_hour=False)
    checked = set()
    for e in report.endpoints:
        models = [x for (name, _), x in months.items() if name == e.info.name]
        if not models:
            assert not e.month.speculating
            continue
        [x] = models  # one model an endpoint in the demo
        f = e.month
        assert f.speedup == approx_or_none(x.speedup)
        if x.priced:
            assert f.savings == pytest.approx(x.savings, rel=1e-9)
            assert f.draft_compute == pytest.approx(x.draft_compute, rel=1e-9)
            assert f.rejected == pytest.approx(x.rejected, rel=1e-9)
            checked.add(e.info.name)
        assert (f.windows_pays, f.windows_tax, f.windows_uncertain) == x.verdicts
    assert {"chat-creative", "code-assistant", "edge-assistant", "summarizer"} <= checked


async def test_verdicts_shading_savings_and_recommendations_agree(
    assessed: tuple[str, list[tuple[str, AssessedWindow]]],
) -> None:
    """A day is shaded by what most of its windows were judged; an endpoint whose windows
    were mostly uncertain has savings that say so and advice that says it is a guess."""
    url, _ = assessed
    report = await report_of(url)
    md = render(report, "md")
    cost = md.split("## Spend, cost per million output tokens", 1)[1].split("\n## ")[0]
    for e in report.endpoints:
        for day in e.days.values():
            counted = majority(day.windows_pays, day.windows_tax, day.windows_uncertain)
            if day.verdict in ("pays", "tax"):
                assert day.verdict == counted
        f = e.month
        if not f.speculating or not f.windows_judged:
            continue
        line = next(x for x in cost.splitlines() if x.startswith(f"| {e.info.name} | "))
        if f.verdict == "uncertain" and f.savings is not None:
            assert "uncertain" in line  # never a bare "+$x capacity freed" beside 0 paid
            assert f.windows_pays <= f.windows_judged / 2
        for r in e.recommendations:
            assert r.basis and r.confidence in ("high", "medium", "low")
            if f.verdict == "uncertain":
                assert r.confidence == "low" and "(a guess" in r.title
                evidence = " ".join(r.evidence)
                assert "control:" in evidence and "spectax model fit" in evidence
            if r.action == "change_k":  # a K the endpoint ran at or below, never beyond
                assert "extrapolated" not in " ".join(r.evidence)
    assert any(e.month.verdict == "uncertain" for e in report.endpoints)


async def test_rollups_from_before_0009_are_not_recorded_not_recomputed(
    database_url: str,
) -> None:
    """A window stored before the store kept its assessment's sums (a spooled row lacks
    them): its hour's speedup and draft overhead are "not recorded", never recomputed."""
    may = [r for r in golden_windows() if r["endpoint"] == "coder" and r["start"] >= MAY.start]
    rows = may[:2]  # two hours of one day
    for column in ASSESSED:
        del rows[0][column]  # as a row spooled before 0009 has it
    store = await Store.open(database_url)
    try:
        await store.save("coder", rows, None)
        await store.rollup()
    finally:
        await store.close()
    report = await report_of(database_url)
    [e] = report.endpoints
    old, new = sorted(e.hours, key=lambda h: h.start)
    assert old.speedup is None and new.speedup is not None
    assert e.month.windows_assessment_unrecorded == 1
    assert e.month.speedup == pytest.approx(new.speedup)
    md = render(report, "md")
    assert "(1 windows not recorded)" in md
