"""One page renderer per serving engine, all reading the same simulated state.

The physics (:mod:`~spectax.simulate.exact`, :mod:`~spectax.simulate.steady`) does not
know which engine it simulates; the page does. Each renderer writes its engine's families,
labels and types as the engine's fixtures have them, and leaves out what the engine does
not expose. Adding an engine is one renderer module and one line here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from spectax.simulate.llamacpp_page import LlamacppPage
from spectax.simulate.sglang_page import SglangPage
from spectax.simulate.state import EngineState
from spectax.simulate.tgi_page import TgiPage
from spectax.simulate.trtllm_page import TrtllmPage
from spectax.simulate.vllm_page import MetricsPage

__all__ = ["PAGES", "EnginePage", "page_for"]


class EnginePage(Protocol):
    content_type: str

    def render(self) -> str: ...


#: `SimProfile.serving_engine` -> its page renderer (built once per process start).
PAGES: dict[str, Callable[[EngineState], EnginePage]] = {
    "vllm": MetricsPage,
    "sglang": SglangPage,
    "trtllm": TrtllmPage,
    "tgi": TgiPage,
    "llamacpp": LlamacppPage,
}


def page_for(state: EngineState) -> EnginePage:
    """The page of the engine the state's profile names."""
    engine = state.profile.serving_engine
    try:
        return PAGES[engine](state)
    except KeyError:
        raise ValueError(
            f"no simulated page for engine {engine!r}; simulated: {', '.join(sorted(PAGES))}"
        ) from None
