"""The recorded vLLM 0.32.0 pages most unit tests feed, and an independent reading of them.

A helper module, not conftest: test modules import it; conftest holds only fixtures and
pytest's settings (tests/test_architecture.py keeps test modules from importing conftest).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

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
