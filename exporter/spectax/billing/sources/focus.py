"""FinOps FOCUS 1.x cost exports: CSV and Parquet files in a directory.

AWS (Data Exports), Google Cloud, Azure, OCI and CoreWeave all write FOCUS, so
this one source reads any of their clouds without an SDK. Columns used, by
their FOCUS names: `ChargePeriodStart`, `ChargePeriodEnd`, `BilledCost` (or
`EffectiveCost`, with commitments amortised), `BillingCurrency`, `ResourceId`,
`Tags` (a JSON object, or a Parquet map), and when present `BillingPeriodEnd`
and `InvoiceId`. Rows of one resource and charge period (several SKUs, a
correction) add up to one line.

FOCUS has no "final" column. A row is final once it carries an `InvoiceId`
(FOCUS 1.2), or `final_after` (default 5 days) after its billing period ends
(providers restate the open month until the invoice). Point `path` at the
export's directory: each refresh of an export replaces its files, and every
read takes the directory as it is, so a restated row replaces its line.
Files are parsed in a thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import csv
import gzip
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from spectax.billing.types import (
    BillingError,
    BillingLine,
    Fetched,
    Period,
    Source,
    SourceConfig,
    decimal,
    provider_time,
)
from spectax.credentials import CredentialError, expand_path
from spectax.units import Duration, now_utc, utc

REQUIRED = ("ChargePeriodStart", "ChargePeriodEnd", "BillingCurrency")
OPTIONAL = ("ResourceId", "Tags", "BillingPeriodEnd", "InvoiceId")
PATTERNS = ("*.csv", "*.csv.gz", "*.parquet")


class FocusConfig(SourceConfig):
    type: Literal["focus"]
    path: str
    cost_column: Literal["BilledCost", "EffectiveCost"] = "BilledCost"
    interval: Duration = 3600.0
    lookback: Duration = 40 * 86400.0
    final_after: Duration = 5 * 86400.0

    def checks(self, secrets: Mapping[str, str | None]) -> list[str]:
        try:
            if not Path(expand_path(self.path)).exists():
                return [f"path: {self.path} does not exist"]
        except CredentialError as exc:
            return [f"path: {exc}"]
        return []

    def build(self, secrets: Mapping[str, str | None]) -> Source:
        return FocusSource(self)


@dataclass
class _Group:
    amount: Decimal
    currency: str
    final: bool
    tags: dict[str, str]


class FocusSource(Source):
    config: FocusConfig

    async def fetch(self, since: datetime, until: datetime) -> Fetched:
        return await asyncio.to_thread(self.read, since, until, now_utc())

    def files(self) -> list[Path]:
        try:
            root = Path(expand_path(self.config.path))
        except CredentialError as exc:
            raise BillingError(f"focus: path: {exc}") from None
        if root.is_file():
            return [root]
        if not root.is_dir():
            raise BillingError(f"focus: {root} is not a directory")
        found = {p for pattern in PATTERNS for p in root.rglob(pattern) if p.is_file()}
        return sorted(found)

    def read(self, since: datetime, until: datetime, fetched_at: datetime) -> Fetched:
        """Every row of every file whose charge period overlaps [since, until)."""
        final_after = timedelta(seconds=self.config.final_after)
        groups: dict[tuple[str, datetime, datetime], _Group] = {}
        periods: dict[tuple[datetime, datetime], bool] = {}
        for path in self.files():
            for number, row in enumerate(self._rows(path), start=2):
                where = f"focus: {path.name}, row {number}"
                start, end = (
                    _time(row, "ChargePeriodStart", where),
                    _time(row, "ChargePeriodEnd", where),
                )
                if end <= since or start >= until:
                    continue
                amount = decimal(row.get(self.config.cost_column), f"{where}: {self.cost}")
                currency = str(row.get("BillingCurrency") or "").strip().upper()
                if not currency:
                    raise BillingError(f"{where}: no BillingCurrency")
                invoiced = bool(str(row.get("InvoiceId") or "").strip())
                period_end = row.get("BillingPeriodEnd")
                closes = _time(row, "BillingPeriodEnd", where) if period_end else end
                final = invoiced or closes + final_after <= fetched_at
                periods[(start, end)] = periods.get((start, end), True) and final
                resource = str(row.get("ResourceId") or "").strip()
                tags = _tags(row.get("Tags"), where)
                key = (resource, start, end)
                group = groups.get(key)
                if group is None:
                    groups[key] = _Group(amount, currency, final, tags)
                    continue
                if group.currency != currency:
                    raise BillingError(f"{where}: {resource!r} billed in two currencies")
                group.amount += amount
                group.final = group.final and final
                for name, value in tags.items():
                    group.tags.setdefault(name, value)
        lines: list[BillingLine] = []
        for (resource, start, end), group in sorted(groups.items()):
            endpoint = self.mapper.endpoint_for(resource, group.tags)
            name = resource or f"no-resource-id/{endpoint or 'unmapped'}"
            line = self.line(
                name, start, end, group.amount, group.currency, group.final, fetched_at, group.tags
            )
            lines.append(line)
        return Fetched(lines, [Period(s, e, f) for (s, e), f in sorted(periods.items())])

    @property
    def cost(self) -> str:
        return self.config.cost_column

    def _rows(self, path: Path) -> Iterator[Mapping[str, Any]]:
        if path.name.endswith(".parquet"):
            yield from self._parquet_rows(path)
            return
        opener = gzip.open if path.name.endswith(".gz") else open
        try:
            with opener(path, "rt", encoding="utf-8-sig", newline="") as f:
                reader = csv.DictReader(f)
                self._check_columns(path, reader.fieldnames or [])
                yield from reader  # streamed: an export may be larger than memory
        except (OSError, EOFError) as exc:
            raise BillingError(f"focus: cannot read {path.name}: {type(exc).__name__}") from None
        except UnicodeDecodeError:
            raise BillingError(f"focus: {path.name} is not UTF-8 text") from None
        except csv.Error as exc:
            raise BillingError(f"focus: {path.name} is not valid CSV: {exc}") from None

    def _parquet_rows(self, path: Path) -> Iterator[Mapping[str, Any]]:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise BillingError(
                f"focus: reading {path.name} needs pyarrow: pip install 'spectax[parquet]'"
            ) from None
        try:
            parquet = pq.ParquetFile(path)
            names = list(parquet.schema_arrow.names)
            self._check_columns(path, names)
            wanted = [c for c in (*REQUIRED, self.cost, *OPTIONAL) if c in names]
            for batch in parquet.iter_batches(columns=wanted, batch_size=65536):
                yield from batch.to_pylist()
        except BillingError:
            raise
        except Exception as exc:  # pyarrow's errors: a damaged or foreign file
            raise BillingError(f"focus: cannot read {path.name}: {type(exc).__name__}") from None

    def _check_columns(self, path: Path, names: Sequence[str]) -> None:
        missing = [c for c in (*REQUIRED, self.cost) if c not in names]
        if missing:
            raise BillingError(f"focus: {path.name} lacks the FOCUS column(s) {', '.join(missing)}")


def _time(row: Mapping[str, Any], column: str, where: str) -> datetime:
    value = row.get(column)
    if isinstance(value, datetime):
        return utc(value)
    if not isinstance(value, str) or not value.strip():
        raise BillingError(f"{where}: no {column}")
    try:
        return provider_time(value)
    except BillingError:
        raise BillingError(f"{where}: {column} is not a date-time") from None


def _tags(value: Any, where: str) -> dict[str, str]:
    """FOCUS `Tags`: a JSON object in CSV, a map (list of pairs) or struct in Parquet."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise BillingError(f"{where}: Tags is not a JSON object") from None
    if isinstance(value, list):
        value = dict(value)
    if not isinstance(value, dict):
        raise BillingError(f"{where}: Tags is not a JSON object")
    return {str(k): "" if v is None else str(v) for k, v in value.items()}
