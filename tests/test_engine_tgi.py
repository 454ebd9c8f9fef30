"""The TGI parser (spectax.engines.tgi) on pages written from TGI's router source
(tests/fixtures/tgi-3.3.6/INDEX.txt): exact values, agreement with prometheus_client's
parser, a fuzz, and `spectax assess` on its pages."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine_pages import assess, fuzz_test, pages
from spectax.engines import EngineSample, Histogram, ModelSample, ParseError, detect
from spectax.engines.tgi import MODEL, parse

PAGES = pages("tgi-3.3.6")


def reference(text: str) -> EngineSample:
    """What parse() must give, from prometheus_client's parser."""
    v: dict[str, float] = {}
    top = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "tgi_request_skipped_tokens_bucket" and s.labels["le"] != "+Inf":
                top = max(top, float(s.labels["le"]))
            elif s.name.startswith("tgi_") and not s.labels:
                v[s.name] = s.value
    if not v:
        return EngineSample(engine="tgi")
    finished = v.get("tgi_request_success_total", v.get("tgi_request_success", 0.0))
    spec = top >= 1 or v.get("tgi_request_skipped_tokens_sum", 0.0) > 0
    return EngineSample(
        engine="tgi",
        models={
            MODEL: ModelSample(
                generation_tokens=v.get("tgi_request_generated_tokens_sum", 0.0),
                prompt_tokens=v.get("tgi_request_input_length_sum", 0.0),
                requests_finished=finished,
                drafts=v["tgi_request_skipped_tokens_count"] - finished if spec else None,
                accepted_tokens=v["tgi_request_skipped_tokens_sum"] if spec else None,
                time_per_output_token=(
                    Histogram(
                        v["tgi_request_mean_time_per_token_duration_sum"],
                        v["tgi_request_mean_time_per_token_duration_count"],
                    )
                    if "tgi_request_mean_time_per_token_duration_sum" in v
                    else None
                ),
                requests_running=v["tgi_batch_current_size"],
                requests_waiting=v["tgi_queue_size"],
            )
        },
    )


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
