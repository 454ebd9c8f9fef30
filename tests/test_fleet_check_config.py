"""check-config on a fleet source: its endpoints are found at run time, but their windows
are priced from the source's `endpoint:` settings, and the summary says so (it said the
price table priced no endpoint)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from spectax.cli.main import main


def test_check_config_shows_the_price_every_fleet_endpoint_gets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    priced = {
        "url": "http://prometheus.example:9090",
        "endpoint_labels": ["model_name"],
        "endpoint": {"gpu": "H100 SXM", "gpus": 2, "price": {"usd_per_hour": 2.49}},
    }
    unpriced = {"url": "http://other.example:9090", "endpoint_labels": ["pod"]}
    config = tmp_path / "spectax.yml"
    config.write_text(yaml.safe_dump({"sources": [priced, unpriced]}))
    assert main(["check-config", str(config)]) == 0
    out = capsys.readouterr().out
    first = "source http://prometheus.example:9090: an endpoint per model_name of {}"
    assert f"{first}, each 2.49 USD/GPU-hour x 2" in out
    assert "source http://other.example:9090: an endpoint per pod of {}, each no price" in out
    [billing] = [line for line in out.splitlines() if "billing price_table" in line]
    assert "endpoints: every endpoint of http://prometheus.example:9090" in billing
    assert "not priced, so no money figures: every endpoint of http://other.example:9090" in billing
    assert "no endpoint has a price" not in out
