"""What the tests of every non-vLLM engine parser share: its fixture pages, a fuzz of them
(only `ParseError` may escape), and `spectax assess` on two of them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spectax.cli.assess import Assessed, AssessOptions, assess_pages
from spectax.engines import EngineSample, ParseError

FIXTURES = Path(__file__).parent / "fixtures"


def pages(directory: str) -> dict[str, str]:
    """Every page of a fixture set by file name (INDEX.txt aside)."""
    root = FIXTURES / directory
    assert (root / "INDEX.txt").is_file(), f"{directory} has no INDEX.txt"
    return {
        p.name: p.read_text(encoding="utf-8")
        for p in sorted(root.glob("*.txt"))
        if p.name != "INDEX.txt"
    }


def fuzz_test(parse: Callable[[str], EngineSample], page: str) -> Callable[[], None]:
    """A hypothesis test: `page` cut, spliced and salted with hostile text either parses
    or raises `ParseError` (never another exception, never a hang)."""
    lines = page.splitlines(keepends=True)
    salt = st.sampled_from(
        ["{", "}", '"', "\\", "\n", " ", "-1", "NaN", "+Inf", "1e400", "=", ",", "_", "x"]
    )

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.lists(
            st.tuples(
                st.integers(0, max(len(lines) - 1, 0)),
                st.integers(0, 200),
                st.lists(salt, max_size=4),
            ),
            max_size=6,
        ),
        st.text(max_size=80),
    )
    def test(edits: list[tuple[int, int, list[str]]], tail: str) -> None:
        mutated = list(lines)
        for index, offset, pieces in edits:
            if mutated:
                line = mutated[index]
                cut = min(offset, len(line))
                mutated[index] = line[:cut] + "".join(pieces) + line[cut:]
        with contextlib.suppress(ParseError):
            parse("".join(mutated) + tail)

    return test


def assess(before: str, after: str, engine: str | None = None) -> Assessed:
    """The one model's assessment between two pages, over 60 s at $2/h."""
    options = AssessOptions(seconds=60.0, usd_per_hour=2.0, method="eagle")
    (result,) = assess_pages(before, after, options, engine=engine)
    return result
