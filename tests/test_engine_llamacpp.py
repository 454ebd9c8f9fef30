"""Tests of the llama.cpp `/metrics` parser (spectax.engines.llamacpp) on recorded pages.

The pages in tests/fixtures/llamacpp-11434.0.0/ were recorded from real llama-server
processes by the live tier (see that directory's INDEX.txt). Each is also read with
prometheus_client's own parser, and both readings must agree exactly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from reference_parsers import llamacpp_reference as reference
from spectax.cli.assess import AssessOptions, assess_pages, to_json
from spectax.engines import ENGINES, QUANTITIES, ParseError, llamacpp
from spectax.engines.llamacpp import MAX_VALUE, MODEL_NAME, _read_checked, _read_plain, parse
from spectax.pipeline.intervals import interval_between

FIXTURES = Path(__file__).parent / "fixtures" / "llamacpp-11434.0.0"
PAGES = sorted(p for p in FIXTURES.glob("*.txt") if p.name != "INDEX.txt")


def page(name: str) -> str:
    return (FIXTURES / f"{name}.txt").read_text(encoding="utf-8")


def test_the_fixture_set_is_there_with_its_index() -> None:
    index = (FIXTURES / "INDEX.txt").read_text(encoding="utf-8")
    assert len(PAGES) >= 8
    for p in PAGES:
        assert p.name in index, f"{p.name} is not described in INDEX.txt"


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.stem)
def test_parse_equals_prometheus_client(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert parse(text) == reference(text)
    assert parse(text.encode()) == parse(text)
    # Real pages take the quick path, and it agrees with the line-by-line one.
    quick = _read_plain("\n" + text)
    assert quick is not None and quick == _read_checked("\n" + text)


def test_the_registry_holds_the_parser_and_every_quantity() -> None:
    engine = ENGINES["llamacpp"]
    assert engine.parse is llamacpp.parse and engine.prefix == "llamacpp:"
    assert set(engine.capabilities) == set(QUANTITIES)
    assert engine.capabilities["step_time"].support == "absent"
    assert "6 significant digits" in engine.capabilities["output_tokens"].why


# ---------------------------------------------------------------------------
# Exact values, read off the recorded pages by eye.

EXACT = {
    # page: (tokens_predicted, prompt_tokens, drafts, draft_tokens, accepted, per position)
    "control_0_start": (0.0, 0.0, None, None, None, ()),
    "control_1_after_first_request": (48.0, 48.0, None, None, None, ()),
    "control_2_after_traffic": (1296.0, 815.0, None, None, None, ()),
    "draft_0_start": (0.0, 0.0, None, None, None, ()),
    "draft_1_after_first_request": (48.0, 48.0, 14.0, 53.0, 33.0, (13.0, 9.0, 6.0, 5.0)),
    "draft_inflight": (384.0, 331.0, 168.0, 659.0, 209.0, (76.0, 58.0, 43.0, 32.0)),
    "draft_2_after_traffic": (1296.0, 776.0, 603.0, 2369.0, 669.0, (237.0, 178.0, 141.0, 113.0)),
    "draft_3_restarted_before_traffic": (0.0, 0.0, None, None, None, ()),
    "draft_4_restarted_after_traffic": (192.0, 426.0, 51.0, 192.0, 134.0, (43.0, 36.0, 30.0, 25.0)),
}


@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact_values_of_each_recorded_page(name: str) -> None:
    gen, prompt, drafts, draft_tokens, accepted, positions = EXACT[name]
    s = parse(page(name)).models[MODEL_NAME]
    assert (s.generation_tokens, s.prompt_tokens) == (gen, prompt)
    assert (s.drafts, s.draft_tokens, s.accepted_tokens) == (drafts, draft_tokens, accepted)
    assert s.accepted_per_position == positions
    assert s.requests_finished == 0.0 and s.time_per_output_token is None


# ---------------------------------------------------------------------------
# The decisions the module docstring states, on the recorded pages.


def test_one_model_under_the_fixed_name_and_no_process_start() -> None:
    sample = parse(page("draft_2_after_traffic"))
    assert list(sample.models) == [MODEL_NAME] == ["default"]
    assert sample.process_start_time_seconds is None
    assert sample.engine == "llamacpp"


def test_without_a_draft_model_speculation_reads_as_absent_not_zero() -> None:
    """The control's page has the three spec counters at 0: spectax reads None, forever."""
    text = page("control_2_after_traffic")
    assert "llamacpp:spec_decode_num_drafts_total 0\n" in text
    control = parse(text).models[MODEL_NAME]
    assert control.generation_tokens > 0
    assert (control.drafts, control.draft_tokens, control.accepted_tokens) == (None, None, None)
    assert not control.speculating


