"""FOCUS 1.x exports, CSV and Parquet, with the specification's column names.

`fixtures/billing/focus/` holds an AWS-style CSV (two SKUs per instance-hour, an
untagged instance, a tax row without a ResourceId) and a Google-style Parquet
file (timestamps, decimals, Tags as a map, one row already invoiced).
"""

from __future__ import annotations

import gzip
import shutil
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from spectax.billing import ledger
from spectax.billing.sources.focus import FocusConfig, FocusSource
from spectax.billing.types import BillingError, MapRule
from spectax.simulate.focus_export import focus_row, write_focus_csv
from spectax.store import Store

FOCUS = Path(__file__).parent / "fixtures" / "billing" / "focus"
T0 = datetime(2024, 3, 1, 10, tzinfo=UTC)
HOUR = timedelta(hours=1)
CHAT = "arn:aws:ec2:us-east-1:111122223333:instance/i-0abc123def4567890"
CODE = "//compute.googleapis.com/projects/p/zones/us-central1-a/instances/vllm-code-0"


def focus(path: Path, **settings: Any) -> FocusSource:
    return FocusSource(
        FocusConfig(
            type="focus",
            path=str(path),
            map=[
                MapRule(endpoint="chat", tags={"spectax-endpoint": "chat"}),
                MapRule(endpoint="code", resource=CODE),
            ],
            **settings,
        )
    )


@pytest.fixture
def export(tmp_path: Path) -> Path:
    directory = tmp_path / "export"
    shutil.copytree(FOCUS, directory)
    return directory


async def test_csv_rows_of_a_resource_and_hour_add_up(export: Path) -> None:
    (export / "gcp-focus-1.0-2024-03.parquet").unlink()
    fetched = await focus(export).fetch(T0, T0 + 3 * HOUR)
    chat = [line for line in fetched.lines if line.endpoint == "chat"]
    assert [(line.start, line.end, line.amount) for line in chat] == [
        (T0 + h * HOUR, T0 + (h + 1) * HOUR, Decimal("12.3017")) for h in range(3)
    ]
    assert all(line.final and line.resource == CHAT for line in chat)  # month closed long ago
    assert chat[0].tags == {"spectax-endpoint": "chat", "team": "inference"}
    others = {line.resource: line for line in fetched.lines if line.endpoint is None}
    assert set(others) == {
        "arn:aws:ec2:us-east-1:111122223333:instance/i-0fff000111222333a",
        "no-resource-id/unmapped",
    }
    assert others["no-resource-id/unmapped"].amount == Decimal("1.23")
    assert [(p.start, p.final) for p in fetched.periods] == [
        (T0 + h * HOUR, True) for h in range(3)
    ]


async def test_effective_cost_and_a_narrower_span(export: Path) -> None:
    (export / "gcp-focus-1.0-2024-03.parquet").unlink()
    fetched = await focus(export, cost_column="EffectiveCost").fetch(T0 + HOUR, T0 + 2 * HOUR)
    [chat] = [line for line in fetched.lines if line.endpoint == "chat"]
    assert (chat.start, chat.amount) == (T0 + HOUR, Decimal("8.0009"))


async def test_parquet_with_map_tags_and_decimals(export: Path) -> None:
    (export / "aws-focus-1.0-2024-03.csv").unlink()
    fetched = await focus(export).fetch(T0, T0 + 3 * HOUR)
    assert [(line.start, line.amount, line.endpoint) for line in fetched.lines] == [
        (T0, Decimal("2.934"), "code"),
        (T0 + HOUR, Decimal("2.934"), "code"),
    ]
    assert fetched.lines[0].tags == {"goog-k8s-cluster-name": "prod", "app": "vllm-code"}


async def test_both_formats_in_one_directory_and_gzip(export: Path) -> None:
    csv_file = export / "aws-focus-1.0-2024-03.csv"
    (export / "2024" / "03").mkdir(parents=True)
    (export / "2024" / "03" / "part-0.csv.gz").write_bytes(gzip.compress(csv_file.read_bytes()))
    csv_file.unlink()
    fetched = await focus(export).fetch(T0, T0 + 3 * HOUR)
    assert {line.endpoint for line in fetched.lines} == {"chat", "code", None}


async def test_an_invoice_makes_a_row_final_before_its_month_closes(tmp_path: Path) -> None:
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    month = (now - timedelta(days=1), now + timedelta(days=20))
    rows = [
        focus_row(
            CHAT,
            now - 2 * HOUR,
            now - HOUR,
            Decimal(5),
            {"spectax-endpoint": "chat"},
            invoice="INV-1",
            billing_period=month,
        ),
        focus_row(
            CHAT,
            now - HOUR,
            now,
            Decimal(6),
            {"spectax-endpoint": "chat"},
            invoice=None,
            billing_period=month,
        ),
    ]
    write_focus_csv(tmp_path / "x.csv", rows)
    fetched = await focus(tmp_path).fetch(now - 3 * HOUR, now)
    assert [(line.amount, line.final) for line in fetched.lines] == [
        (Decimal(5), True),
        (Decimal(6), False),  # the provider may restate it until the invoice
    ]


async def test_a_file_without_the_focus_columns_is_refused(tmp_path: Path) -> None:
    (tmp_path / "cur.csv").write_text("line_item_usage_start_date,line_item_unblended_cost\n")
    with pytest.raises(BillingError, match=r"lacks the FOCUS column.*ChargePeriodStart"):
        await focus(tmp_path).fetch(T0, T0 + HOUR)
    with pytest.raises(BillingError, match="not a directory"):
        await focus(tmp_path / "missing").fetch(T0, T0 + HOUR)


async def test_a_restated_export_replaces_its_lines(tmp_path: Path, database_url: str) -> None:
    month = (datetime(2024, 3, 1, tzinfo=UTC), datetime(2024, 4, 1, tzinfo=UTC))
    tags = {"spectax-endpoint": "chat"}
    first = [
        focus_row(CHAT, T0, T0 + HOUR, Decimal("10"), tags, None, billing_period=month),
        focus_row("i-gone", T0, T0 + HOUR, Decimal("3"), tags, None, billing_period=month),
    ]
    write_focus_csv(tmp_path / "export.csv", first)
    source = focus(tmp_path)
    store = await Store.open(database_url)
    try:
        fetched = await source.fetch(T0, T0 + HOUR)
        await store.save_billing("focus", fetched.lines, fetched.periods, ["chat", "code"])
        assert await ledger.spend_by_basis(store, "chat", T0, T0 + HOUR) == (Decimal(13), "billed")
        # The provider restates the hour: one resource revised, the other gone.
        write_focus_csv(
            tmp_path / "export.csv",
            [focus_row(CHAT, T0, T0 + HOUR, Decimal("9.5"), tags, None, billing_period=month)],
        )
        fetched = await source.fetch(T0, T0 + HOUR)
        await store.save_billing("focus", fetched.lines, fetched.periods, ["chat", "code"])
        assert [(line.resource, line.amount) for line in await store.billing_lines("chat")] == [
            (CHAT, Decimal("9.5"))
        ]
        assert await ledger.spend_by_basis(store, "chat", T0, T0 + HOUR) == (
            Decimal("9.5"),
            "billed",
        )
        # `code` is billed by this source too, and had nothing in the hour: billed zero.
        assert await ledger.spend_by_basis(store, "code", T0, T0 + HOUR) == (Decimal(0), "billed")
    finally:
        await store.close()
