"""`spectax db upgrade` and `spectax export`: the store from the command line.

Export gives the history as it is stored — windows, or their hourly and
daily rollups — for spreadsheets, notebooks and audits. Money is printed
as exact decimal strings, times as ISO 8601 UTC.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import inspect as sa_inspect

from spectax.billing import ledger
from spectax.config import Settings
from spectax.store import Store
from spectax.store.models import TABLES


async def upgrade(settings: Settings) -> str:
    """Bring the database to this spectax's schema; returns the revision now in force."""
    from spectax.store.schema import head_revision

    store = await Store.open(settings.config.database_url, migrate=True)
    await store.close()
    return head_revision()


async def export(
    settings: Settings,
    granularity: str,
    since: datetime | None,
    until: datetime | None,
    output_format: str,
    endpoints: list[str] | None = None,
) -> str:
    store = await Store.open(settings.config.database_url)
    try:
        if granularity != "window":
            await store.rollup()  # so the rollups include the latest windows
        based = await ledger.rows_with_basis(store, granularity, since, until, endpoints)
    finally:
        await store.close()
    columns = [c.key for c in sa_inspect(TABLES[granularity]).columns if c.key != "id"]
    # spend_usd is the estimate; billed_spend_usd the bill's share once final (spend_basis).
    columns += ["billed_spend_usd", "spend_basis"]
    records = [
        {
            **{c: _plain(getattr(row, c)) for c in columns[:-2]},
            "billed_spend_usd": _plain(spend) if basis == "billed" else None,
            "spend_basis": basis if spend is not None else "",
        }
        for row, spend, basis in based
    ]
    if output_format == "json":
        return json.dumps(records, indent=1) + "\n"
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    return buffer.getvalue()


def parse_time(text: str) -> datetime:
    """ISO 8601 date or date-time; without a zone it is UTC."""
    value = datetime.fromisoformat(text)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value