def test_a_speculating_server_before_its_first_request_reads_as_not_yet_speculating() -> None:
    """At start the draft server's page equals the control's in form; the first finished
    request brings the counters (and the per-position family), and its interval counts
    them from zero: nothing is lost."""
    start, first = parse(page("draft_0_start")), parse(page("draft_1_after_first_request"))
    assert not start.models[MODEL_NAME].speculating
    now = first.models[MODEL_NAME]
    assert now.speculating and now.draft_tokens and now.accepted_per_position
    interval = interval_between(start, first, 0.0, 1.0)
    counts = interval.models[MODEL_NAME]
    assert not interval.restarted
    assert (counts.drafts, counts.draft_tokens, counts.accepted_tokens) == (
        now.drafts,
        now.draft_tokens,
        now.accepted_tokens,
    )
    assert counts.accepted_per_position == now.accepted_per_position


def test_a_restart_is_seen_by_the_counter_reset() -> None:
    old, fresh = (
        parse(page("draft_2_after_traffic")),
        parse(page("draft_3_restarted_before_traffic")),
    )
    later = parse(page("draft_4_restarted_after_traffic"))
    assert not fresh.models[MODEL_NAME].speculating  # the per-position family is gone too
    assert interval_between(old, fresh, 0.0, 1.0).restarted
    assert not interval_between(fresh, later, 0.0, 1.0).restarted
    across = interval_between(old, later, 0.0, 1.0)  # the zero page never scraped
    assert across.restarted
    assert across.models[MODEL_NAME].generation_tokens == later.models[MODEL_NAME].generation_tokens


def test_large_counters_are_read_as_llama_cpp_prints_them_six_significant_digits() -> None:
    """C++'s default stream precision: 1234567 is printed `1.23457e+06` (a variant of a
    recorded page with that one value changed: no server here reaches 10^6 tokens)."""
    text = re.sub(
        r"(?m)^llamacpp:tokens_predicted_total .*$",
        "llamacpp:tokens_predicted_total 1.23457e+06",
        page("draft_2_after_traffic"),
    )
    assert parse(text).models[MODEL_NAME].generation_tokens == 1_234_570.0
    assert parse(text) == reference(text)


# ---------------------------------------------------------------------------
# Strict on the lines it reads, silent on the others.

BAD_LINES = [
    ("llamacpp:tokens_predicted_total abc", "bad value 'abc'"),
    ("llamacpp:tokens_predicted_total 1_000", "bad value '1_000'"),
    ("llamacpp:tokens_predicted_total -1", "finite non-negative"),
    ("llamacpp:tokens_predicted_total nan", "finite non-negative"),
    ("llamacpp:tokens_predicted_total +Inf", "finite non-negative"),
    ("llamacpp:tokens_predicted_total 1e300", "at most 2**53"),
    ("llamacpp:tokens_predicted_total", "cannot parse"),
    ('llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="x"} 1', "position"),
    ("llamacpp:spec_decode_num_accepted_tokens_per_pos_total 1", "position"),
    ('llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="999"} 1', "position"),
    ('llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1} 1', "cannot parse"),
    ("llamacpp:requests_processing 1 2 3", "cannot parse"),
]


@pytest.mark.parametrize(("line", "message"), BAD_LINES)
def test_a_bad_relevant_line_is_a_parse_error_naming_it(line: str, message: str) -> None:
    """The bad line takes the place of its family's line on a recorded page (per-position
    lines are added): the error names that line's number and text."""
    lines = page("draft_2_after_traffic").splitlines()
    name = line.split(" ", maxsplit=1)[0]
    names = [x.split(" ", maxsplit=1)[0] for x in lines]
    if name in names:
        number = names.index(name) + 1
        lines[number - 1] = line
    else:
        lines.append(line)
        number = len(lines)
    with pytest.raises(ParseError, match=re.escape(message)) as caught:
        parse("\n".join(lines) + "\n")
    assert caught.value.line_number == number
    assert caught.value.line == line


