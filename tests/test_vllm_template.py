"""The vLLM parser's page templates (vllm._Template, issue 31): from a layout's third page
read through it, a page is matched whole against a template of its learnt page; what it
gives must be what the line-by-line reading gives, on every recorded page and on any page
that differs from the template (a line added, removed or changed anywhere)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_parsers import vllm_reference as reference
from spectax.engines import vllm
from spectax.engines.base import EngineSample, ParseError
from spectax.engines.vllm import parse

FIXTURES = Path(__file__).parent / "fixtures" / "vllm-0.32.0"
PAGES = sorted(
    p
    for p in FIXTURES.glob("*.txt")
    if p.name != "INDEX.txt" and "headers" not in p.name and len(p.read_bytes()) > 16384
)


def _templated(text: str) -> None:
    """Read `text` as a server's pages until its layout has a template."""
    for _ in range(2 + vllm._TEMPLATE_AFTER):
        parse(text)


@contextlib.contextmanager
def _nothing_learnt() -> Iterator[None]:
    """The parser as in a new process: no layout, no template (restored after)."""
    saved = {
        name: getattr(vllm, name)
        for name in ("_LAYOUTS", "_BY_EDGES", "_SEEN_ONCE", "_TEMPLATES", "_LABEL_CACHE")
    }
    for name, value in saved.items():
        setattr(vllm, name, type(value)())
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(vllm, name, value)


def _reading(text: str) -> EngineSample | str:
    """What parsing `text` gives: the sample, or the error's words."""
    try:
        return parse(text)
    except ParseError as error:
        return str(error)


def _line_by_line(text: str) -> EngineSample | str:
    """What a new process's first reading of `text` gives (the checked path)."""
    with _nothing_learnt():
        return _reading(text)


@pytest.mark.parametrize("path", PAGES, ids=[p.stem for p in PAGES])
def test_a_page_read_through_its_template_is_what_prometheus_client_reads(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = path.read_text(encoding="utf-8")
    with _nothing_learnt():
        _templated(text)
        assert any(t.layout is vllm._LAYOUTS.get(k) for t in vllm._TEMPLATES for k in vllm._LAYOUTS)

        def not_scanned(*args: object) -> None:
            raise AssertionError("scanned")

        monkeypatch.setattr(vllm, "_through_known_layout", not_scanned)
        monkeypatch.setattr(vllm, "_accumulate", not_scanned)
        assert parse(text) == reference(text)


_MUTATIONS = (
    "duplicate",  # the line twice
    "drop",  # the line gone
    "timestamp",  # a timestamp after its value
    "blank",  # a blank before the line
    "newline",  # a newline inside the line, before its last word
    "relevant",  # another relevant line in its place, its value kept
    "trailing",  # a blank after its value
    "labels",  # its first two labels swapped
    "crlf",  # a carriage return at its end
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    path=st.sampled_from(PAGES),
    where=st.floats(0.0, 1.0, exclude_max=True),
    mutation=st.sampled_from(_MUTATIONS),
)
def test_a_page_that_differs_from_its_template_reads_as_line_by_line(
    path: Path, where: float, mutation: str
) -> None:
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    at = int(where * (len(lines) - 1))
    line = lines[at]
    relevant = next(x for x in lines if vllm._RELEVANT.match(x))
    changed = {
        "duplicate": [line, line],
        "drop": [],
        "timestamp": [line + " 1700000000000"],
        "blank": [" " + line],
        "newline": [line.rpartition(" ")[0] + "\n" + relevant],
        "relevant": [relevant.rpartition(" ")[0] + " " + line.rpartition(" ")[2]],
        "trailing": [line + " "],
        "labels": [_swap_labels(line)],
        "crlf": [line + "\r"],
    }[mutation]
    damaged = "\n".join([*lines[:at], *changed, *lines[at + 1 :]])
    with _nothing_learnt():
        _templated(text)
        assert vllm._TEMPLATES
        assert _reading(damaged) == _line_by_line(damaged)


def _swap_labels(line: str) -> str:
    """The line with its first two labels in the other order (itself if it has fewer)."""
    head, brace, rest = line.partition("{")
    labels, close, tail = rest.partition("}")
    pairs = labels.split(",")
    if not brace or len(pairs) < 2:
        return line
    return head + brace + ",".join([pairs[1], pairs[0], *pairs[2:]]) + close + tail


def test_later_pages_with_other_values_read_through_the_template() -> None:
    text = (FIXTURES / "spec_ngram_2_mid.txt").read_text(encoding="utf-8")
    later = (FIXTURES / "spec_ngram_3_after.txt").read_text(encoding="utf-8")
    with _nothing_learnt():
        _templated(text)
        (template,) = vllm._TEMPLATES
        assert template.raws(later) is not None  # same series, other values and lengths
        assert parse(later) == reference(later)


def test_templates_are_bounded_and_go_with_their_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (FIXTURES / "spec_ngram_2_mid.txt").read_text(encoding="utf-8")
    with _nothing_learnt():
        monkeypatch.setattr(vllm, "_MAX_TEMPLATES", 2)
        for i in range(4):
            _templated(text.replace("tiny-llama", f"model-{i}"))
        assert len(vllm._TEMPLATES) == 2
        assert {t.probe.count("model-3") + t.probe.count("model-2") for t in vllm._TEMPLATES} == {1}
        for template in list(vllm._TEMPLATES):
            vllm._drop_template(template.layout)
        assert not vllm._TEMPLATES


def test_a_template_whose_pages_stop_matching_is_dropped() -> None:
    text = (FIXTURES / "spec_ngram_2_mid.txt").read_text(encoding="utf-8")
    changed = text.replace("# HELP vllm:", "# HELP  vllm:", 1)  # same series, other text
    with _nothing_learnt():
        _templated(text)
        (template,) = vllm._TEMPLATES
        for value in itertools.islice(itertools.count(), vllm._TEMPLATE_MISSES):
            assert parse(changed) == reference(changed), value
        assert not vllm._TEMPLATES
        assert template.layout.template is None


@pytest.mark.parametrize("bad", ["1e19", "-1.0", "NaN", "1_168.0", "0x10"])
def test_a_bad_value_on_a_templated_page_names_its_line(bad: str) -> None:
    text = (FIXTURES / "spec_ngram_2_mid.txt").read_text(encoding="utf-8")
    line = 'vllm:generation_tokens_total{engine="0",model_name="tiny-llama"} 1168.0'
    damaged = text.replace(line, line.replace("1168.0", bad))
    with _nothing_learnt():
        _templated(text)
        assert vllm._TEMPLATES
        read = _reading(damaged)
        assert isinstance(read, str)
        assert f"line {text[: text.index(line)].count(chr(10)) + 1}:" in read
        assert read == _line_by_line(damaged)


@pytest.mark.parametrize("indent", [" ", "\t ", "\t"])
def test_a_page_with_an_indented_line_gets_no_template(indent: str) -> None:
    """The line-by-line reading strips a line's indent and may find a series after it; a
    template would skip all but the indented line's first word. So a page with an indented
    line is never a template: a later page hiding a series there (here a second running
    gauge, a duplicate) is refused as line by line refuses it, not read with the series
    missed."""
    text = PAGES[0].read_text(encoding="utf-8")
    model = next(iter(parse(text).models))
    with _nothing_learnt():
        _templated(text + indent + "1\n")
        assert not vllm._TEMPLATES
        series = f'vllm:num_requests_running{{engine="0",model_name="{model}"}} 1000'
        later = text + indent + series + "\n"
        assert _reading(later) == _line_by_line(later)
        assert isinstance(_reading(later), str)  # the duplicate series, named
