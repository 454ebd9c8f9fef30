"""Billing lines in the store, and reconciliation, on SQLite and PostgreSQL.

The reconciliation story: spectax estimates two hours of an endpoint from the
price table; the bill for the first hour arrives as an estimate, then is revised
and closed at a different amount. The drift is reported, the history of that
hour switches to billed money, and nothing is counted twice.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from builders import NGRAM_PAGES, monitor_of, ngram_settings, store_pages
from spectax.billing import ledger
from spectax.billing.coordinator import BillingService
from spectax.billing.registry import SourceSpec
from spectax.billing.sources.aws_cost_explorer import AwsCostExplorerConfig
from spectax.billing.sources.runpod import RunpodConfig
from spectax.billing.types import BillingLine, Period
from spectax.cli.main import main
from spectax.exposition.collector import SnapshotCollector, StoreStatus
from spectax.store import Store
from spectax.store.schema import SchemaMismatch, upgrade

PAGES = NGRAM_PAGES
T0 = datetime(2026, 11, 2, 10, tzinfo=UTC)
HOUR = timedelta(hours=1)
USD_PER_HOUR = Decimal("3.6")


def settings(url: str, tmp_path: Path | None = None):
    return ngram_settings("chat", storage_url=url, state_directory=tmp_path)


async def fill(store: Store, url: str, hours: int = 2) -> None:
    """Scrape the recorded pages every 30 s from T0 for `hours`; the windows go to the store."""
    monitor = monitor_of(settings(url))
    # the scrape after the last hour closes its window
    scrapes = ((T0.timestamp() + 30 * i, PAGES[i % len(PAGES)]) for i in range(hours * 120 + 2))
    await store_pages(monitor, store, scrapes)
    await store.rollup()


def bill(amount: str, final: bool, fetched: datetime, start: datetime = T0) -> list[BillingLine]:
    return [
        BillingLine(
            source="runpod",
            resource="pod-chat",
            endpoint="chat",
            start=start,
            end=start + HOUR,
            amount=Decimal(amount),
            currency="USD",
            final=final,
            fetched_at=fetched,
        )
    ]


async def test_the_estimate_meets_a_revised_bill(database_url: str, tmp_path: Path) -> None:
    store = await Store.open(database_url)
    try:
        await fill(store, database_url)
        estimate, basis = await ledger.spend_by_basis(store, "chat", T0, T0 + HOUR)
        assert basis == "estimated" and estimate == USD_PER_HOUR  # 1 GPU, one hour
        now = T0 + 3 * HOUR

        # The bill for the first hour arrives, still open: nothing changes but the lines.
        await store.save_billing(
            "runpod", bill("4.0", False, now), [Period(T0, T0 + HOUR, False)], ["chat"]
        )
        assert await ledger.spend_by_basis(store, "chat", T0, T0 + HOUR) == (
            USD_PER_HOUR,
            "estimated",
        )
        assert await ledger.last_drift(store, "chat", now) is None

        # Revised and closed at 4.50: billed from now on, and the estimate drifted by -20%.
        later = now + HOUR
        await store.save_billing(
            "runpod", bill("4.5", True, later), [Period(T0, T0 + HOUR, True)], ["chat"]
        )
        assert await ledger.spend_by_basis(store, "chat", T0, T0 + HOUR) == (
            Decimal("4.5"),
            "billed",
        )
        drift = await ledger.last_drift(store, "chat", later)
        assert drift is not None and drift.coverage >= 0.99
        assert drift.drift_ratio == pytest.approx((3.6 - 4.5) / 4.5)
        # Nothing counted twice: one line, and the billed total is the revised amount.
        assert len(await store.billing_lines("chat")) == 1
        assert await ledger.billed_totals(store) == {"chat": ("runpod", Decimal("4.5"))}
        # A span the final bill does not cover whole stays on the estimate.
        assert await ledger.spend_by_basis(store, "chat", T0, T0 + 2 * HOUR) == (
            2 * USD_PER_HOUR,
            "estimated",
        )
        # Half an hour of the billed hour: billed, pro rata.
        assert await ledger.spend_by_basis(store, "chat", T0, T0 + HOUR / 2) == (
            Decimal("2.25"),
            "billed",
        )

        # The history: the first hour's rows say billed and add up to the bill exactly.
        for granularity in ("window", "hour"):
            rows = await ledger.rows_with_basis(store, granularity, T0, T0 + 2 * HOUR)
            first = [(spend, basis) for row, spend, basis in rows if row.start < T0 + HOUR]
            second = [(spend, basis) for row, spend, basis in rows if row.start >= T0 + HOUR]
            assert {basis for _, basis in first} == {"billed"}
            assert sum(spend for spend, _ in first) == Decimal("4.5")
            assert {basis for _, basis in second} == {"estimated"}
            assert sum(spend for spend, _ in second) == USD_PER_HOUR
        # Cost per million output tokens of the first hour now uses billed money.
        rows = await ledger.rows_with_basis(store, "hour", T0, T0 + HOUR)
        tokens = sum(row.output_tokens for row, _, _ in rows)
        billed = sum(spend for _, spend, _ in rows)
        assert billed / tokens * 1_000_000 > USD_PER_HOUR / tokens * 1_000_000

        # The daemon's view: /metrics says both bases and the drift.
        service = BillingService([SourceSpec(RunpodConfig(type="runpod", api_key="k" * 8))])
        service.store = store
        snapshot = await service.refresh(later)
        assert snapshot.billed_usd_total == {"chat": Decimal("4.5")}
        assert snapshot.drift == {"runpod": pytest.approx(-0.2)}
        last = await ledger.last_source_drift(store, "runpod", later)
        assert last is not None and last[:2] == (T0, T0 + HOUR)
        registry = CollectorRegistry()
        registry.register(
            SnapshotCollector(lambda: {}, lambda: StoreStatus(0, 0), billing=lambda: snapshot)
        )
        get = registry.get_sample_value
        assert get("spectax_spend_usd_total", {"endpoint": "chat", "basis": "billed"}) == 4.5
        assert get("spectax_billing_drift_ratio", {"source": "runpod"}) == pytest.approx(-0.2)
    finally:
        await store.close()

    # And `spectax export` carries the basis of every row.
    config = tmp_path / "spectax.yml"
    config.write_text(
        yaml.safe_dump(settings(database_url).config.model_dump(mode="json", exclude_none=True))
    )
    argv = ["export", "--config", str(config), "--granularity", "hour", "--format", "csv"]
    out = io.StringIO()
    code = await asyncio.to_thread(_run_capturing, argv, out)
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [(r["start"][:13], r["spend_basis"], r["billed_spend_usd"]) for r in rows] == [
        ("2026-11-02T10", "billed", "4.500000000"),
        ("2026-11-02T11", "estimated", ""),
    ]

    # `billing fetch` shows the estimate as price_table lines, one per endpoint and hour.
    argv = ["billing", "fetch", "--config", str(config), "--source", "price_table"]
    argv += ["--since", T0.isoformat(), "--until", (T0 + 2 * HOUR).isoformat()]
    out = io.StringIO()
    assert await asyncio.to_thread(_run_capturing, argv, out) == 0
    lines = json.loads(out.getvalue())
    assert [(r["start"][:13], r["amount"], r["final"]) for r in lines] == [
        ("2026-11-02T10", "3.600000000", False),
        ("2026-11-02T11", "3.600000000", False),
    ]


def _run_capturing(argv: list[str], out: io.StringIO) -> int:
    import contextlib

    with contextlib.redirect_stdout(out):
        return main(argv)


async def test_one_source_per_endpoint_the_latest_read_wins(database_url: str) -> None:
    store = await Store.open(database_url)
    try:
        old, new = T0 + HOUR, T0 + 2 * HOUR
        lines = bill("5", True, old)
        await store.save_billing("runpod", lines, [Period(T0, T0 + HOUR, True)], ["chat"])
        moved = [BillingLine("focus", "i-1", "chat", T0, T0 + HOUR, Decimal("6"), "USD", True, new)]
        await store.save_billing("focus", moved, [Period(T0, T0 + HOUR, True)], ["chat"])
        assert await ledger.billing_source_of(store, "chat") == "focus"
        assert await ledger.spend_by_basis(store, "chat", T0, T0 + HOUR) == (Decimal(6), "billed")
        assert await ledger.billed_totals(store) == {"chat": ("focus", Decimal(6))}
    finally:
        await store.close()


async def test_an_older_fetch_never_replaces_a_newer_line(database_url: str) -> None:
    store = await Store.open(database_url)
    try:
        await store.upsert_billing_lines(bill("7", True, T0 + 2 * HOUR))
        await store.upsert_billing_lines(bill("1", False, T0 + HOUR))  # a replayed older read
        [line] = await store.billing_lines("chat")
        assert (line.amount, line.final) == (Decimal(7), True)
    finally:
        await store.close()


async def test_foreign_currency_is_kept_apart(database_url: str) -> None:
    store = await Store.open(database_url)
    try:
        euro = [BillingLine("ovh", "gpu-1", "chat", T0, T0 + HOUR, Decimal("3"), "EUR", True, T0)]
        await store.save_billing("ovh", euro, [Period(T0, T0 + HOUR, True)], ["chat"])
        assert await ledger.spend_by_basis(store, "chat", T0, T0 + HOUR) == (
            Decimal(0),
            "estimated",
        )
        assert await ledger.billed_totals(store) == {"chat": ("ovh", Decimal(0))}
    finally:
        await store.close()


async def test_poll_state_survives(database_url: str) -> None:
    store = await Store.open(database_url)
    try:
        await store.save_billing_poll("aws", T0, T0, True)
        await store.save_billing_poll("aws", T0 + HOUR, None, False)
        poll = (await store.billing_polls())["aws"]
        assert (poll.attempted_at, poll.succeeded_at, poll.ok) == (T0 + HOUR, T0, False)
    finally:
        await store.close()


async def test_upgrade_from_0002_keeps_the_history(database_url: str) -> None:
    engine = create_async_engine(database_url)
    async with engine.begin() as conn:
        await conn.run_sync(lambda c: upgrade(c, "0002"))
        await conn.execute(
            text(
                'INSERT INTO windows (endpoint, model, start, "end", seconds, busy_seconds, '
                "restarts, output_tokens, prompt_tokens, requests_finished, drafts, draft_tokens, "
                "accepted_tokens, accepted_per_position, running_seconds, spend_usd, "
                "busy_spend_usd, concurrency_requests, ridge_batch_requests, ridge_batch_source, "
                "verdict) VALUES ('chat', 'm', '2026-10-01 10:05:00+00:00', "
                "'2026-10-01 10:10:00+00:00', 300, 300, 0, 1000, 10, 4, 100, 400, 300, "
                "'[90, 80, 70, 60]', 300, 250000000, 250000000, 1, 32, 'configured', 'pays')"
            )
        )
    await engine.dispose()
    with pytest.raises(SchemaMismatch, match="spectax db upgrade"):
        await Store.open(database_url)
    store = await Store.open(database_url, migrate=True)
    try:
        [row] = await store.rows("window")
        assert row.output_tokens == 1000 and row.spend_usd == Decimal("0.25")
        start = datetime(2026, 10, 1, 10, tzinfo=UTC)
        await store.save_billing(
            "runpod", bill("0.3", True, start, start), [Period(start, start + HOUR, True)], ["chat"]
        )
        assert await ledger.spend_by_basis(store, "chat", start, start + HOUR) == (
            Decimal("0.3"),
            "billed",
        )
    finally:
        await store.close()


def test_billing_lines_are_json_and_csv_friendly() -> None:
    from spectax.cli.billing import as_record

    [line] = bill("1.000000001", True, T0)
    record = as_record(line)
    assert json.loads(json.dumps(record))["amount"] == "1.000000001"


async def test_a_paid_source_is_not_read_again_before_its_interval(database_url: str) -> None:
    """After a restart, AWS (USD 0.01 a request) waits out its interval since the last read;
    the gauges carry on from the stored outcome."""
    store = await Store.open(database_url)
    try:
        now = datetime.now(UTC)
        await store.save_billing_poll("aws", now - HOUR, now - HOUR, True)
        spec = SourceSpec(
            AwsCostExplorerConfig(type="aws_cost_explorer", name="aws", tag_key="app")
        )
        jobs: dict[str, dict[str, Any]] = {}

        class Scheduler:
            def add_job(self, func: Any, trigger: str, **settings: Any) -> None:
                jobs[settings["id"]] = settings

            def remove_job(self, job_id: str) -> None:
                jobs.pop(job_id)

        service = BillingService([spec])
        await service.start(Scheduler(), store)
        job = jobs["billing:aws"]
        assert job["seconds"] == 6 * 3600 and job["max_instances"] == 1
        assert job["next_run_time"] >= now + 5 * HOUR - timedelta(seconds=5)
        [status] = service.snapshot.sources
        assert status.up is True and status.last_success == pytest.approx(
            (now - HOUR).timestamp(), abs=1e-3
        )
        await service.stop()
        assert not jobs
    finally:
        await store.close()


async def test_a_reload_keeps_unchanged_sources(database_url: str, tmp_path: Path) -> None:
    from spectax.billing.sources.focus import FocusConfig

    def spec(name: str) -> SourceSpec:
        return SourceSpec(FocusConfig(type="focus", name=name, path=str(tmp_path)))

    jobs: dict[str, Any] = {}

    class Scheduler:
        def add_job(self, func: Any, trigger: str, **settings: Any) -> None:
            jobs[settings["id"]] = settings

        def remove_job(self, job_id: str) -> None:
            jobs.pop(job_id)

    store = await Store.open(database_url)
    try:
        service = BillingService([spec("a")])
        await service.start(Scheduler(), store)
        assert await service.poll(service.specs[0])
        before = service.snapshot.sources[0]
        await service.apply([spec("a"), spec("b")])
        assert sorted(jobs) == ["billing:a", "billing:b"]
        a, b = service.snapshot.sources
        assert a == before and b.up is None
        await service.apply([])  # no sources configured: the estimate alone
        assert sorted(jobs) == ["billing:price_table"]
        await service.stop()
    finally:
        await store.close()
