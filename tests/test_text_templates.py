"""The text encoder's templates (issue 31) write the bytes a line at a time would.

An endpoint's lines are filled into the template of its last samples' names and labels
while they stay the same; these tests hold every filled fragment to the reference, the
same samples written a line at a time by `line_writer`, on samples made up by hypothesis:
label values that need escaping or hold a `%`, a NUL (the per-family path) or the
endpoint's own name elsewhere, infinities, NaN, None, -0.0 and integers for values, the
same names and labels again with new values, other names and labels, and a second
endpoint that shares the first one's template.
"""

from __future__ import annotations

import math
from typing import cast

from hypothesis import given, settings
from hypothesis import strategies as st

from spectax.endpoint import EndpointSnapshot
from spectax.exposition.families import FAMILIES, AddSample
from spectax.exposition.text import FAMILY_NAMES, Fragments, TextEncoder, line_writer

Sample = tuple[str, tuple[str, ...], float | None]

# one family per label count: none, one, two, three, four
FAMILIES_BY_ARITY = {len(f.labels): name for name, f in reversed(FAMILIES.items())}
ODD = ["m", "50%", "%s", "%%", 'a "b"', "x\\y", "l\nm", "\x00", "ü", "{}", "", "p99"]


def samples_of(name: str) -> st.SearchStrategy[list[Sample]]:
    """Samples of a few families, label values odd or the endpoint's own name."""
    label = st.sampled_from([*ODD, name]) | st.text(max_size=4)
    value = (
        st.floats(allow_nan=True, allow_infinity=True)
        | st.none()
        | st.integers(-(10**20), 10**20)
        | st.sampled_from([-0.0, 0.0, 1.0, math.inf, -math.inf])
    )

    @st.composite
    def one(draw: st.DrawFn) -> Sample:
        arity = draw(st.sampled_from(sorted(FAMILIES_BY_ARITY)))
        labels = tuple(draw(label) for _ in range(arity))
        return FAMILIES_BY_ARITY[arity], labels, draw(value)

    return st.lists(one(), max_size=12)


def walk(samples: list[Sample], endpoint: str) -> list[Sample]:
    """The samples with "{name}" in a label value replaced by the endpoint's name."""
    return [(n, tuple(endpoint if v == "{name}" else v for v in ls), x) for n, ls, x in samples]


def reference(samples: list[Sample]) -> Fragments:
    lines: dict[str, list[str]] = {}
    add = line_writer(lines)
    for name, labels, value in samples:
        add(name, labels, value)
    return tuple(("".join(t).encode() if (t := lines.get(f)) else None) for f in FAMILY_NAMES)


class Walks:
    """An encoder's walk: each call to `fragments` reads the samples set for its endpoint."""

    def __init__(self) -> None:
        self.samples: dict[str, list[Sample]] = {}
        self.encoder = TextEncoder(self.add_samples)

    def add_samples(self, add: AddSample, name: str, snap: EndpointSnapshot) -> None:
        for family, labels, value in self.samples[name]:
            add(family, labels, value)

    def fragments(self, name: str, samples: list[Sample]) -> Fragments:
        self.samples[name] = samples
        return self.encoder.fragments(name, cast(EndpointSnapshot, object()))


names = st.sampled_from(["replica-0", "50%", 'q"x', "n\x00ul", "ü", "m"])


@settings(max_examples=300, deadline=None)
@given(
    first=names,
    second=names,
    shape=st.data(),
)
def test_the_filled_templates_are_the_lines_written_one_at_a_time(
    first: str, second: str, shape: st.DataObject
) -> None:
    walks = Walks()
    samples = shape.draw(samples_of("{name}"))
    for endpoint in (first, second):  # the second shares the first's template
        mine = walk(samples, endpoint)
        assert walks.fragments(endpoint, mine) == reference(mine)
        # the same names and labels, other values: the same template filled again
        values = shape.draw(st.lists(st.floats(), min_size=len(mine), max_size=len(mine)))
        again = [(n, ls, v) for (n, ls, _), v in zip(mine, values, strict=True)]
        assert walks.fragments(endpoint, again) == reference(again)
    other = walk(shape.draw(samples_of("{name}")), first)  # other names and labels
    assert walks.fragments(first, other) == reference(other)


def test_a_value_that_turns_to_none_or_back_changes_the_lines_it_is_on() -> None:
    walks = Walks()
    ratio, labels = "spectax_acceptance_ratio", ("e", "m")
    present = [(ratio, labels, 0.5), ("spectax_endpoint_up", ("e",), 1.0)]
    absent = [(ratio, labels, None), ("spectax_endpoint_up", ("e",), 1.0)]
    nan = [(ratio, labels, math.nan), ("spectax_endpoint_up", ("e",), 0.0)]
    for samples in (present, absent, present, nan, present):
        assert walks.fragments("e", samples) == reference(samples)
    assert walks.fragments("e", []) == (None,) * len(FAMILY_NAMES)


def test_a_page_keeps_its_generation_until_spectax_own_lines_or_a_snapshot_change() -> None:
    walks = Walks()
    walks.samples["e"] = [("spectax_endpoint_up", ("e",), 1.0)]
    snap = cast(EndpointSnapshot, object())
    rows = {"e": 0.0, "": 1.0}

    def own(add: AddSample) -> None:
        add("spectax_store_up", (), 1.0)
        for name, count in rows.items():
            add("spectax_store_quarantined_rows_total", (name,), count)

    first = walks.encoder.render(own, {"e": snap})
    body = b"".join(first.parts)
    expected = reference([("spectax_store_up", (), 1.0)])[FAMILY_NAMES.index("spectax_store_up")]
    assert expected is not None and expected in body
    assert b'spectax_store_quarantined_rows_total{endpoint=""} 1.0\n' in body
    again = walks.encoder.render(own, {"e": snap})
    assert again.generation == first.generation and b"".join(again.parts) == body
    rows["e"] = 3.0
    later = walks.encoder.render(own, {"e": snap})
    assert later.generation == first.generation + 1
    assert b'spectax_store_quarantined_rows_total{endpoint="e"} 3.0\n' in b"".join(later.parts)
    newer = walks.encoder.render(own, {"e": cast(EndpointSnapshot, object())})
    assert newer.generation == later.generation + 1