def test_a_duplicate_series_is_an_error() -> None:
    text = page("draft_2_after_traffic")
    line = next(x for x in text.splitlines() if x.startswith("llamacpp:prompt_tokens_total "))
    with pytest.raises(ParseError, match="duplicate series"):
        parse(text + line + "\n")


def test_lines_it_does_not_read_are_not_validated() -> None:
    text = page("draft_2_after_traffic") + "llamacpp:n_busy_slots_per_decode garbage\n"
    assert parse(text) == parse(page("draft_2_after_traffic"))


def test_a_page_without_llamacpp_families_has_no_models() -> None:
    assert parse("# nothing here\nother_metric 1\n").models == {}
    assert parse("").models == {}


def test_bytes_must_be_utf8() -> None:
    with pytest.raises(ParseError, match="UTF-8"):
        parse(page("draft_2_after_traffic").encode() + b"\xff\n")


def test_the_largest_accepted_value_is_2_53() -> None:
    text = page("draft_0_start")
    high = re.sub(r"(?m)^(llamacpp:prompt_tokens_total) .*$", rf"\1 {int(MAX_VALUE)}", text)
    assert parse(high).models[MODEL_NAME].prompt_tokens == MAX_VALUE


_ALL = [p.read_text(encoding="utf-8") for p in PAGES]


@given(
    which=st.integers(0, max(len(_ALL) - 1, 0)),
    at=st.floats(0, 1),
    cut=st.integers(0, 40),
    insert=st.text(alphabet=st.sampled_from('0123456789.e+-{}="_ \n\tabcxyz,\\'), max_size=12),
)
@example(which=0, at=0.5, cut=0, insert="{")
@example(which=0, at=0.99, cut=3, insert="\n")
def test_mangled_pages_raise_parse_error_or_parse(
    which: int, at: float, cut: int, insert: str
) -> None:
    """A page cut, spliced and salted anywhere: a result or a ParseError, nothing else."""
    text = _ALL[which]
    i = int(at * len(text))
    mangled = text[:i] + insert + text[i + cut :]
    # The quick path reads only what the line-by-line path reads the same way.
    quick = _read_plain("\n" + mangled)
    if quick is not None:
        assert quick == _read_checked("\n" + mangled)
    try:
        result = parse(mangled)
    except ParseError:
        assert quick is None
        return
    for sample in result.models.values():
        for value in (
            sample.generation_tokens,
            sample.prompt_tokens,
            *sample.accepted_per_position,
        ):
            assert 0.0 <= value <= MAX_VALUE


# ---------------------------------------------------------------------------
# `spectax assess` on two recorded pages of the draft server.


def test_assess_on_recorded_pages_gives_the_page_deltas() -> None:
    before, after = page("draft_1_after_first_request"), page("draft_2_after_traffic")
    options = AssessOptions(
        seconds=60.0, usd_per_hour=2.0, method="draft_model", draft_cost_ratio=0.3
    )
    (result,) = assess_pages(before, after, options, engine="llamacpp")
    data = json.loads(to_json([result]))[0]
    b, a = reference(before).models[MODEL_NAME], reference(after).models[MODEL_NAME]
    assert data["model"] == MODEL_NAME
    assert data["output_tokens"] == a.generation_tokens - b.generation_tokens
    assert data["draft_tokens"] == a.draft_tokens - b.draft_tokens  # type: ignore[operator]
    accepted = a.accepted_tokens - b.accepted_tokens  # type: ignore[operator]
    drafts = a.drafts - b.drafts  # type: ignore[operator]
    assert data["acceptance_ratio"] == pytest.approx(accepted / data["draft_tokens"], rel=1e-12)
    assert data["acceptance_length_tokens"] == pytest.approx(1 + accepted / drafts, rel=1e-12)
    assert data["speedup_measured_ratio"] is None  # llama.cpp has no per-request timing


def test_assess_on_the_control_pages_shows_no_speculation() -> None:
    before, after = page("control_1_after_first_request"), page("control_2_after_traffic")
    (result,) = assess_pages(before, after, AssessOptions(seconds=60.0), engine="llamacpp")
    data = json.loads(to_json([result]))[0]
    assert data["output_tokens"] > 0
    assert data["draft_tokens"] is None and data["acceptance_ratio"] is None
