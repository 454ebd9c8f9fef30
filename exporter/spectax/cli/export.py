"""`spectax export`: the stored history as CSV or JSON.

Export gives the history as it is stored — windows, or their hourly and
daily rollups — for spreadsheets, notebooks and audits. Money is printed
as exact decimal strings, times as ISO 8601 UTC.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import inspect as sa_inspect

from spectax.billing import ledger
from spectax.config import Settings, load_config
from spectax.store import Store
from spectax.store.models import TABLES
from spectax.units import parse_time


def add_parser(commands: Any) -> None:
    export = commands.add_parser("export", help="the stored history as CSV or JSON")
    export.add_argument("--config", type=Path, help="YAML configuration file (storage_url)")
    export.add_argument("--since", type=parse_time, help="ISO date or time, UTC by default")
    export.add_argument("--until", type=parse_time, help="ISO date or time (exclusive)")
    export.add_argument(
        "--granularity",
        choices=["window", "hour", "day"],
        default="window",
        help="rows per closed window (default), or the hourly or daily rollups",
    )
    export.add_argument(
        "--format", choices=["csv", "json"], default="csv", help="output (default csv)"
    )
    export.add_argument("--endpoint", action="append", help="only this endpoint (repeatable)")
    export.set_defaults(func=export_command)


def export_command(args: argparse.Namespace) -> int:
    settings = load_config(args.config)
    text = asyncio.run(
        export(settings, args.granularity, args.since, args.until, args.format, args.endpoint)
    )
    sys.stdout.write(text)
    return 0


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
        for record in records:  # the store keeps these as JSON text: give them as JSON
            for column in columns:
                if _holds_json(column) and isinstance(record[column], str):
                    record[column] = json.loads(record[column])
        return json.dumps(records, indent=1) + "\n"
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    return buffer.getvalue()


def _holds_json(column: str) -> bool:
    """The columns the store keeps as JSON text: per-position counts, histogram buckets."""
    return column == "accepted_per_position" or column.endswith("_buckets")


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, Decimal):
        # str() gives 0E-9 and 1.2E-7 for the store's nano-dollars; "f" keeps its 9 places.
        return format(value, "f")
    return value
