"""Engine parsers: one `parse(text) -> EngineSample` per inference engine.

Usage: `get_parser("vllm")(page_text)` returns an `EngineSample`. Adding an
engine is one module beside `vllm.py` (its `parse` and `CAPABILITIES`) and one
`Engine` in `ENGINES`: the
configuration's `engine:` accepts the names registered here, and the README's
list is tested against them.
"""

from __future__ import annotations

from collections.abc import Callable

from spectax.engines import llamacpp, vllm
from spectax.engines.base import (
    QUANTITIES,
    Capability,
    Engine,
    EngineSample,
    Histogram,
    ModelSample,
    ParseError,
)

__all__ = [
    "ENGINES",
    "QUANTITIES",
    "Capability",
    "Engine",
    "EngineSample",
    "Histogram",
    "ModelSample",
    "ParseError",
    "get_parser",
]

#: Engine name -> the engine: its page's parser, prefix and capabilities.
ENGINES: dict[str, Engine] = {
    "vllm": Engine("vllm", vllm.parse, "vllm:", vllm.CAPABILITIES),
    "llamacpp": Engine("llamacpp", llamacpp.parse, "llamacpp:", llamacpp.CAPABILITIES),
}


def get_parser(name: str) -> Callable[[str], EngineSample]:
    """The parser registered for engine `name`; KeyError naming the known engines otherwise."""
    try:
        return ENGINES[name].parse
    except KeyError:
        known = ", ".join(sorted(ENGINES))
        raise KeyError(f"unknown engine {name!r}; known engines: {known}") from None
