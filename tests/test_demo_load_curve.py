"""The demo's history shows the batch-size catch: one endpoint both pays and is a tax (issue 34).

office-chat's traffic swings over the day from 4 running requests at night to 76 at the
day's peak, across its crossover (16 to 32 for its acceptance and draft cost); its
verdict rests on a stored profile, so the bins are sure on both sides. The report's month
then holds its load curve with a crossover, the "tax N% of the hours" line and a K schedule.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from report_history import MAY, report_of
from spectax.config import validate
from spectax.economics.draft_schedule import draft_schedule
from spectax.economics.load_curve import LoadCurve, load_curve
from spectax.report.build import Report
from spectax.report.recommend import Recommendation
from spectax.simulate.demo_fleet import DEMO_DEFAULTS, DEMO_SWEPT
from spectax.simulate.demo_history import write_demo_history

SWINGING = "office-chat"
NOW = datetime(2026, 5, 4, tzinfo=UTC)  # three whole days of May


@pytest.fixture(scope="module")
def month(tmp_path_factory: pytest.TempPathFactory) -> Report:
    """Three days of the demo's history, as `spectax demo --history` writes it (the swept
    endpoints on their stored profiles), and May's report, as `spectax report` builds it."""
    path: Path = tmp_path_factory.mktemp("demo-curve") / "history.sqlite"
    url = f"sqlite+aiosqlite:///{path}"
    settings = validate({**DEMO_DEFAULTS, "storage_url": url}, "<test>")
    asyncio.run(write_demo_history(settings, 3 * 86400, now=NOW.timestamp(), swept=DEMO_SWEPT))
    return asyncio.run(report_of(url, MAY, validate({"storage_url": url}, "<test>")))


def curve_of(report: Report, name: str) -> LoadCurve:
    """The month's load curve of one endpoint, as the report's table and schedule read it."""
    (endpoint,) = [e for e in report.endpoints if e.info.name == name]
    return load_curve(s for h in endpoint.hours if h.drafting for s in h.load_samples())


def test_the_swinging_endpoint_pays_at_low_load_and_is_a_tax_above_its_crossover(
    month: Report,
) -> None:
    curve = curve_of(month, SWINGING)
    verdicts = {b.low: b.verdict for b in curve.bins}
    assert verdicts[4] == "pays" and verdicts[64] == "tax", verdicts
    assert {b.basis for b in curve.bins} == {"profile"}  # sure on the stored profile
    assert curve.crossover is not None
    paying = [b.low for b in curve.bins if b.verdict == "pays"]
    assert max(paying) < curve.crossover.low <= 64  # the crossover is between them
    assert curve.crossover.verdict == "tax"
    assert curve.tax_time_share is not None and 0.3 < curve.tax_time_share < 0.9
    assert curve.tax_usd is not None and curve.tax_usd < 0


def test_the_swinging_endpoints_schedule_drafts_less_from_its_crossover_and_none_at_its_peak(
    month: Report,
) -> None:
    curve = curve_of(month, SWINGING)
    schedule = draft_schedule(curve, engine="vllm", method="eagle", max_num_seqs=128)
    k_by_batch = {
        b: k for first, last, k in schedule.ranges for b in range(int(first), int(last) + 1)
    }
    assert schedule.k_running == 3
    assert k_by_batch[4] == 3  # where it pays, the K that runs
    assert curve.crossover is not None
    assert all(k_by_batch[b] < 3 for b in range(curve.crossover.low, 129))
    assert all(k_by_batch[b] == 0 for b in range(64, 129))  # the peak: speculation off
    ks = [k_by_batch[b] for b in range(1, 129)]
    assert ks == sorted(ks, reverse=True)  # never a longer draft at a higher load
    assert schedule.vllm_config is not None
    assert schedule.vllm_config["num_speculative_tokens_per_batch_size"] == schedule.ranges


def test_the_report_advises_the_schedule_and_says_how_many_hours_were_a_tax(
    month: Report,
) -> None:
    (endpoint,) = [e for e in month.endpoints if e.info.name == SWINGING]
    advised: list[Recommendation] = [r for r in endpoint.recommendations if r.endpoint == SWINGING]
    (schedule,) = [r for r in advised if r.action == "schedule_k"]
    assert schedule.usd_at_stake is not None and schedule.usd_at_stake > 0
    (tax_line,) = [line for line in schedule.evidence if "of the hours" in line]
    assert tax_line.startswith("Speculation was a tax ")
    assert "or more requests ran: -$" in tax_line
