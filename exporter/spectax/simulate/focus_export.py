"""A simulated bill, for the demo and the end-to-end tests: a FOCUS 1.x export on disk.

`write_focus_export` writes a CSV with the specification's column names that
bills one resource per charge period, already invoiced (so final), at a fixed
price per hour. Short charge periods (as long as a window) let a test see a
final period reconciled within seconds; real exports use hours or days.
"""

from __future__ import annotations

import csv
import json
import math
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

FOCUS_COLUMNS = (
    "BillingAccountId",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ChargeCategory",
    "ChargeClass",
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "BillingCurrency",
    "ResourceId",
    "ResourceName",
    "ServiceName",
    "ProviderName",
    "InvoiceId",
    "Tags",
)


def focus_row(
    resource: str,
    start: datetime,
    end: datetime,
    billed: Decimal,
    tags: dict[str, str] | None = None,
    invoice: str | None = "INV-SIM-1",
    effective: Decimal | None = None,
    billing_period: tuple[datetime, datetime] | None = None,
) -> dict[str, str]:
    first, last = billing_period or (start, end)
    return {
        "BillingAccountId": "sim-account",
        "BillingPeriodStart": _iso(first),
        "BillingPeriodEnd": _iso(last),
        "ChargePeriodStart": _iso(start),
        "ChargePeriodEnd": _iso(end),
        "ChargeCategory": "Usage",
        "ChargeClass": "",
        "BilledCost": str(billed),
        "EffectiveCost": str(effective if effective is not None else billed),
        "ListCost": str(billed),
        "BillingCurrency": "USD",
        "ResourceId": resource,
        "ResourceName": resource,
        "ServiceName": "GPU instances",
        "ProviderName": "Simulated cloud",
        "InvoiceId": invoice or "",
        "Tags": json.dumps(tags or {}),
    }


def write_focus_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=FOCUS_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_focus_export(
    directory: Path,
    endpoint: str,
    usd_per_hour: Decimal,
    period_seconds: float = 6.0,
    before: float = 60.0,
    after: float = 900.0,
    now: float | None = None,
) -> dict[str, Any]:
    """A final bill for `endpoint` (resource `sim/ENDPOINT`), every `period_seconds` from
    `before` seconds ago to `after` seconds ahead, aligned to multiples of the period
    (as spectax's windows are); returns the `billing:` entry that reads it."""
    moment = time.time() if now is None else now
    first = math.floor((moment - before) / period_seconds) * period_seconds
    count = math.ceil((before + after) / period_seconds)
    per_period = (usd_per_hour * Decimal(repr(period_seconds)) / 3600).quantize(
        Decimal("0.000000001")
    )
    resource = f"sim/{endpoint}"
    rows = []
    for k in range(count):
        start = datetime.fromtimestamp(first + k * period_seconds, UTC)
        end = start + timedelta(seconds=period_seconds)
        rows.append(focus_row(resource, start, end, per_period, {"spectax-endpoint": endpoint}))
    write_focus_csv(directory / "focus-export.csv", rows)
    return {
        "type": "focus",
        "name": "simulated-focus",
        "path": str(directory),
        "interval": "1s",
        "lookback": "1h",
        "map": [{"endpoint": endpoint, "tags": {"spectax-endpoint": endpoint}}],
    }


def _iso(value: datetime) -> str:
    text = value.astimezone(UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")
