"""Tests of the vLLM `/metrics` parser (spectax.engines.vllm).

The main check is differential: every recorded fixture page is also parsed
with prometheus_client's own text parser, the expected `ModelSample` values are
computed from that independently (tests/reference_parsers.py, which bench/parse.py
times the parser against), and both must agree exactly.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, generate_latest

from reference_parsers import vllm_reference as reference
from spectax.engines import (
    ENGINES,
    EngineSample,
    Histogram,
    ModelSample,
    ParseError,
    get_parser,
    vllm,
)
from spectax.engines.scan import grammatical, split_tails
from spectax.engines.vllm import MAX_MODEL_NAME, MAX_MODELS, MAX_VALUE, parse

FIXTURES = Path(__file__).parent / "fixtures" / "vllm-0.32.0"
PAGES = sorted(
    p for p in FIXTURES.glob("*.txt") if p.name != "INDEX.txt" and "headers" not in p.name
)


def page(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------
# A vLLM V0 page. HAND-WRITTEN, not recorded: no V0 server was captured. It uses
# the V0 naming listed in /work/shared/ENGINES.md (model_name label only, no
# engine label, spec-decode gauges, old time_per_output_token / gpu_cache names).

V0_PAGE = """\
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="llama-3.1-8b"} 3.0
# HELP vllm:num_requests_swapped Number of requests swapped to CPU.
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{model_name="llama-3.1-8b"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="llama-3.1-8b"} 1.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="llama-3.1-8b"} 0.25
# HELP vllm:spec_decode_draft_acceptance_rate Speulative token acceptance rate.
# TYPE vllm:spec_decode_draft_acceptance_rate gauge
vllm:spec_decode_draft_acceptance_rate{model_name="llama-3.1-8b"} 0.625
# HELP vllm:spec_decode_efficiency Speculative decoding system efficiency.
# TYPE vllm:spec_decode_efficiency gauge
vllm:spec_decode_efficiency{model_name="llama-3.1-8b"} 0.5
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{model_name="llama-3.1-8b"} 500.0
vllm:spec_decode_num_accepted_tokens_created{model_name="llama-3.1-8b"} 1.7e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{model_name="llama-3.1-8b"} 800.0
vllm:spec_decode_num_draft_tokens_created{model_name="llama-3.1-8b"} 1.7e+09
# HELP vllm:spec_decode_num_emitted_tokens_total Number of emitted tokens.
# TYPE vllm:spec_decode_num_emitted_tokens_total counter
vllm:spec_decode_num_emitted_tokens_total{model_name="llama-3.1-8b"} 1000.0
vllm:spec_decode_num_emitted_tokens_created{model_name="llama-3.1-8b"} 1.7e+09
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="llama-3.1-8b"} 4096.0
vllm:prompt_tokens_created{model_name="llama-3.1-8b"} 1.7e+09
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="llama-3.1-8b"} 1200.0
vllm:generation_tokens_created{model_name="llama-3.1-8b"} 1.7e+09
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="stop",model_name="llama-3.1-8b"} 9.0
vllm:request_success_total{finished_reason="length",model_name="llama-3.1-8b"} 2.0
vllm:request_success_created{finished_reason="stop",model_name="llama-3.1-8b"} 1.7e+09
vllm:request_success_created{finished_reason="length",model_name="llama-3.1-8b"} 1.7e+09
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{le="1.0",model_name="llama-3.1-8b"} 0.0
vllm:iteration_tokens_total_bucket{le="+Inf",model_name="llama-3.1-8b"} 410.0
vllm:iteration_tokens_total_count{model_name="llama-3.1-8b"} 410.0
vllm:iteration_tokens_total_sum{model_name="llama-3.1-8b"} 5296.0
vllm:iteration_tokens_total_created{model_name="llama-3.1-8b"} 1.7e+09
# HELP vllm:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="0.01",model_name="llama-3.1-8b"} 12.0
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="llama-3.1-8b"} 400.0
vllm:time_per_output_token_seconds_count{model_name="llama-3.1-8b"} 400.0
vllm:time_per_output_token_seconds_sum{model_name="llama-3.1-8b"} 9.5
vllm:time_per_output_token_seconds_created{model_name="llama-3.1-8b"} 1.7e+09
# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.7e+09
"""
V0_MODEL = "llama-3.1-8b"


# ---------------------------------------------------------------------------
# Differential


def test_fixture_pages_exist() -> None:
    assert len(PAGES) >= 18


@pytest.mark.parametrize("path", PAGES, ids=[p.stem for p in PAGES])
def test_matches_prometheus_client(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert parse(text) == reference(text)


_SAMPLE_VALUE = re.compile(r"^([^#\n][^\n]* )[0-9.e+-]+$", re.MULTILINE)


def _read_twice(text: str) -> EngineSample:
    """Parse a page as a server's second scrape: its layout is then learnt (vllm._learn)."""
    parse(text)
    return parse(text)


def _with_values(text: str, values: Iterator[float]) -> str:
    """The page with the value of every sample line replaced: the same series, in order."""
    return _SAMPLE_VALUE.sub(lambda m: f"{m.group(1)}{next(values)!r}", text)


