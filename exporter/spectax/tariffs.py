"""How an endpoint is billed: the price and the GPU its configuration names, looked up in
the tables, and the `Tariff` they give.

The one place of the rule, used wherever an endpoint is priced: the configuration's
checks (spectax.config, check-config), every monitor the daemon starts (its configured
endpoints and those a fleet source discovers) and the backfill.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from decimal import Decimal

from spectax.billing.prices import PriceTable, PriceTableError
from spectax.economics import Tariff
from spectax.endpoint_config import EndpointConfig
from spectax.gpus import GpuSpec, gpu_spec

# Only a fleet source's `endpoint:` block can reach a monitor with a price that does not
# resolve (the file's endpoints are refused at load): its messages keep the fleet's logger.
log = logging.getLogger("spectax.fleet")


@dataclass(frozen=True, slots=True, kw_only=True)
class Pricing:
    """What an endpoint is priced at and runs on, as its configuration names them."""

    usd_per_hour: Decimal | None  # per GPU; None: unpriced (no spend rather than a false $0)
    gpu: GpuSpec | None  # None: it names no GPU, or one not in spectax's GPU table
    problem: str | None = None  # why the price it gives cannot be used


def gpu_named(endpoint: EndpointConfig) -> str | None:
    """The GPU an endpoint names: its price's `gpu` (the row of the price table it pays),
    else its own `gpu:`. Its specs and its price are both looked up by this name."""
    return (endpoint.price and endpoint.price.gpu) or endpoint.gpu


def pricing_of(endpoint: EndpointConfig, prices: PriceTable) -> Pricing:
    """The endpoint's price per GPU-hour, or why there is none, and its GPU's specs."""
    named = gpu_named(endpoint)
    gpu, price = gpu_spec(named), endpoint.price
    if price is None:
        return Pricing(usd_per_hour=None, gpu=gpu)  # unpriced: no spend and no cost figures
    if price.usd_per_hour is not None:
        if price.provider or price.product:
            return Pricing(
                usd_per_hour=None,
                gpu=gpu,
                problem="give either usd_per_hour or provider/product/gpu, not both",
            )
        return Pricing(usd_per_hour=price.usd_per_hour, gpu=gpu)
    if not (price.provider and price.product and named):
        return Pricing(
            usd_per_hour=None,
            gpu=gpu,
            problem="needs usd_per_hour, or provider, product and gpu to look up",
        )
    try:
        found = prices.lookup(price.provider, price.product, named)
    except PriceTableError as exc:
        return Pricing(usd_per_hour=None, gpu=gpu, problem=str(exc))
    return Pricing(usd_per_hour=found.usd_per_hour, gpu=gpu)


def running_pricing(endpoint: EndpointConfig, prices: PriceTable) -> Pricing:
    """`pricing_of` for a monitor about to run: a price that does not resolve leaves the
    endpoint unpriced, and a warning says why."""
    pricing = pricing_of(endpoint, prices)
    if pricing.problem:
        log.warning("endpoint %s: price: %s; it stays unpriced", endpoint.name, pricing.problem)
    return pricing


def tariff_of(config: EndpointConfig, usd_per_hour: Decimal | None) -> Tariff:
    """How the endpoint is billed, from its configuration and the price in force."""
    spec = config.speculation
    draft_load = None
    if spec is not None and spec.draft_weight_bytes:
        draft_load = spec.draft_weight_bytes / config.weight_load_bytes_per_second
    return Tariff(
        usd_per_hour=usd_per_hour,
        gpus=config.gpus,
        billing_mode=config.billing_mode,
        cold_start_seconds=config.cold_start_seconds,
        draft_load_seconds=draft_load,
    )
