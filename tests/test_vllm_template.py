"""The vLLM parser's page templates (vllm._Template, issue 31): from a layout's third page
read through it, a page is matched whole against a template of its learnt page; what it
gives must be what the line-by-line reading gives, on every recorded page and on any page
that differs from the template (a line added, removed or changed anywhere)."""

from __future__ import annotations

import contextlib
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
            vllm._drop_templates(template.layout)
        assert not vllm._TEMPLATES


#: A line of a page vLLM's HTTP instrumentation adds once a server is asked on another
#: handler, or answers a bad request: the same series spectax reads, other text.
_HANDLED = 'http_requests_total{handler="/v1/models",method="GET",status="2xx"} 1.0\n'


def _variant(text: str, k: int) -> str:
    """`text` as a server asked on `k` more handlers would write it: the same layout."""
    more = "".join(
        f'http_requests_total{{handler="/v{j}",method="GET",status="4xx"}} 1.0\n' for j in range(k)
    )
    return text.replace(_HANDLED, _HANDLED + more)


def _not_scanned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make reading a page any way but through a template fail the test."""

    def scanned(*args: object) -> None:
        raise AssertionError("scanned")

    monkeypatch.setattr(vllm, "_through_known_layout", scanned)
    monkeypatch.setattr(vllm, "_accumulate", scanned)


def test_servers_whose_pages_differ_in_other_lines_each_get_a_template(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Servers of one layout whose pages differ only in lines spectax does not read (the
    handlers each was asked on) take turns: each variant gets a template of its own, and
    both are then read through one, with what prometheus_client reads."""
    text = (FIXTURES / "spec_ngram_2_mid.txt").read_text(encoding="utf-8")
    pages = [_variant(text, 0), _variant(text, 1)]
    assert _HANDLED in text and len({vllm.parse(p) == reference(p) for p in pages}) == 1
    with _nothing_learnt():
        for n in range(2 * (2 + vllm._TEMPLATE_AFTER + (vllm._TEMPLATE_AFTER << 2))):
            parse(pages[n % 2])
        assert len(vllm._TEMPLATES) == 2
        assert len({t.layout for t in vllm._TEMPLATES}) == 1  # one layout, two variants
        _not_scanned(monkeypatch)
        for page in [*pages, *pages]:
            assert parse(page) == reference(page)


def _counting_tries(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The templates a page is then tried against, in order (cleared by the caller)."""
    tried: list[object] = []
    raws = vllm._Template.raws
    monkeypatch.setattr(vllm._Template, "raws", lambda t, x: tried.append(t) or raws(t, x))
    return tried


def test_a_servers_page_is_tried_against_the_template_its_last_page_matched_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three servers, each of its own variant of one layout and each with its template: a
    server's page is tried against its own variant's alone (`reader`), whatever other
    servers' pages were matched last (a template tried and failed costs nearly a whole
    match)."""
    text = (FIXTURES / "spec_ngram_2_mid.txt").read_text(encoding="utf-8")
    pages = [_variant(text, k) for k in range(3)]
    servers = [vllm.reader() for _ in pages]
    with _nothing_learnt():
        for n in range(3 * (vllm._TEMPLATE_AFTER << 6)):  # a variant per template made
            servers[n % 3](pages[n % 3])
        assert all(any(t.raws(page) for t in vllm._TEMPLATES) for page in pages)
        tried = _counting_tries(monkeypatch)
        for n in range(9):
            tried.clear()
            assert servers[n % 3](pages[n % 3]) == reference(pages[n % 3])
            assert len(tried) == 1
            assert tried[0].raws(pages[n % 3])  # type: ignore[attr-defined]


def test_a_server_whose_page_no_template_matches_looks_again_only_now_and_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server whose variant has no template yet tries every template once, then none for
    its next `_SEARCH_EVERY` pages; the page is read all the same."""
    text = (FIXTURES / "spec_ngram_2_mid.txt").read_text(encoding="utf-8")
    other = _variant(text, 1)
    with _nothing_learnt():
        _templated(text)
        assert len(vllm._TEMPLATES) == 1
        server = vllm.reader()
        tried = _counting_tries(monkeypatch)
        counts = []
        for _ in range(2 + vllm._SEARCH_EVERY):
            tried.clear()
            assert server(other) == reference(other)
            counts.append(len(tried))
        assert counts == [1, *[0] * vllm._SEARCH_EVERY, 1]


def test_a_template_dropped_is_not_kept_alive_by_a_server_that_matched_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = (FIXTURES / "spec_ngram_2_mid.txt").read_text(encoding="utf-8")
    with _nothing_learnt():
        monkeypatch.setattr(vllm, "_MAX_TEMPLATES", 1)
        _templated(text)
        own = vllm.reader()
        own(text)
        remembered = own.keywords["last"]  # type: ignore[attr-defined]
        assert remembered.template() is vllm._TEMPLATES[0]
        _templated(text.replace("tiny-llama", "model-1"))  # takes the only place
        assert remembered.template() is None
        assert own(text) == reference(text)


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