@settings(max_examples=25, deadline=None)
@given(
    path=st.sampled_from(PAGES),
    values=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=50),
)
def test_a_page_of_a_layout_already_read_gives_what_its_own_reading_gives(
    path: Path, values: list[float]
) -> None:
    """The second page of a server, values changed, is read through the layout the first
    one taught (vllm._Layout); it must be what prometheus_client reads in it."""
    first = path.read_text(encoding="utf-8")
    assert _read_twice(first) == reference(first)
    later = _with_values(first, itertools.cycle(values))
    assert parse(later) == reference(later)


@pytest.mark.parametrize("path", PAGES, ids=[p.stem for p in PAGES])
def test_the_second_page_of_a_layout_is_not_read_line_by_line(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What makes the parser fast: from a server's third page on, values changed, a page is
    summed through its layout; the line-by-line path is for new layouts and bad pages."""
    first = path.read_text(encoding="utf-8")
    _read_twice(first)
    later = _with_values(first, itertools.cycle([0.5, 0.25, 1.0]))

    def line_by_line(*args: object) -> None:
        raise AssertionError("read line by line")

    monkeypatch.setattr(vllm, "_accumulate", line_by_line)
    assert parse(later) == reference(later)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("1168.0", "1e19", r"at most 2\*\*53, got 1e19"),
        ("1168.0", "-1.0", r"at most 2\*\*53, got -1.0"),
        ("1168.0", "NaN", r"at most 2\*\*53, got NaN"),
        ("1168.0", "+Inf", r"at most 2\*\*53, got \+Inf"),
        ("1168.0", "1_168.0", r"bad value '1_168.0'"),
    ],
)
def test_a_bad_value_on_a_page_of_a_known_layout_names_its_line(
    old: str, new: str, message: str
) -> None:
    good = page("spec_ngram_2_mid.txt")
    line = 'vllm:generation_tokens_total{engine="0",model_name="tiny-llama"} 1168.0'
    number = good[: good.index(line)].count("\n") + 1
    _read_twice(good)  # its layout is learnt
    with pytest.raises(ParseError, match=message) as info:
        parse(good.replace(line, line.replace(old, new)))
    assert info.value.line_number == number


def test_out_of_bounds_sums_and_fractions_on_a_known_layout_name_their_line() -> None:
    good = page("spec_ngram_dp2_2_mid.txt")
    _read_twice(good)
    usage = 'vllm:kv_cache_usage_perc{engine="1",model_name="tiny-llama"} 0.0'
    with pytest.raises(ParseError, match=r"fraction from 0 to 1, got 1\.5") as info:
        parse(good.replace(usage, usage.replace("0.0", "1.5")))
    assert info.value.line_number == good[: good.index(usage)].count("\n") + 1
    half = f"{MAX_VALUE - 1:.1f}"
    lines = [
        f'vllm:e2e_request_latency_seconds_bucket{{engine="{rank}",le="+Inf",model_name="tiny-llama"}}'
        for rank in (0, 1)
    ]
    past = good
    for line in lines:
        past = re.sub(re.escape(line) + r" \S+", f"{line} {half}", past)
    with pytest.raises(ParseError, match=r"sums to more than 2\*\*53") as info:
        parse(past)
    assert info.value.line_number == good[: good.index(lines[1])].count("\n") + 1


def test_layouts_learnt_are_bounded() -> None:
    for i in range(vllm._MAX_LAYOUTS + 10):
        _read_twice(f'{_G}{{model_name="m{i}"}} 1\n')
    assert len(vllm._LAYOUTS) == vllm._MAX_LAYOUTS
    assert len(vllm._SEEN_ONCE) <= vllm._MAX_SEEN_ONCE


def test_a_fleet_of_more_layouts_than_kept_keeps_its_layouts_and_an_idle_one_goes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Scraped in turn, a fleet of more layouts than the table holds used each one within
    as many reads as there are layouts: evicting the oldest there made every page miss and
    pay a learning (600 layouts: 702-1,046 us a page, against 424 for never learning). The
    table keeps the layouts that serve; one no page has used for _IDLE_READS reads goes."""
    monkeypatch.setattr(vllm, "_LAYOUTS", {})
    monkeypatch.setattr(vllm, "_SEEN_ONCE", {})
    monkeypatch.setattr(vllm, "_MAX_LAYOUTS", 4)
    monkeypatch.setattr(vllm, "_IDLE_READS", 40)
    monkeypatch.setattr(vllm, "_MISSES_WHEN_FULL", itertools.count(1))
    fleet = [f'{_G}{{model_name="m{i}"}} 1\n' for i in range(6)]
    for _ in range(20):  # 6 servers' pages in turn, 20 rounds
        for page in fleet:
            parse(page)
    kept = set(vllm._LAYOUTS)
    assert len(kept) == 4
    for _ in range(20):
        for page in fleet:
            parse(page)
    assert set(vllm._LAYOUTS) == kept  # the same four, never one evicted for another
    serving = [page for page in fleet if vllm._LAYOUTS.get(_key(page)) is not None]
    waiting = [page for page in fleet if vllm._LAYOUTS.get(_key(page)) is None]
    for _ in range(60):  # the first kept server goes away; the others go on
        for page in [*serving[1:], *waiting]:
            parse(page)
    assert _key(serving[0]) not in vllm._LAYOUTS  # idle: given up for a waiting one
    assert any(_key(page) in vllm._LAYOUTS for page in waiting)


def _key(page: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The layout table's key of a one-line page: its names and label sets."""
    name, rest = page.split("{", 1)
    return (name,), ("{" + rest.rsplit("}", 1)[0] + "}",)


def test_v0_page_matches_prometheus_client() -> None:
    assert parse(V0_PAGE) == reference(V0_PAGE)


# ---------------------------------------------------------------------------
# Specific facts from the fixture INDEX


def test_ngram_after_traffic() -> None:
    s = parse(page("spec_ngram_3_after.txt"))
    assert s.engine == "vllm"
    assert s.has_engine_metrics
    assert list(s.models) == ["tiny-llama"]
    m = s.models["tiny-llama"]
    assert (m.drafts, m.draft_tokens, m.accepted_tokens) == (216.0, 740.0, 564.0)
    assert m.accepted_per_position == (204.0, 163.0, 107.0, 90.0)
    assert sum(m.accepted_per_position) == m.accepted_tokens
    assert m.speculating
    assert m.requests_finished == 41.0  # 8 stop + 33 length
    assert m.generation_tokens == 2186.0
    assert m.prompt_tokens == 1309.0
    assert m.iteration_tokens == Histogram(sum=3495.0, count=515.0)
    itl, tpot = m.inter_token_latency, m.time_per_output_token
    assert itl is not None and tpot is not None
    assert (itl.sum, itl.count) == (5.966667546000167, 1600.0)
    assert (tpot.sum, tpot.count) == (0.11146932532724205, 41.0)
    # The buckets are cumulative, ascending, and the +Inf one holds every observation.
    assert itl.buckets[0] == (0.01, 1592.0) and itl.buckets[-1] == (float("inf"), 1600.0)
    assert tpot.buckets[-1] == (float("inf"), 41.0)
    assert [le for le, _ in tpot.buckets] == sorted(le for le, _ in tpot.buckets)
    assert m.legacy_acceptance_rate is None and m.legacy_efficiency is None
    assert s.process_start_time_seconds == 1.79599593687e09


def test_draft_model_after_traffic() -> None:
    m = parse(page("spec_draft_3_after.txt")).models["tiny-llama"]
    assert (m.drafts, m.draft_tokens, m.accepted_tokens) == (871.0, 2613.0, 802.0)
    assert len(m.accepted_per_position) == 3  # k=3


def test_before_traffic_zero_not_none() -> None:
    m = parse(page("spec_ngram_0_before_traffic.txt")).models["tiny-llama"]
    assert (m.drafts, m.draft_tokens, m.accepted_tokens) == (0.0, 0.0, 0.0)
    assert m.accepted_per_position == (0.0, 0.0, 0.0, 0.0)
    assert m.speculating


@pytest.mark.parametrize("name", ["spec_ngram_dp2_2_mid.txt", "spec_ngram_dp2_3_after.txt"])
def test_data_parallel_sums_engines(name: str) -> None:
    s = parse(page(name))
    assert s.process_start_time_seconds is None
    m = s.models["tiny-llama"]
    if name.endswith("3_after.txt"):
        assert m.drafts == 20.0 + 141.0
        assert m.draft_tokens == 40.0 + 472.0
        assert m.accepted_tokens == 2.0 + 421.0
        assert m.accepted_per_position == (126.0, 125.0, 86.0, 86.0)
        assert m.generation_tokens == 624.0 + 880.0
        assert m.requests_finished == 24.0
        assert m.iteration_tokens == Histogram(sum=996.0 + 1288.0, count=542.0 + 403.0)
    assert m.drafts is not None and m.drafts > 0


@pytest.mark.parametrize("path", [p for p in PAGES if p.name.startswith("nospec")])
def test_nospec_has_no_speculation(path: Path) -> None:
    m = parse(path.read_text()).models["tiny-llama"]
    assert m.drafts is None and m.draft_tokens is None and m.accepted_tokens is None
    assert m.accepted_per_position == ()
    assert not m.speculating
    assert m.iteration_tokens is not None


@pytest.mark.parametrize("path", [p for p in PAGES if "disable_log_stats" in p.name])
def test_disable_log_stats_has_no_engine_metrics(path: Path) -> None:
    s = parse(path.read_text())
    assert s.models == {}
    assert not s.has_engine_metrics
    assert s.process_start_time_seconds is not None


def test_restart_changes_process_start() -> None:
    before = parse(page("spec_ngram_3_after.txt"))
    after = parse(page("spec_ngram_restart_0_before_traffic.txt"))
    assert before.process_start_time_seconds is not None
    assert after.process_start_time_seconds is not None
    assert after.process_start_time_seconds > before.process_start_time_seconds
    assert after.models["tiny-llama"].generation_tokens == 0.0


def test_inflight_running_waiting() -> None:
    m = parse(page("spec_ngram_inflight_running_waiting.txt")).models["tiny-llama"]
    assert (m.requests_running, m.requests_waiting) == (2.0, 4.0)
    idle = parse(page("spec_ngram_inflight_after.txt")).models["tiny-llama"]
    assert idle.drafts == 0.0 and idle.speculating


def test_v0_page() -> None:
    s = parse(V0_PAGE)
    m = s.models[V0_MODEL]
    assert m.legacy_acceptance_rate == 0.625
    assert m.legacy_efficiency == 0.5
    assert m.accepted_tokens == 500.0
    assert m.draft_tokens == 800.0
    assert m.drafts is None  # no drafts counter in V0
    assert m.accepted_per_position == ()
    assert m.speculating
    assert m.inter_token_latency == Histogram(sum=9.5, count=400.0)  # from the old name
    assert m.time_per_output_token is None
    assert m.iteration_tokens == Histogram(sum=5296.0, count=410.0)
    assert m.requests_finished == 11.0
    assert (m.requests_running, m.requests_waiting) == (3.0, 1.0)
    assert (m.generation_tokens, m.prompt_tokens) == (1200.0, 4096.0)
    assert s.process_start_time_seconds == 1.7e9


def test_v0_nan_acceptance_rate_passes_through() -> None:
    # V0 reported NaN for the ratio gauges before the first draft.
    text = V0_PAGE.replace(
        'acceptance_rate{model_name="llama-3.1-8b"} 0.625',
        'acceptance_rate{model_name="llama-3.1-8b"} NaN',
    )
    rate = parse(text).models[V0_MODEL].legacy_acceptance_rate
    assert rate is not None and math.isnan(rate)


def test_new_itl_name_wins_over_v0_name() -> None:
    text = (
        'vllm:time_per_output_token_seconds_sum{model_name="m"} 1\n'
        'vllm:time_per_output_token_seconds_count{model_name="m"} 2\n'
        'vllm:inter_token_latency_seconds_sum{model_name="m"} 3\n'
        'vllm:inter_token_latency_seconds_count{model_name="m"} 4\n'
    )
    assert parse(text).models["m"].inter_token_latency == Histogram(sum=3.0, count=4.0)


def test_buckets_are_summed_over_ranks_per_bound() -> None:
    """Two data-parallel ranks: each bucket is the sum of the ranks' (sum by (le))."""
    m = parse(page("spec_ngram_dp2_3_after.txt")).models["tiny-llama"]
    ttft = m.time_to_first_token
    assert ttft is not None and ttft.buckets[-1] == (float("inf"), ttft.count)
    assert ttft.count == 24.0  # 20 requests on one rank, 4 on the other
    assert m.e2e_request_latency is not None
    assert m.e2e_request_latency.buckets[-1][1] == m.e2e_request_latency.count


_BUCKET_PAGE = (
    'vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 1\n'
    'vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 2\n'
    'vllm:time_to_first_token_seconds_sum{model_name="m"} 0.5\n'
    'vllm:time_to_first_token_seconds_count{model_name="m"} 2\n'
)


def test_a_histogram_without_its_inf_bucket_is_refused() -> None:
    text = _BUCKET_PAGE.replace('le="+Inf"', 'le="1.0"')
    with pytest.raises(ParseError, match=r'no le="\+Inf" bucket'):
        parse(text)


@pytest.mark.parametrize("bound", ["fast", "NaN", "1_0"])
def test_a_bad_bucket_bound_names_its_line(bound: str) -> None:
    with pytest.raises(ParseError, match="line 1: bad bucket bound"):
        parse(_BUCKET_PAGE.replace('le="0.1"', f'le="{bound}"'))


def test_a_histogram_with_too_many_buckets_is_refused() -> None:
    many = "".join(
        f'vllm:time_to_first_token_seconds_bucket{{le="{1 + i / 1000}",model_name="m"}} 1\n'
        for i in range(1, 300)
    )
    with pytest.raises(ParseError, match="more than 256 buckets"):
        parse(many + _BUCKET_PAGE)


def test_a_bucket_without_le_names_its_line() -> None:
    with pytest.raises(ParseError, match=r"line 1: .* has no le label"):
        parse(_BUCKET_PAGE.replace('le="0.1",', ""))


# ---------------------------------------------------------------------------
# Format details


def test_empty_and_comment_only_pages() -> None:
    for text in ["", "\n", "# HELP vllm:generation_tokens_total x\n", "   \n\t\n"]:
        s = parse(text)
        assert s.models == {} and s.process_start_time_seconds is None


def test_values_timestamps_whitespace_and_label_order() -> None:
    text = (
        'vllm:generation_tokens_total{engine="1",model_name="m"} 1e3 1700000000000\n'
        '  vllm:generation_tokens_total{ model_name = "m" , engine="0", } 5\r\n'
        'vllm:prompt_tokens_total{model_name="m",engine="0"}\t+7.5\t-12\n'
        'vllm:num_requests_running{model_name="m"} 16\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="2",model_name="m"} 4\n'
        'vllm:spec_decode_efficiency{model_name="m"} -Inf\n'
        'vllm:spec_decode_draft_acceptance_rate{model_name="m"} +Inf\n'
        "process_start_time_seconds 12"
    )
    s = parse(text)
    m = s.models["m"]
    assert m.generation_tokens == 1005.0
    assert m.prompt_tokens == 7.5
    assert m.requests_running == 16.0
    assert m.accepted_per_position == (0.0, 0.0, 4.0)  # missing positions are 0
    assert m.legacy_efficiency == -math.inf
    assert m.legacy_acceptance_rate == math.inf
    assert s.process_start_time_seconds == 12.0


def test_irrelevant_lines_are_not_validated() -> None:
    text = (
        'python_gc_objects_collected_total{generation="0" garbage\n'
        "vllm:num_requests_waiting_by_reason{model_name=\n"
        'vllm:generation_tokens_totally{model_name="m"} x\n'
        'vllm:generation_tokens_created{model_name="m"} NaN\n'
        'vllm:generation_tokens_total{model_name="m"} 3\n'
    )
    assert parse(text).models["m"].generation_tokens == 3.0


def test_label_escapes() -> None:
    text = r'vllm:generation_tokens_total{model_name="a\"b\\c\nd}e,f=\"\t"} 1' + "\n"
    assert list(parse(text).models) == ['a"b\\c\nd}e,f="\\t']


def test_several_models_keep_page_order() -> None:
    text = "".join(
        f'vllm:generation_tokens_total{{model_name="m{i}"}} {i}\n' for i in range(MAX_MODELS)
    )
    models = parse(text).models
    assert list(models) == [f"m{i}" for i in range(MAX_MODELS)]
    assert models["m7"].generation_tokens == 7.0


def test_bytes_body() -> None:
    raw = (FIXTURES / "spec_ngram_3_after.txt").read_bytes()
    assert parse(raw) == parse(raw.decode())


# ---------------------------------------------------------------------------
# Malformed input

_OK = 'vllm:prompt_tokens_total{engine="0",model_name="m"} 1.0\n'
_HEAD = "# HELP vllm:x y\n# TYPE vllm:x counter\n" + _OK  # 3 lines; bad line is line 4
_G = "vllm:generation_tokens_total"

MALFORMED: list[tuple[str, str, str]] = [
    ("truncated in labels", f'{_G}{{engine="0",model_na', "cannot parse"),
    ("truncated before value", f'{_G}{{engine="0",model_name="m"}}', "cannot parse"),
    ("truncated value only", f'{_G}{{engine="0",model_name="m"}} ', "cannot parse"),
    ("name only", _G, "cannot parse"),
    ("bad float", f'{_G}{{model_name="m"}} 12.3.4', "bad value"),
    ("word value", f'{_G}{{model_name="m"}} lots', "bad value"),
    ("underscore value", f'{_G}{{model_name="m"}} 1_000', "bad value"),
    ("non-ASCII digits", f'{_G}{{model_name="m"}} \u0661\u0662', "bad value"),
    ("unterminated quote", f'{_G}{{model_name="m}} 1', "cannot parse"),
    ("unterminated label set", f'{_G}{{model_name="m" 1', "cannot parse"),
    ("label without quotes", f"{_G}{{model_name=m}} 1", "cannot parse"),
    ("missing comma", f'{_G}{{engine="0" model_name="m"}} 1', "cannot parse"),
    ("trailing junk", f'{_G}{{model_name="m"}} 1 2 3', "cannot parse"),
    ("garbage after labels", f'{_G}{{model_name="m"}}x 1', "cannot parse"),
    (
        "garbage bytes (errors=replace)",
        (f'{_G}{{model_name="m"}} '.encode() + b"\xff\xfe\x00\x81").decode("utf-8", "replace"),
        "bad value",
    ),
    (
        "garbage bytes in labels",
        (f"{_G}{{model_name=".encode() + b'"\xff\x00\n').decode("utf-8", "replace"),
        "cannot parse",
    ),
    ("NaN counter", f'{_G}{{model_name="m"}} NaN', "finite non-negative"),
    ("negative counter", f'{_G}{{model_name="m"}} -1', "finite non-negative"),
    ("infinite counter", f'{_G}{{model_name="m"}} +Inf', "finite non-negative"),
    ("negative histogram count", 'vllm:iteration_tokens_total_count{model_name="m"} -2', "finite"),
    ("NaN running gauge", 'vllm:num_requests_running{model_name="m"} NaN', "finite"),
    ("no labels", f"{_G} 1", "no model_name"),
    ("no model_name", f'{_G}{{engine="0"}} 1', "no model_name"),
    ("empty model_name", f'{_G}{{model_name=""}} 1', "no model_name"),
    ("duplicate label", f'{_G}{{model_name="m",model_name="n"}} 1', "duplicate label"),
    ("duplicate series", _OK.rstrip("\n"), "duplicate series"),
    (
        "per-pos without position",
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m"} 1',
        "position",
    ),
    (
        "per-pos bad position",
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="-1"} 1',
        "position",
    ),
    (
        "per-pos huge position",
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="99999999"} 1',
        "position",
    ),
    ("NaN process start", "process_start_time_seconds NaN", "bad value"),
]


