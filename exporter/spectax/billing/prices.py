"""GPU list prices: the shipped table, optionally overridden by the operator's own file.

The table is the estimate behind every spend figure until a billing source
says otherwise. Each row keeps its as-of date and source, so a price can be
traced back when the budget meeting asks where a number came from.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from importlib import resources
from pathlib import Path
from typing import ClassVar, Literal

from spectax.billing.types import BillingLine, SourceConfig
from spectax.units import Duration

COLUMNS = (
    "provider",
    "product",
    "gpu",
    "usd_per_second",
    "usd_per_hour",
    "billing_granularity",
    "as_of",
    "source",
)


class PriceTableError(ValueError):
    """A price table file that cannot be used, or a lookup that matches nothing."""


@dataclass(frozen=True, slots=True)
class Price:
    provider: str
    product: str
    gpu: str
    usd_per_hour: Decimal
    billing_granularity: str
    as_of: str
    source: str

    @property
    def key(self) -> tuple[str, str, str]:
        return _key(self.provider, self.product, self.gpu)


class PriceTable:
    """Prices keyed by (provider, product, gpu), compared case-insensitively."""

    def __init__(self, prices: list[Price]):
        self._prices = {price.key: price for price in prices}

    @classmethod
    def load(cls, override: Path | None = None) -> PriceTable:
        """The shipped table, with rows of `override` replacing or adding to it."""
        shipped = resources.files("spectax").joinpath("data/gpu_prices.csv")
        prices = _read(shipped.read_text(encoding="utf-8"), "the shipped price table")
        if override is not None:
            try:
                text = override.read_text(encoding="utf-8")
            except OSError as exc:
                raise PriceTableError(f"{override}: cannot read: {exc.strerror}") from None
            prices += _read(text, str(override))
        return cls(prices)

    def __len__(self) -> int:
        return len(self._prices)

    def __iter__(self) -> Iterator[Price]:
        return iter(self._prices.values())

    def find(self, provider: str, gpu: str, product: str | None = None) -> Price:
        """Look up by provider and GPU; the product is needed only when several match."""
        if product is not None:
            return self.lookup(provider, product, gpu)
        matches = [p for p in self if p.key[0] == provider.lower() and p.key[2] == gpu.lower()]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise PriceTableError(f"no price for provider={provider!r} gpu={gpu!r}")
        products = "; ".join(sorted(p.product for p in matches))
        raise PriceTableError(f"several prices for {provider} {gpu}: choose a product ({products})")

    def lookup(self, provider: str, product: str, gpu: str) -> Price:
        price = self._prices.get(_key(provider, product, gpu))
        if price is not None:
            return price
        same_provider = sorted(
            f"{p.product} / {p.gpu}" for p in self._prices.values() if p.key[0] == provider.lower()
        )
        hint = (
            f"known for {provider}: " + "; ".join(same_provider)
            if same_provider
            else "known providers: "
            + ", ".join(sorted({p.provider for p in self._prices.values()}))
        )
        raise PriceTableError(
            f"no price for provider={provider!r} product={product!r} gpu={gpu!r} ({hint})"
        )


def _key(provider: str, product: str, gpu: str) -> tuple[str, str, str]:
    return (provider.strip().lower(), product.strip().lower(), gpu.strip().lower())


def _read(text: str, where: str) -> list[Price]:
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in ("provider", "product", "gpu") if c not in (reader.fieldnames or [])]
    if missing or not {"usd_per_hour", "usd_per_second"} & set(reader.fieldnames or []):
        raise PriceTableError(f"{where}: needs the columns {', '.join(COLUMNS)}")
    prices = []
    for line, row in enumerate(reader, start=2):
        try:
            hourly = (row.get("usd_per_hour") or "").strip()
            per_second = (row.get("usd_per_second") or "").strip()
            usd_per_hour = Decimal(hourly) if hourly else Decimal(per_second) * 3600
        except InvalidOperation:
            raise PriceTableError(
                f"{where}, line {line}: price {hourly or per_second!r} is not a number"
            ) from None
        if not usd_per_hour.is_finite() or usd_per_hour < 0:
            raise PriceTableError(f"{where}, line {line}: price must be a non-negative number")
        prices.append(
            Price(
                provider=row["provider"].strip(),
                product=row["product"].strip(),
                gpu=row["gpu"].strip(),
                usd_per_hour=usd_per_hour,
                billing_granularity=(row.get("billing_granularity") or "").strip(),
                as_of=(row.get("as_of") or "").strip(),
                source=(row.get("source") or "").strip(),
            )
        )
    return prices


# ---------------------------------------------------------------- the estimate in the billing list


class PriceTableConfig(SourceConfig):
    """The estimate, always on. It is no provider to read: the live spend is priced from
    the table as each window closes (`Settings.usd_per_hour`). Listing it only sets how
    often the estimate is reconciled against the bills (`BillingService`)."""

    type: Literal["price_table"]
    interval: Duration = 300.0
    lookback: Duration = 86400.0
    estimate: ClassVar[bool] = True


def estimate_lines(
    source: str, hourly: Iterable[tuple[str, datetime, Decimal]], fetched_at: datetime
) -> list[BillingLine]:
    """The store's estimate (endpoint, hour, USD) as billing lines, for `spectax billing
    fetch`: per endpoint and hour, the spend its windows accrued from the price table, the
    GPU count and the billing mode. Never final and never stored as a bill."""
    return [
        BillingLine(
            source=source,
            resource=endpoint,
            endpoint=endpoint,
            start=hour,
            end=hour + timedelta(hours=1),
            amount=amount,
            currency="USD",
            final=False,
            fetched_at=fetched_at,
        )
        for endpoint, hour, amount in hourly
    ]
