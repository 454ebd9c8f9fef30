"""vLLM's label sets: the model_name, position and le of a sample line, parsed once each.

Apart from `vllm.py` (its parser) so that the parser stays under 400 lines; the parser
reads the cache directly, on every line, and calls `parse_labels` only for a set it has
not seen.
"""

from __future__ import annotations

import math
from typing import Final

from spectax.engines.scan import MAX_MODEL_NAME, PAIR, unescape

# Raw label-set text -> (model_name or None, position or None, le as a float or None).
# Label sets repeat on every page, so they are parsed once per process. Bounded: cleared
# when full, and only sets up to 1 KiB are kept (a real one is ~100 characters), so a
# hostile page cannot make the cache hold 4,096 copies of a megabyte-long label set.
LABEL_CACHE: dict[str, tuple[str | None, str | None, float | None]] = {}
_LABEL_CACHE_MAX: Final = 4096
_LABEL_CACHE_KEY_MAX: Final = 1024


def parse_labels(labels: str) -> tuple[str | None, str | None, float | None] | str:
    """(model_name, position, le) from an already validated `{...}`, or an error message."""
    found: dict[str, str] = {}
    for key, raw in PAIR.findall(labels):
        if key in found:
            return f"duplicate label {key!r}"
        found[key] = raw
    model = found.get("model_name")
    position = found.get("position")
    le: float | None = None
    if "le" in found:
        try:
            le = float(found["le"])
        except ValueError:
            return f"bad bucket bound le={found['le']!r}"
        if math.isnan(le) or "_" in found["le"] or not found["le"].isascii():
            return f"bad bucket bound le={found['le']!r}"
    result = (
        unescape(model) if model else None,
        unescape(position) if position is not None else None,
        le,
    )
    if result[0] is not None and len(result[0]) > MAX_MODEL_NAME:
        return (
            f"model_name is {len(result[0])} characters long, more than {MAX_MODEL_NAME}: "
            "serve the model under a shorter name (vLLM --served-model-name)"
        )
    if len(labels) <= _LABEL_CACHE_KEY_MAX:
        if len(LABEL_CACHE) >= _LABEL_CACHE_MAX:
            LABEL_CACHE.clear()
        LABEL_CACHE[labels] = result
    return result