@pytest.mark.parametrize(
    ("bad", "message"), [(b, m) for _, b, m in MALFORMED], ids=[i for i, _, _ in MALFORMED]
)
def test_malformed_line_raises_parse_error(bad: str, message: str) -> None:
    text = _HEAD + bad + "\n" + _OK.replace("prompt", "generation")
    with pytest.raises(ParseError) as info:
        parse(text)
    assert info.value.line_number == 4
    assert str(info.value).startswith("line 4: ")
    assert message in str(info.value)
    assert info.value.line == bad.split("\n", maxsplit=1)[0]


def test_malformed_first_and_last_line() -> None:
    with pytest.raises(ParseError, match=r"^line 1: "):
        parse(f'{_G}{{model_name="m"}} x\n' + _OK)
    with pytest.raises(ParseError, match=r"^line 2: "):
        parse(_OK + f'{_G}{{model_name="m"}}')


def test_too_many_models() -> None:
    text = "".join(
        f'vllm:generation_tokens_total{{model_name="m{i}"}} 1\n' for i in range(MAX_MODELS + 1)
    )
    with pytest.raises(ParseError, match="too many models") as info:
        parse(text)
    assert info.value.line_number == MAX_MODELS + 1


def test_a_counter_the_store_cannot_hold_exactly_is_a_parse_error_naming_its_line() -> None:
    """A recorded page with one counter at 1e19 (over the store's BIGINT, 2**63): refused
    whole, so the value never reaches a window row and the endpoint is down with "parse"."""
    good = page("spec_ngram_2_mid.txt")
    line = 'vllm:generation_tokens_total{engine="0",model_name="tiny-llama"} 1168.0'
    assert line in good
    number = good[: good.index(line)].count("\n") + 1
    with pytest.raises(ParseError, match=r"at most 2\*\*53, got 1e19") as info:
        parse(good.replace(line, line.replace("1168.0", "1e19")))
    assert info.value.line_number == number
    assert parse(good.replace("1168.0", repr(MAX_VALUE))).models["tiny-llama"].generation_tokens


