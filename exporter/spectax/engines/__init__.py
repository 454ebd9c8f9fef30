"""Engine parsers: one `parse(text) -> EngineSample` per inference engine.

Usage: `get_parser("vllm")(page_text)` returns an `EngineSample`. Adding an
engine is one module beside `vllm.py` (its `parse` and `CAPABILITIES`) and one
`Engine` in `ENGINES`: the
configuration's `engine:` accepts the names registered here, and the list in
docs/engines.md is tested against them.
"""

from __future__ import annotations

from collections.abc import Callable

from spectax.engines import llamacpp, sglang, tgi, trtllm, vllm
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
    "detect",
    "get_parser",
    "new_reader",
    "not_exposed",
]

#: Engine name -> the engine: its page's parser, prefix and capabilities.
ENGINES: dict[str, Engine] = {
    "vllm": Engine("vllm", vllm.parse, "vllm:", vllm.CAPABILITIES, reader=vllm.reader),
    "sglang": Engine("sglang", sglang.parse, "sglang:", sglang.CAPABILITIES),
    "trtllm": Engine("trtllm", trtllm.parse, "trtllm_", trtllm.CAPABILITIES, "/prometheus/metrics"),
    "tgi": Engine("tgi", tgi.parse, "tgi_", tgi.CAPABILITIES),
    "llamacpp": Engine("llamacpp", llamacpp.parse, "llamacpp:", llamacpp.CAPABILITIES),
}


def get_parser(name: str) -> Callable[[str], EngineSample]:
    """The parser registered for engine `name`; KeyError naming the known engines otherwise."""
    return _engine(name).parse


def new_reader(name: str) -> Callable[[str], EngineSample]:
    """A parser for one server's pages of engine `name`, for a monitor to keep (`Engine.reader`:
    what it remembers of the server's last page makes the next one cheaper to read)."""
    return _engine(name).new_reader()


def _engine(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        known = ", ".join(sorted(ENGINES))
        raise KeyError(f"unknown engine {name!r}; known engines: {known}") from None


def detect(text: str) -> str | None:
    """The registered engine whose metric prefix starts a line of `text` (None: none does;
    a page without engine families, vLLM `--disable-log-stats` say)."""
    body = "\n" + text
    for name, engine in ENGINES.items():
        if f"\n{engine.prefix}" in body or f"\n# TYPE {engine.prefix}" in body:
            return name
    return None


def not_exposed(engine: str) -> dict[str, str]:
    """Quantity -> why, for each quantity `engine` does not expose ("not exposed by ...")."""
    capabilities = ENGINES[engine].capabilities if engine in ENGINES else {}
    return {q: c.why for q, c in capabilities.items() if c.support == "absent"}
