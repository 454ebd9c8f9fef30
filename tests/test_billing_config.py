"""The `billing:` section of the configuration, and the retry policy's arithmetic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest

from spectax.billing.registry import SOURCES
from spectax.billing.retry import RetryPolicy, parse_retry_after
from spectax.config import ConfigError, validate

ENDPOINTS = [{"name": "chat", "url": "http://127.0.0.1:1"}]


def problems(billing: list[dict[str, Any]]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        validate({"endpoints": ENDPOINTS, "billing": billing})
    return caught.value.problems


def test_price_table_is_always_on_and_first(tmp_path: Path) -> None:
    settings = validate(
        {
            "endpoints": ENDPOINTS,
            "billing": [
                {
                    "type": "focus",
                    "path": str(tmp_path),
                    "map": [{"endpoint": "chat", "resource": "i-1"}],
                }
            ],
        }
    )
    assert [(s.name, s.kind) for s in settings.billing] == [
        ("price_table", "price_table"),
        ("focus", "focus"),
    ]
    assert validate({}).billing[0].kind == "price_table"
    assert set(SOURCES) == {"price_table", "aws_cost_explorer", "runpod", "opencost", "focus"}


def test_every_problem_is_reported_with_its_path(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SPECTAX_TEST_UNSET", raising=False)
    found = problems(
        [
            {"type": "aws_cost_explorer", "tag_key": "app", "interval": "5m"},
            {"type": "runpod", "name": "rp", "map": [{"endpoint": "nope", "resource": "p"}]},
            {"type": "runpod", "name": "rp", "api_key": "${SPECTAX_TEST_UNSET}"},
            {"type": "opencost", "url": "http://oc:9003", "label": "app", "colour": "red"},
        ]
    )
    assert any("colour" in p and "unknown key" in p for p in found), found
    found = problems(
        [
            {"type": "aws_cost_explorer", "tag_key": "app", "interval": "5m"},
            {"type": "runpod", "name": "rp", "map": [{"endpoint": "nope", "resource": "p"}]},
            {"type": "runpod", "name": "rp", "api_key": "${SPECTAX_TEST_UNSET}"},
        ]
    )
    assert "billing[0].interval: at least 3600 s (each GetCostAndUsage request costs USD 0.01)" in (
        found
    )
    assert "billing[1].map[0].endpoint: no endpoint named 'nope'" in found
    assert "billing[1].api_key: required (or api_key_file)" in found
    assert "billing[2].name: 'rp' is used by an earlier source" in found
    assert "billing[2].api_key: environment variable SPECTAX_TEST_UNSET is not set or empty" in (
        found
    )


def test_an_endpoint_is_billed_by_one_source(tmp_path: Path) -> None:
    rule = [{"endpoint": "chat", "resource": "x"}]
    found = problems(
        [
            {"type": "focus", "name": "a", "path": str(tmp_path), "map": rule},
            {"type": "focus", "name": "b", "path": str(tmp_path), "map": rule},
        ]
    )
    assert found == [
        "billing[1].map: endpoint 'chat' is billed by 'a' already"
        " (one source per endpoint, or its spend would count twice)"
    ]


def test_a_map_rule_needs_something_to_match(tmp_path: Path) -> None:
    found = problems([{"type": "focus", "path": str(tmp_path), "map": [{"endpoint": "chat"}]}])
    assert len(found) == 1 and "give resource, tags, or both" in found[0]


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    when = datetime.now(UTC) + timedelta(seconds=30)
    assert 25 < (parse_retry_after(format_datetime(when, usegmt=True)) or 0) <= 30


def test_backoff_doubles_up_to_the_cap_with_full_jitter() -> None:
    top = RetryPolicy(base=1.0, cap=10.0, rng=lambda: 1.0)
    assert [top.delay(n, None) for n in range(1, 6)] == [1.0, 2.0, 4.0, 8.0, 10.0]
    assert RetryPolicy(rng=lambda: 0.25).delay(3, None) == 1.0
    assert top.delay(1, 42.0) == 42.0  # the provider's Retry-After wins