@pytest.mark.parametrize(
    "name",
    ["vllm:prompt_tokens_total", "vllm:iteration_tokens_total_sum", "vllm:num_requests_waiting"],
)
def test_every_cumulative_value_and_request_count_is_bounded(name: str) -> None:
    with pytest.raises(ParseError, match=r"^line 1: .*at most 2\*\*53"):
        parse(f'{name}{{model_name="m"}} {MAX_VALUE * 2}\n')


def test_series_that_sum_past_the_bound_over_ranks_are_a_parse_error() -> None:
    half = f"{MAX_VALUE - 1:.1f}"
    with pytest.raises(ParseError, match=r"^line 2: .*sums to more than 2\*\*53"):
        parse(f'{_G}{{engine="0",model_name="m"}} {half}\n{_G}{{engine="1",model_name="m"}} 1000\n')
    per_pos = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    with pytest.raises(ParseError, match=r"^line 2: .*sums to more than 2\*\*53"):
        parse(
            f'{per_pos}{{engine="0",model_name="m",position="0"}} {half}\n'
            f'{per_pos}{{engine="1",model_name="m",position="0"}} {half}\n'
        )


def test_the_flop_and_byte_estimates_are_read_where_vllm_makes_them() -> None:
    """vLLM exports them always but fills them only with --enable-mfu-metrics: 0 on every
    other recorded page, the engine's counts on the page recorded with it."""
    mfu = parse(page("spec_ngram_mfu_3_after.txt")).models["tiny-llama"]
    assert mfu.estimated_flops == 6.539429888e09
    assert mfu.estimated_read_bytes == 1.61592704e09
    assert mfu.iteration_tokens == Histogram(sum=5412.0, count=782.0)
    plain = parse(page("spec_ngram_3_after.txt")).models["tiny-llama"]
    assert (plain.estimated_flops, plain.estimated_read_bytes) == (0.0, 0.0)


