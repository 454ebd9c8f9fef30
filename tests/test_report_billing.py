"""The report's spend comes from the bill once the bill is final (the billing seam)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from builders import monitor_of, ngram_settings, store_pages
from spectax.billing.types import BillingLine, Period
from spectax.report.spend import BilledSpend, Spend
from spectax.store import Store

DAY = datetime(2026, 11, 2, tzinfo=UTC)
PAGES = ["spec_ngram_0_before_traffic.txt", "spec_ngram_3_after.txt"]


async def test_a_final_bill_replaces_the_estimate_for_its_day(database_url: str) -> None:
    settings = ngram_settings("chat", window="1h", storage_url=database_url)
    store = await Store.open(database_url)
    try:
        monitor = monitor_of(settings, 3600)
        # two days of 5-minute scrapes, and the closing one
        scrapes = ((DAY.timestamp() + 300 * i, PAGES[i % 2]) for i in range(2 * 24 * 12 + 2))
        await store_pages(monitor, store, scrapes)
        await store.rollup()
        line = BillingLine(
            source="runpod",
            resource="pod-chat",
            endpoint="chat",
            start=DAY,
            end=DAY + timedelta(days=1),
            amount=Decimal("100.25"),
            currency="USD",
            final=True,
            fetched_at=DAY + timedelta(days=3),
        )
        await store.save_billing(
            "runpod", [line], [Period(DAY, DAY + timedelta(days=1), True)], ["chat"]
        )
        first, second = DAY.date(), (DAY + timedelta(days=1)).date()
        estimated = {("chat", first): Decimal("86.4"), ("chat", second): Decimal("86.4")}
        spend = await BilledSpend().daily(store, estimated)
        # the billed day shows the bill; the day without a final bill keeps its estimate
        assert spend == {("chat", first): Spend(Decimal("100.25"), "billed")}
    finally:
        await store.close()
