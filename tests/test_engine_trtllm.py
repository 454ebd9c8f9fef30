"""The TensorRT-LLM parser (spectax.engines.trtllm) on pages written from its collector
source (tests/fixtures/trtllm-050f80d/INDEX.txt): exact values, agreement with
prometheus_client's parser, a fuzz, `spectax assess`, and the measured draft overhead."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engine_pages import assess, fuzz_test, pages
from reference_parsers import trtllm_reference as reference
from spectax import economics
from spectax.cli.assess import AssessOptions, assess_pages
from spectax.engines import ENGINES, EngineSample, ParseError, detect, scan, trtllm
from spectax.engines.trtllm import parse
from spectax.pipeline.intervals import interval_between
from spectax.pipeline.windows import sum_intervals

PAGES = pages("trtllm-050f80d")


@pytest.mark.parametrize("name", sorted(PAGES))
def test_each_page_parses_as_prometheus_client_reads_it(name: str) -> None:
    assert parse(PAGES[name]) == reference(PAGES[name])


EXPECTED = {  # (generated, drafts, draft tokens, accepted, per position, overhead)
    "spec_0_start.txt": (0, 0, 0, 0, (), None),
    "spec_1_after.txt": (1920, 760, 2280, 1120, (520, 380, 220), 0.18),
    "spec_restart_0_start.txt": (0, 0, 0, 0, (), None),
    "spec_restart_1_after.txt": (240, 95, 285, 140, (65, 47.5, 27.5), 0.18),
    "spec_no_per_position_after.txt": (1920, None, 2280, 1120, (), 0.18),
    "nospec_1_after.txt": (1920, None, None, None, (), None),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_exact_values_of_each_page(name: str) -> None:
    (s,) = parse(PAGES[name]).models.values()
    got = (
        s.generation_tokens,
        s.drafts,
        s.draft_tokens,
        s.accepted_tokens,
        s.accepted_per_position,
        s.draft_overhead,
    )
    assert got == EXPECTED[name]


def test_a_restart_shows_in_the_process_start_time() -> None:
    before = parse(PAGES["spec_1_after.txt"]).process_start_time_seconds
    after = parse(PAGES["spec_restart_0_start.txt"]).process_start_time_seconds
    assert before is not None and after is not None and after > before


@pytest.mark.parametrize("value", ["1.5", "-0.1", "NaN"])
def test_a_draft_overhead_outside_a_share_is_refused_by_line(value: str) -> None:
    lines = PAGES["spec_1_after.txt"].splitlines()
    index = next(
        i for i, x in enumerate(lines) if x.startswith("trtllm_spec_decode_draft_overhead{")
    )
    lines[index] = lines[index].rsplit(" ", 1)[0] + " " + value
    with pytest.raises(ParseError) as caught:
        parse("\n".join(lines))
    assert caught.value.line_number == index + 1


def test_the_measured_draft_overhead_sets_c() -> None:
    """d = 0.18 with 3 draft tokens a draft: c = 0.18 / (0.82 * 3)."""
    before, after = parse(PAGES["spec_0_start.txt"]), parse(PAGES["spec_1_after.txt"])
    window = sum_intervals([interval_between(before, after, 0.0, 60.0)])
    c = economics.draft_cost_from_overhead(0.18, window)
    assert c == pytest.approx(0.18 / (0.82 * 3))
    assert economics.draft_cost_from_overhead(None, window) is None
    idle = sum_intervals([interval_between(before, before, 0.0, 60.0)])
    assert economics.draft_cost_from_overhead(0.18, idle) is None


test_fuzz_of_the_traffic_page = fuzz_test(parse, PAGES["spec_1_after.txt"])


def test_assess_tells_trtllm_from_the_page_and_takes_c_from_its_overhead() -> None:
    assert detect(PAGES["spec_1_after.txt"]) == "trtllm"
    result = assess(PAGES["spec_0_start.txt"], PAGES["spec_1_after.txt"])
    a = result.assessment
    assert a.acceptance_ratio == pytest.approx(1120 / 2280)
    assert a.acceptance_length_tokens == pytest.approx(1 + 1120 / 760)
    assert a.position_acceptance_ratio == pytest.approx((520 / 760, 380 / 760, 220 / 760))
    c = 0.18 / (0.82 * 3)  # the page's draft overhead, in place of --method eagle's c
    assert economics.draft_cost_ratio_for("eagle") != pytest.approx(c)
    options = AssessOptions(seconds=60.0, usd_per_hour=2.0, draft_cost_ratio=c)
    (given,) = assess_pages(PAGES["spec_0_start.txt"], PAGES["spec_1_after.txt"], options)
    assert a.draft_compute_share_ratio == pytest.approx(given.assessment.draft_compute_share_ratio)
    assert not any("not exposed" in n.text for n in result.notes)
    assert any(n.text.startswith("derived, not counted by trtllm: no drafts") for n in result.notes)


def test_assess_without_per_position_counters_has_no_acceptance_length() -> None:
    result = assess(PAGES["spec_0_start.txt"], PAGES["spec_no_per_position_after.txt"])
    assert result.assessment.acceptance_length_tokens is None
    assert result.assessment.acceptance_ratio == pytest.approx(1120 / 2280)


def test_the_registry_serves_trtllm_at_its_own_path() -> None:
    assert ENGINES["trtllm"].metrics_path == "/prometheus/metrics"


def test_a_url_naming_only_the_server_is_scraped_at_trtllm_s_path() -> None:
    from spectax.scrape import metrics_url

    assert str(metrics_url("http://127.0.0.1:8000", "trtllm")).endswith("/prometheus/metrics")
    assert str(metrics_url("http://127.0.0.1:8000/custom", "trtllm")).endswith("/custom")
    assert str(metrics_url("http://127.0.0.1:8000", "sglang")).endswith(":8000/metrics")


def _line_by_line(text: str) -> EngineSample | str:
    """What the parser gave before its bulk reading: every line through scan.samples."""
    try:
        return trtllm._read(scan.samples(text, trtllm._SCAN, trtllm._BOUNDED))
    except ParseError as exc:
        return str(exc)


def _bulk(text: str) -> EngineSample | str:
    try:
        return parse(text)
    except ParseError as exc:
        return str(exc)


def _relevant(page: str) -> list[str]:
    return [x for x in page.splitlines() if x.startswith(("trtllm_", "process_start_time"))]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    index=st.integers(min_value=0),
    cut=st.integers(min_value=0, max_value=200),
    junk=st.text(st.sampled_from(' \t\r\x0b\x0c{}",=_-.e1a'), max_size=4),
    large=st.booleans(),
)
@example(index=0, cut=len("process_start_time_seconds"), junk="\x0b", large=False)
@example(index=0, cut=len("process_start_time_seconds"), junk="\x0b", large=True)
def test_the_bulk_reading_gives_what_line_by_line_gives(
    index: int, cut: int, junk: str, large: bool
) -> None:
    """scan.read reads a page in bulk (a small one row by row from one findall, a large one
    in C-level passes) and falls back to scan.samples: on a page with any one of its lines
    damaged, the same sample or the same error, word for word."""
    page = PAGES["spec_1_after.txt"] if large else PAGES["spec_0_start.txt"]
    assert (len(page) >= 16384) == large
    lines = _relevant(page)
    assert lines[0].startswith("process_start_time_seconds ")  # a line without labels
    line = lines[index % len(lines)]
    cut %= len(line) + 1
    text = page.replace(line, line[:cut] + junk + line[cut + len(junk) :])
    assert _bulk(text) == _line_by_line(text)