def test_the_estimates_may_pass_2_53_but_not_be_negative_or_infinite() -> None:
    """A GPU does 2**53 FLOPs in seconds: the estimates are floats with no such bound (they
    are stored as floats); what a counter can never be is still refused."""
    flops = "vllm:estimated_flops_per_gpu_total"
    two = f'{flops}{{engine="0",model_name="m"}} 1e20\n{flops}{{engine="1",model_name="m"}} 1e20\n'
    assert parse(two).models["m"].estimated_flops == 2e20
    for bad in ("-1", "+Inf", "NaN"):
        with pytest.raises(ParseError, match=r"^line 1: .*finite non-negative"):
            parse(f'{flops}{{model_name="m"}} {bad}\n')
    with pytest.raises(ParseError, match=r"^line 2: .*sums to more than the largest float"):
        parse(two.replace("1e20", "1e308"))


def test_a_model_name_longer_than_the_store_column_is_a_parse_error() -> None:
    """The store's `model` column is String(256): a longer name would block every
    endpoint's history on PostgreSQL. The message says what to change, not the name."""
    assert list(parse(f'{_G}{{model_name="{"m" * MAX_MODEL_NAME}"}} 1\n').models) == [
        "m" * MAX_MODEL_NAME
    ]
    with pytest.raises(ParseError, match=r"^line 2: model_name is 257 characters long") as info:
        parse(_OK + f'{_G}{{model_name="{"m" * (MAX_MODEL_NAME + 1)}"}} 1\n')
    assert "--served-model-name" in str(info.value)
    # Counted after unescaping, as the store counts them: 200 escaped quotes are 200 characters.
    escaped = '\\"' * 200
    assert list(parse(f'{_G}{{model_name="{escaped}"}} 1\n').models) == ['"' * 200]


