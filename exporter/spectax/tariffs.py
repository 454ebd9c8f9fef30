"""How an endpoint is billed: the `Tariff` its configuration and the price in force give.

Its own module, beside the monitor that uses it (endpoint.py), so that the monitor stays
under the house limit of 400 lines with one thing per module.
"""

from __future__ import annotations

from decimal import Decimal

from spectax.economics import Tariff
from spectax.endpoint_config import EndpointConfig


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
