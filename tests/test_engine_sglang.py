"""The SGLang parser (spectax.engines.sglang) on pages written from SGLang 0.5.23's
collector source (tests/fixtures/sglang-0.5.23/INDEX.txt): exact values, agreement with
prometheus_client's parser, a fuzz, and `spectax assess` on its pages."""

from __future__ import annotations

import pytest

from engine_pages import assess, fuzz_test, pages
from reference_parsers import sglang_reference as reference
from spectax.engines import ENGINES, ParseError, detect
from spectax.engines.sglang import parse

PAGES = pages("sglang-0.5.23")


@pytest.mark.parametrize("name", sorted(PAGES))
def test_each_page_parses_as_prometheus_client_reads_it(name: str) -> None:
    assert parse(PAGES[name]) == reference(PAGES[name])


EXPECTED = {  # (generated, finished, drafts, accepted, running)
    "spec_0_start.txt": (0, 0, 0, 0, 0),
    "spec_1_after.txt": (1920, 40, 760, 1120, 2),
    "spec_restart_0_start.txt": (0, 0, 0, 0, 0),
    "spec_restart_1_after.txt": (240, 5, 95, 140, 0),
    "nospec_1_after.txt": (1920, 40, None, None, 0),
    "spec_dp2_tp4_after.txt": (1920, 40, 760, 1120, 5),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_exact_values_of_each_page(name: str) -> None:
    (sample,) = parse(PAGES[name]).models.values()
    assert (
        sample.generation_tokens,
        sample.requests_finished,
        sample.drafts,
        sample.accepted_tokens,
        sample.requests_running,
    ) == EXPECTED[name]
    assert sample.draft_tokens is None, "SGLang counts no drafted tokens: None, never 0"
    assert sample.accepted_per_position == ()


def test_tensor_parallel_ranks_count_once_and_data_parallel_ranks_add() -> None:
    """tp 4 x dp 2, every scheduler reporting: dp 0's two tp ranks say 3 running (the same
    requests), dp 1's say 2: 5 in all, not 10."""
    page = PAGES["spec_dp2_tp4_after.txt"]
    assert page.count("sglang:num_running_reqs{") == 4
    assert parse(page).models["tiny-llama"].requests_running == 5


def test_a_per_priority_breakdown_is_not_added_to_its_total() -> None:
    page = PAGES["spec_1_after.txt"].replace(
        'sglang:num_running_reqs{engine_type="unified"',
        'sglang:num_running_reqs{engine_type="unified",priority="1"',
    )
    assert parse(page).models["tiny-llama"].requests_running == 0


def test_a_bad_line_is_named() -> None:
    lines = PAGES["spec_1_after.txt"].splitlines()
    index = next(
        i for i, line in enumerate(lines) if line.startswith("sglang:spec_verify_calls_total{")
    )
    lines[index] = lines[index].rsplit(" ", 1)[0] + " -3"
    with pytest.raises(ParseError) as caught:
        parse("\n".join(lines))
    assert caught.value.line_number == index + 1
    assert "spec_verify_calls_total" in str(caught.value)


def test_a_page_without_sglang_families_has_no_models() -> None:
    assert parse("# HELP python_info x\npython_info 1\n").models == {}


test_fuzz_of_the_traffic_page = fuzz_test(parse, PAGES["spec_dp2_tp4_after.txt"])


def test_assess_tells_sglang_from_the_page_and_derives_only_what_it_can() -> None:
    assert detect(PAGES["spec_1_after.txt"]) == "sglang"
    result = assess(PAGES["spec_0_start.txt"], PAGES["spec_1_after.txt"])
    a = result.assessment
    assert a.acceptance_length_tokens == pytest.approx((1920 - 40) / 760)
    assert a.acceptance_ratio is None and a.draft_tokens is None
    assert a.verdict == "uncertain"
    notes = [n.text for n in result.notes]
    assert any(t.startswith("not exposed by sglang: no drafted-token counter") for t in notes)
    assert any(t.startswith("not exposed by sglang: no per-position") for t in notes)
    assert "derived, not counted by sglang: Δ(generation_tokens - num_requests)" in " ".join(notes)


def test_assess_across_a_restart_counts_from_zero() -> None:
    a = assess(PAGES["spec_1_after.txt"], PAGES["spec_restart_1_after.txt"]).assessment
    assert a.restarted
    assert (a.output_tokens, a.drafts) == (240, 95)


def test_assess_without_speculation_says_so() -> None:
    a = assess(PAGES["spec_0_start.txt"], PAGES["nospec_1_after.txt"], engine="sglang").assessment
    assert a.verdict == "no_speculation"


def test_the_registry_holds_sglang() -> None:
    assert ENGINES["sglang"].parse is parse and ENGINES["sglang"].prefix == "sglang:"


def test_the_assess_command_detects_sglang_and_engine_forces_a_parser(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from engine_pages import FIXTURES
    from spectax.cli.main import main

    root = FIXTURES / "sglang-0.5.23"
    pair = [str(root / "spec_0_start.txt"), str(root / "spec_1_after.txt"), "--seconds", "60"]
    assert main(["assess", *pair]) == 0
    shown = capsys.readouterr().out
    assert "acceptance_length_tokens                           2.47368" in shown
    assert "not exposed by sglang: no drafted-token counter" in shown
    assert main(["assess", *pair, "--engine", "vllm"]) == 1  # read as vLLM: no families
    assert "no engine metrics" in capsys.readouterr().err


def test_a_control_gives_sglang_a_measured_verdict() -> None:
    """Without a drafted count there is no modelled speedup, but a control's time per output
    token against ours still measures one: 0.02 s a token plain, 0.0125 s here."""
    from spectax.cli.assess import AssessOptions, assess_pages

    plain = (
        PAGES["nospec_1_after.txt"]
        .replace("0.18750000000000003", "0.3")
        .replace("0.3125000000000001", "0.5")
    )
    options = AssessOptions(seconds=60.0, usd_per_hour=2.0)
    (result,) = assess_pages(
        PAGES["spec_0_start.txt"],
        PAGES["spec_1_after.txt"],
        options,
        control=(PAGES["spec_0_start.txt"], plain),
    )
    a = result.assessment
    assert a.speedup_measured_ratio == pytest.approx(0.02 / 0.0125)
    assert (a.verdict, a.verdict_basis) == ("pays", "measured")
    assert a.step_overhead_ratio is None  # h needs the drafted tokens


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("} 1200.0", "} -1.0", "must be a finite non-negative number"),
        ("} 1200.0", "} 1_200.0", "bad value '1_200.0'"),
        ('model_name="tiny-llama"} 1200.0', 'model_name=""} 1200.0', "has no model_name"),
        ("} 1200.0", "} 1200.0 17", None),  # a timestamp: read by the grammar, no error
    ],
)
def test_a_large_page_read_in_bulk_names_a_bad_line_as_line_by_line(
    old: str, new: str, message: str | None
) -> None:
    """A page of 16 KB or more is read in bulk (scan.rows); a line it refuses, or an error
    the parser raises on it, sends the page line by line (scan.samples): the error names
    the same line with the same words, and a line of another form is still read."""
    good = PAGES["spec_1_after.txt"]
    assert len(good) >= 16384
    line = next(x for x in good.splitlines() if x.startswith("sglang:generation_tokens_total{"))
    assert old in line
    bad = good.replace(line, line.replace(old, new))
    if message is None:
        assert parse(bad) == parse(good) == reference(bad)
        return
    with pytest.raises(ParseError, match=message) as caught:
        parse(bad)
    assert caught.value.line_number == good[: good.index(line)].count("\n") + 1