def test_a_five_megabyte_model_name_is_refused_quickly_and_not_cached() -> None:
    from spectax.engines import vllm as module

    huge = "x" * 5_000_000
    before = len(module._LABEL_CACHE)
    with pytest.raises(ParseError, match="5000000 characters long") as info:
        parse(f'{_G}{{model_name="{huge}"}} 1\n')
    assert len(str(info.value)) < 500
    assert len(module._LABEL_CACHE) <= before


def test_legacy_gauge_twice() -> None:
    text = (
        'vllm:spec_decode_efficiency{model_name="m"} 0.5\n'
        'vllm:spec_decode_efficiency{model_name="m",x="1"} 0.5\n'
    )
    with pytest.raises(ParseError, match=r"^line 2: .*twice"):
        parse(text)


def test_histogram_sum_without_count() -> None:
    with pytest.raises(ParseError, match="no _count"):
        parse('vllm:iteration_tokens_total_sum{model_name="m"} 5\n')


def test_non_utf8_bytes() -> None:
    raw = _OK.encode() + b'vllm:generation_tokens_total{model_name="\xff"} 1\n'
    with pytest.raises(ParseError, match=r"^line 2: .*UTF-8"):
        parse(raw)


# A line of a real page with random damage: ParseError or a result, nothing else.
_RELEVANT_LINES = [
    line
    for line in page("spec_ngram_dp2_3_after.txt").splitlines()
    if line.startswith(("vllm:spec_decode", "vllm:generation", "vllm:iteration_tokens_total_s"))
]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    line=st.sampled_from(_RELEVANT_LINES),
    cut=st.integers(min_value=0, max_value=200),
    junk=st.text(max_size=4),
)
def test_damaged_lines_never_crash(line: str, cut: int, junk: str) -> None:
    cut %= len(line) + 1
    damaged = line[:cut] + junk + line[cut + len(junk) :]
    try:
        result = parse(_OK + damaged + "\n" + _OK.replace("prompt", "generation"))
    except ParseError as exc:
        assert exc.line_number is None or 2 <= exc.line_number <= 5
    else:
        assert isinstance(result, EngineSample)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    line=st.sampled_from(_RELEVANT_LINES),
    cut=st.integers(min_value=0, max_value=200),
    junk=st.text(max_size=4),
)
@example(line=_RELEVANT_LINES[0], cut=0, junk=" ")
def test_lines_split_by_str_methods_are_the_grammar_s_lines(line: str, cut: int, junk: str) -> None:
    """A page of 16 KB or more is read with `_LINES` and `split_tails`; where they give
    columns with grammatical label sets, they are those of the grammar (`_SCAN`)."""
    cut %= len(line) + 1
    body = "\n" + _OK + line[:cut] + junk + line[cut + len(junk) :] + "\n" + _OK
    columns = split_tails(vllm._LINES.findall(body))
    if columns is not None and grammatical(columns[1], {}):
        assert columns == tuple(zip(*vllm._SCAN.findall(body), strict=True))


