"""The TGI parser (spectax.engines.tgi) on pages written from TGI's router source
(tests/fixtures/tgi-3.3.6/INDEX.txt): exact values, agreement with prometheus_client's
parser, a fuzz, and `spectax assess` on its pages."""

from __future__ import annotations

import pytest

from engine_pages import assess, fuzz_test, pages
from reference_parsers import tgi_reference as reference
from spectax.engines import ParseError, detect
from spectax.engines.tgi import MODEL, parse

PAGES = pages("tgi-3.3.6")


@pytest.mark.parametrize("name", sorted(PAGES))
def test_each_page_parses_as_prometheus_client_reads_it(name: str) -> None:
    assert parse(PAGES[name]) == reference(PAGES[name])


EXPECTED = {  # (generated, prompt, finished, drafts, accepted, running)
    "spec_0_start.txt": (0, 0, 0, None, None, 0),
    "spec_1_after.txt": (1920, 800, 40, 760, 1120, 2),
    "spec_restart_0_start.txt": (0, 0, 0, None, None, 0),
    "spec_restart_1_after.txt": (240, 100, 5, 95, 140, 0),
    "nospec_1_after.txt": (1920, 800, 40, None, None, 0),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_exact_values_of_each_page(name: str) -> None:
    s = parse(PAGES[name]).models[MODEL]
    got = (
        s.generation_tokens,
        s.prompt_tokens,
        s.requests_finished,
        s.drafts,
        s.accepted_tokens,
        s.requests_running,
    )
    assert got == EXPECTED[name]
    assert s.draft_tokens is None, "TGI counts no drafted tokens: None, never 0"


def test_a_labelled_series_is_not_taken_for_tgi_s_own() -> None:
    page = PAGES["spec_1_after.txt"].replace("tgi_queue_size 0", 'tgi_queue_size{x="1"} 0')
    with pytest.raises(ParseError, match="labels"):
        parse(page)


def test_a_negative_count_is_refused_by_line() -> None:
    lines = PAGES["spec_1_after.txt"].splitlines()
    index = lines.index("tgi_request_skipped_tokens_sum 1120")
    lines[index] = "tgi_request_skipped_tokens_sum -1"
    with pytest.raises(ParseError) as caught:
        parse("\n".join(lines))
    assert caught.value.line_number == index + 1


test_fuzz_of_the_traffic_page = fuzz_test(parse, PAGES["spec_1_after.txt"])


def test_assess_tells_tgi_from_the_page_and_derives_the_acceptance_length() -> None:
    assert detect(PAGES["spec_1_after.txt"]) == "tgi"
    result = assess(PAGES["spec_0_start.txt"], PAGES["spec_1_after.txt"])
    a = result.assessment
    assert a.acceptance_length_tokens == pytest.approx(1 + 1120 / 760)
    assert a.acceptance_ratio is None and a.speedup_ratio is None
    assert any(n.text.startswith("not exposed by tgi:") for n in result.notes)


def test_assess_across_a_restart_without_a_process_start_time() -> None:
    a = assess(PAGES["spec_1_after.txt"], PAGES["spec_restart_1_after.txt"]).assessment
    assert a.restarted and a.output_tokens == 240


def test_a_body_that_is_not_utf8_is_refused_by_line() -> None:
    with pytest.raises(ParseError) as caught:
        parse(b"tgi_queue_size 0\ntgi_batch_current_size \xff\n")
    assert caught.value.line_number == 2
