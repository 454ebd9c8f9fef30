"""Engine parsers: one `parse(text) -> EngineSample` per inference engine.

Usage: `get_parser("vllm")(page_text)` returns an `EngineSample`. Adding an
engine is one module beside `vllm.py` and one line in `ENGINES`: the
configuration's `engine:` accepts the names registered here, and the README's
list is tested against them.
"""

from __future__ import annotations

from collections.abc import Callable

from spectax.engines import vllm
from spectax.engines.base import EngineSample, Histogram, ModelSample, ParseError

__all__ = [
    "ENGINES",
    "EngineSample",
    "Histogram",
    "ModelSample",
    "ParseError",
    "get_parser",
]

#: Engine name -> parser of that engine's `/metrics` page.
ENGINES: dict[str, Callable[[str], EngineSample]] = {
    "vllm": vllm.parse,
}


def get_parser(name: str) -> Callable[[str], EngineSample]:
    """The parser registered for engine `name`; KeyError naming the known engines otherwise."""
    try:
        return ENGINES[name]
    except KeyError:
        known = ", ".join(sorted(ENGINES))
        raise KeyError(f"unknown engine {name!r}; known engines: {known}") from None