@settings(max_examples=200)
@given(st.text(max_size=300))
def test_arbitrary_text_never_crashes(text: str) -> None:
    with contextlib.suppress(ParseError):
        parse(text)


# ---------------------------------------------------------------------------
# Round trip through prometheus_client's own exposition

_names = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=40)


def _exposed(models: Iterable[tuple[str, int, int]]) -> str:
    registry = CollectorRegistry()
    gen = Counter("vllm:generation_tokens", "doc", ["engine", "model_name"], registry=registry)
    drafts = Counter(
        "vllm:spec_decode_num_drafts", "doc", ["engine", "model_name"], registry=registry
    )
    for name, a, b in models:
        gen.labels(engine="0", model_name=name).inc(a)
        gen.labels(engine="1", model_name=name).inc(b)
        drafts.labels(engine="0", model_name=name).inc(a + b)
    return generate_latest(registry).decode("utf-8")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(_names, st.integers(0, 2**40), st.integers(0, 2**40)),
        max_size=8,
        unique_by=lambda t: t[0],
    )
)
@example([('a"b', 1, 2), ("c\\d", 3, 4), ("e\nf", 5, 6), ("\\n", 0, 0), ('\\"}{,= ', 7, 8)])
def test_model_names_round_trip(models: list[tuple[str, int, int]]) -> None:
    text = _exposed(models)
    result = parse(text)
    assert list(result.models) == [name for name, _, _ in models]
    for name, a, b in models:
        m = result.models[name]
        assert m.generation_tokens == float(a + b)
        assert m.drafts == float(a + b)
        assert m.draft_tokens is None
    assert result == reference(text)


@settings(max_examples=200)
@given(st.floats(min_value=0.0, max_value=MAX_VALUE, allow_nan=False, allow_infinity=False))
def test_counter_values_round_trip(value: float) -> None:
    """Every value the store can hold exactly comes through unchanged (above: see below)."""
    text = _exposed([("m", 0, 0)]).replace(
        'vllm:generation_tokens_total{engine="0",model_name="m"} 0.0',
        f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {value!r}',
    )
    assert parse(text).models["m"].generation_tokens == value


# ---------------------------------------------------------------------------
# Registry


def test_registry() -> None:
    assert ENGINES["vllm"].parse is vllm.parse
    assert get_parser("vllm") is parse
    with pytest.raises(KeyError, match=r"known engines: .*vllm"):
        get_parser("no-such-engine")


# ---------------------------------------------------------------------------
# The KV cache (issue 20: capacity)


def _model(name: str) -> ModelSample:
    return parse((FIXTURES / f"{name}.txt").read_text(encoding="utf-8")).models["tiny-llama"]


def test_draft_model_server_has_fewer_kv_cache_blocks_than_plain() -> None:
    draft, plain = _model("spec_draft_3_after"), _model("nospec_3_after")
    # Same 1 GiB KV budget: the draft's own layers take their share of every block.
    assert draft.kv_cache_bytes == plain.kv_cache_bytes == 2**30
    assert (draft.kv_cache_blocks, plain.kv_cache_blocks) == (5461.0, 8192.0)
    assert draft.kv_block_size == plain.kv_block_size == 128.0


def test_kv_cache_of_data_parallel_ranks_is_summed() -> None:
    ranks = _model("spec_ngram_dp2_3_after")
    assert ranks.kv_cache_blocks == 2 * 16384.0
    assert ranks.kv_cache_bytes == 2 * 2**30
    assert ranks.kv_block_size == 128.0
    assert ranks.kv_cache_usage == 0.0


def test_waiting_requests_and_kv_usage_while_queued() -> None:
    queued = _model("spec_ngram_inflight_running_waiting")
    assert queued.requests_waiting == 4.0
    assert queued.kv_cache_usage == pytest.approx(0.0014650225857648635)
    assert queued.preemptions == 0.0


