"""The registries are the one list of engines and of billing sources: the configuration
accepts what they hold, and the docs list what they hold (DESIGN.md, "A registry"):
docs/engines.md the engines and their capability matrix, docs/billing.md the billing
sources, the README's quick start the engines a configuration may name."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from spectax.billing.registry import SOURCES, BillingConfig
from spectax.endpoint_config import EndpointConfig
from spectax.engines import ENGINES

REPOSITORY = Path(__file__).resolve().parents[1]
README = REPOSITORY / "README.md"
ENGINES_DOC = REPOSITORY / "docs" / "engines.md"
BILLING_DOC = REPOSITORY / "docs" / "billing.md"


def doc_list(doc: Path, label: str) -> list[str]:
    """The `names` after `label` in a docs page, up to the end of its sentence."""
    text = doc.read_text(encoding="utf-8")
    assert text.count(label) == 1, f"{doc.name} should hold {label!r} once"
    sentence = text.split(label, 1)[1].split(".\n", 1)[0].split(". ", 1)[0]
    return re.findall(r"`([a-z0-9_]+)`", sentence)


def test_the_docs_list_the_registered_engines() -> None:
    assert doc_list(ENGINES_DOC, "Engines (`engine:`):") == list(ENGINES)


def test_the_readme_quick_start_names_every_registered_engine() -> None:
    """Its one `engine:` line says which others a configuration may name: all of them."""
    text = README.read_text(encoding="utf-8")
    (line,) = [x for x in text.splitlines() if x.strip().startswith("engine:")]
    named = re.findall(r"\b(" + "|".join(ENGINES) + r")\b", line)
    assert named == list(ENGINES), line


def test_the_example_configuration_names_every_registered_engine() -> None:
    """It said "engine: vllm # the only engine today" with five registered."""
    example = (REPOSITORY / "spectax.example.yml").read_text(encoding="utf-8")
    line = next(x for x in example.splitlines() if x.strip().startswith("engine:"))
    assert sorted(re.findall(r"\b(" + "|".join(ENGINES) + r")\b", line)) == sorted(ENGINES)


def test_the_docs_list_the_registered_billing_sources() -> None:
    assert doc_list(BILLING_DOC, "Source types (`type:`):") == list(SOURCES)


def test_the_configuration_accepts_what_the_registries_hold() -> None:
    assert get_args(EndpointConfig.model_fields["engine"].annotation) == tuple(ENGINES)
    union = get_args(get_args(BillingConfig)[0])
    assert union == tuple(SOURCES.values())
    for name, model in SOURCES.items():
        assert get_args(model.model_fields["type"].annotation) == (name,)


def test_every_engine_declares_every_quantity_of_the_capability_matrix() -> None:
    """The docs' matrix and `assess` read these: a quantity left out would show as
    neither exposed nor "not exposed by <engine>"."""
    from spectax.engines import QUANTITIES

    for name, engine in ENGINES.items():
        assert engine.name == name
        assert set(engine.capabilities) == set(QUANTITIES), name
        for quantity, capability in engine.capabilities.items():
            assert capability.support in {"exact", "derived", "absent"}, (name, quantity)
            if capability.support != "exact":
                assert capability.why, f"{name} {quantity}: say why it is {capability.support}"


def test_the_docs_capability_matrix_is_the_registered_one() -> None:
    """docs/engines.md's table and its list of reasons are what `ENGINES` declares, so
    the matrix a user reads cannot drift from what spectax does."""
    from spectax.engines import QUANTITIES

    text = ENGINES_DOC.read_text(encoding="utf-8")
    assert "| engine | " + " | ".join(QUANTITIES) + " |" in text
    for name, engine in ENGINES.items():
        cells = " | ".join(engine.capabilities[q].support for q in QUANTITIES)
        assert f"| `{name}` | {cells} |" in text, name
        for quantity in QUANTITIES:
            capability = engine.capabilities[quantity]
            if capability.support != "exact":
                line = f"- `{name}` {quantity}: {capability.support}, {capability.why}"
                assert line in text, line
    table = text.split("| engine | ", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `([a-z0-9_]+)` \|", table, flags=re.MULTILINE)
    assert rows == list(ENGINES), "one row per registered engine, in their order"
