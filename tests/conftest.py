"""Shared test helpers: the recorded vLLM pages, and reading them with prometheus_client."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from prometheus_client.parser import text_string_to_metric_families

# No test is a timing test (speed lives in bench/): a busy CI machine must not fail one.
settings.register_profile("spectax", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("spectax")

FIXTURES = Path(__file__).parent / "fixtures" / "vllm-0.32.0"


def page(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def reference_values(text: str) -> dict[str, dict[str, float]]:
    """sample name -> {model or model/position: value}, summed over `engine`, by prometheus_client.

    Independent of spectax's own parser, so tests can compare against it.
    """
    values: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            model = sample.labels.get("model_name")
            if model is None:
                continue
            key = model
            if "position" in sample.labels:
                key = f"{model}/{sample.labels['position']}"
            values[sample.name][key] += sample.value
    return values


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def pg_server():
    from pg import Server

    server = Server()
    yield server
    server.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path) -> str:
    """An empty database of each backend: every store test runs on both."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/history.sqlite"
    return request.getfixturevalue("pg_server").database()
