"""An endpoint's price and GPU: one rule (spectax.tariffs) for the configuration's checks,
the daemon's monitors, a fleet's discovered endpoints and the backfill."""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

import pytest

from spectax.billing.prices import PriceTable
from spectax.config import validate
from spectax.endpoint_config import EndpointConfig
from spectax.gpus import gpu_spec
from spectax.tariffs import Pricing, gpu_named, pricing_of, running_pricing

PRICES = PriceTable.load()
SECURE_H100 = {"provider": "runpod", "product": "pods secure", "gpu": "H100 SXM"}


def endpoint(**settings: Any) -> EndpointConfig:
    return EndpointConfig(name="e", url="http://h:1", **settings)


def test_the_gpu_an_endpoint_names_is_its_price_rows_else_its_own() -> None:
    """The row it pays names the GPU it runs on: its specs are looked up by that name too."""
    priced = endpoint(gpu="A100 SXM 80GB", price=SECURE_H100)
    assert gpu_named(priced) == "H100 SXM"
    assert pricing_of(priced, PRICES) == Pricing(
        usd_per_hour=Decimal("3.99"), gpu=gpu_spec("H100 SXM")
    )
    by_its_own = endpoint(gpu="h100 sxm", price={"provider": "runpod", "product": "pods secure"})
    assert gpu_named(by_its_own) == "h100 sxm"
    assert pricing_of(by_its_own, PRICES) == Pricing(
        usd_per_hour=Decimal("3.99"), gpu=gpu_spec("H100 SXM")
    )
    rate = endpoint(gpu="A100 SXM 80GB", price={"usd_per_hour": "2.5"})
    assert pricing_of(rate, PRICES) == Pricing(
        usd_per_hour=Decimal("2.5"), gpu=gpu_spec("A100 SXM 80GB")
    )


def test_an_endpoint_without_a_price_is_unpriced_not_free_and_keeps_its_gpu() -> None:
    assert pricing_of(endpoint(gpu="H100 SXM"), PRICES) == Pricing(
        usd_per_hour=None, gpu=gpu_spec("H100 SXM")
    )
    assert pricing_of(endpoint(gpu="A10G"), PRICES) == Pricing(
        usd_per_hour=None, gpu=None
    )  # not in the table
    assert pricing_of(endpoint(), PRICES) == Pricing(usd_per_hour=None, gpu=None)


@pytest.mark.parametrize(
    ("price", "problem"),
    [
        ({"usd_per_hour": 3, "provider": "runpod"}, "give either usd_per_hour or provider"),
        ({"provider": "runpod", "product": "pods secure"}, "needs usd_per_hour, or provider"),
        ({**SECURE_H100, "product": "pods gold"}, "no price for provider='runpod'"),
    ],
)
def test_a_price_that_cannot_be_used_says_why_and_prices_nothing(
    price: dict[str, Any], problem: str
) -> None:
    pricing = pricing_of(endpoint(price=price), PRICES)
    assert pricing.usd_per_hour is None
    assert pricing.problem is not None and pricing.problem.startswith(problem)


def test_a_running_endpoint_with_such_a_price_is_unpriced_and_the_log_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only a fleet source's `endpoint:` block gets there: the file's endpoints are refused."""
    with caplog.at_level(logging.WARNING, "spectax.fleet"):
        pricing = running_pricing(endpoint(price={**SECURE_H100, "product": "x"}), PRICES)
    assert pricing.usd_per_hour is None
    assert "endpoint e: price: no price for provider='runpod'" in caplog.text
    assert "it stays unpriced" in caplog.text


def test_a_discovered_endpoint_is_priced_as_a_configured_one_with_its_settings() -> None:
    block = {"gpu": "A100 SXM 80GB", "price": SECURE_H100}
    settings = validate(
        {
            "endpoints": [{"name": "configured", "url": "http://h:1", **block}],
            "sources": [{"url": "http://prom:9090", "endpoint_labels": ["pod"], "endpoint": block}],
        }
    )
    found = settings.config.sources[0].endpoint_config("found")
    assert pricing_of(found, settings.prices).usd_per_hour == settings.usd_per_hour["configured"]
    assert settings.usd_per_hour["configured"] == Decimal("3.99")
    assert pricing_of(found, settings.prices).gpu == gpu_spec("H100 SXM")
