"""YAML as spectax's files are read: safe, and a key given twice in one mapping a problem.

PyYAML keeps the last of two equal keys without a word, so a second `window:` further down
a file, or a `bearer_token` pasted twice into one endpoint with different values, would
silently win over the first. Every such key is reported (with its line and the first's),
all of them in one pass, so that check-config lists them beside the field errors.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode

_MERGE = "tag:yaml.org,2002:merge"  # `<<: *base` overrides on purpose: not a duplicate


class _Loader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[int, str]] = []

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            try:
                key = self.construct_object(key_node, deep=True)
                hash(key)
            except (yaml.YAMLError, TypeError):
                continue  # an unhashable key: the constructor below says so
            line = key_node.start_mark.line + 1
            if key in first:
                self.duplicates.append(
                    (
                        line,
                        f"line {line}: key {key!r} is given twice in one mapping (first on "
                        f"line {first[key]}); YAML would keep only the last: remove one of them",
                    )
                )
            else:
                first[key] = line
        return super().construct_mapping(node, deep=deep)


def load(text: str) -> tuple[Any, list[str]]:
    """The document in `text` and its duplicate keys (one message each, in file order).
    Raises yaml.YAMLError as yaml.safe_load does."""
    loader = _Loader(text)
    try:
        data = loader.get_single_data()
        return data, [message for _, message in sorted(loader.duplicates)]
    finally:
        loader.dispose()