def _info(engine: str, blocks: str, size: str = "16", memory: str = "None") -> str:
    return (
        f'vllm:cache_config_info{{block_size="{size}",engine="{engine}",'
        f'kv_cache_memory_bytes="{memory}",num_gpu_blocks="{blocks}"}} 1.0\n'
    )


def test_kv_cache_usage_is_the_mean_of_the_ranks() -> None:
    text = (
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25\n'
        'vllm:num_preemptions_total{engine="0",model_name="m"} 3\n'
        'vllm:num_preemptions_total{engine="1",model_name="m"} 4\n'
        + _info("0", "100")
        + _info("1", "None")
    )
    model = parse(text).models["m"]
    assert model.kv_cache_usage == 0.375
    assert model.preemptions == 7.0
    assert (model.kv_cache_blocks, model.kv_block_size, model.kv_cache_bytes) == (100, 16, None)


def test_page_without_cache_families_has_no_kv_cache() -> None:
    model = parse('vllm:generation_tokens_total{model_name="m"} 1\n').models["m"]
    assert model.kv_cache_usage is model.kv_cache_blocks is model.kv_block_size is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_info("0", "12x"), "num_gpu_blocks must be a whole number"),
        (_info("0", "-1"), "num_gpu_blocks must be a whole number"),
        (_info("0", "1", size="16") + _info("1", "1", size="32"), "ranks disagree on block_size"),
        ('vllm:kv_cache_usage_perc{model_name="m"} 1.5\n', "must be a fraction from 0 to 1"),
        ('vllm:kv_cache_usage_perc{model_name="m"} NaN\n', "must be a fraction from 0 to 1"),
        ('vllm:num_preemptions_total{model_name="m"} -1\n', "finite non-negative"),
    ],
)
def test_bad_kv_cache_lines_are_errors(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse(_OK + text)


def test_kv_cache_settings_read_once_stay_right_and_a_bad_set_is_never_kept() -> None:
    """The settings of a label set are kept between scrapes (they never change); a bad one
    is refused on every page, not remembered as good."""
    draft = (FIXTURES / "spec_draft_3_after.txt").read_text(encoding="utf-8")
    assert parse(draft) == parse(draft)
    for _ in range(2):
        with pytest.raises(ParseError, match="num_gpu_blocks must be a whole number"):
            parse(_OK + _info("0", "7e3"))


def test_a_negative_zero_bucket_on_a_known_layout_counts_as_zero() -> None:
    """A layout takes a one-rank histogram's counts as a slice of the page's values packed as
    doubles; a bucket written -0.0 must still count 0.0, as the line-by-line sum (and the
    reference's) gives it: the packed counts are compared byte for byte."""
    good = page("spec_ngram_2_mid.txt")
    line = 'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="tiny-llama"}'
    assert f"\n{line} 0.0\n" in good
    _read_twice(good)  # its layout is learnt
    signed = good.replace(f"\n{line} 0.0\n", f"\n{line} -0.0\n")
    sample = parse(signed)
    assert sample == reference(signed)
    ttft = sample.models["tiny-llama"].time_to_first_token
    assert ttft is not None and math.copysign(1.0, ttft.bucket_counts()[0]) == 1.0


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    line=st.sampled_from(_RELEVANT_LINES),
    cut=st.integers(min_value=0, max_value=200),
    junk=st.text(max_size=4),
)
@example(line=_RELEVANT_LINES[0], cut=28, junk=" ")
@example(line=_RELEVANT_LINES[0], cut=28, junk="-")
def test_whole_lines_split_as_split_tails_splits_them(line: str, cut: int, junk: str) -> None:
    """A page of 16 KB or more is scanned for whole lines (`_WHOLE_LINES`) and split by
    `_split_lines`: where it gives columns they are `split_tails`' of `_LINES`' matches;
    where it gives None, those are None or have a label set the grammar refuses."""
    cut %= len(line) + 1
    body = "\n" + _OK + line[:cut] + junk + line[cut + len(junk) :] + "\n" + _OK
    columns = vllm._split_lines(vllm._WHOLE_LINES.findall(body))
    expected = split_tails(vllm._LINES.findall(body))
    if columns is not None:
        assert columns == expected
    else:
        assert expected is None or not grammatical(expected[1], {})


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("} 1168.0", "} 1168.0 1700000000000"),  # a timestamp
        ("} 1168.0", "}  1168.0"),  # two blanks
        ("} 1168.0", "} 1168.0\r"),  # a carriage return
        (
            'engine="0",model_name="tiny-llama"} 1168.0',
            'model_name="tiny-llama",engine="0"} 1168.0',
        ),
    ],
)
def test_a_page_of_known_edges_but_another_line_is_read_as_any_other(old: str, new: str) -> None:
    """A page is matched to a layout by its number of lines and first and last line
    (`_BY_EDGES`), then checked line by line: a line in another form, or with its labels in
    another order, is not read through the layout of the page it resembles."""
    good = page("spec_ngram_2_mid.txt")
    line = 'vllm:generation_tokens_total{engine="0",model_name="tiny-llama"} 1168.0'
    _read_twice(good)
    parse(good)  # the third page finds its layout by its edges from now on
    changed = good.replace(line, line.replace(old, new))
    assert changed != good
    assert parse(changed) == reference(changed.replace("\r", ""))
