"""Latency quantiles (spectax.pipeline.quantiles) against a real Prometheus.

The recorded vLLM pages of tests/fixtures/vllm-0.32.0 are loaded into a real Prometheus
(Debian package) as two scrapes a minute apart, with `promtool tsdb create-blocks-from
openmetrics`, and its `histogram_quantile` over the buckets' growth between them is
compared with spectax's quantile of the same two pages' delta (parse -> delta -> quantiles,
the daemon's path). Every latency metric spectax reads, p50/p95/p99, on every pair of pages
of one server, including two data-parallel ranks summed by `le`.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from promstack import LATENCY_FAMILIES, binary, histogram_quantiles
from spectax.engines.base import Histogram
from spectax.engines.vllm import parse
from spectax.pipeline.counts import delta
from spectax.pipeline.quantiles import (
    LATENCY_METRICS,
    QUANTILES,
    _located,
    bucket_quantile,
    latency_quantiles,
    merged,
    quantiles,
)

FIXTURES = Path(__file__).parent / "fixtures" / "vllm-0.32.0"
#: (earlier page, later page) of one server: the two scrapes of a window.
PAIRS = (
    ("spec_ngram_0_before_traffic", "spec_ngram_2_mid"),
    ("spec_ngram_2_mid", "spec_ngram_3_after"),
    ("spec_ngram_1_after_first_request", "spec_ngram_3_after"),
    ("nospec_2_mid", "nospec_3_after"),
    ("nospec_0_before_traffic", "nospec_3_after"),
    ("spec_draft_0_before_traffic", "spec_draft_3_after"),
    ("spec_ngram_dp2_2_mid", "spec_ngram_dp2_3_after"),
    ("spec_ngram_mfu_2_mid", "spec_ngram_mfu_3_after"),
    ("spec_ngram_restart_0_before_traffic", "spec_ngram_restart_3_after"),
    ("nospec_chat_t07_c4_before", "nospec_chat_t07_c4_after"),
    ("spec_ngram_chat_t07_c4_zero_drafts_before", "spec_ngram_chat_t07_c4_zero_drafts_after"),
)
FAMILY = LATENCY_FAMILIES


def page(name: str) -> str:
    return (FIXTURES / f"{name}.txt").read_text(encoding="utf-8")


def spectax_figures(before: str, after: str) -> dict[tuple[str, str], float | None]:
    model_before = parse(page(before)).models["tiny-llama"]
    model_after = parse(page(after)).models["tiny-llama"]
    found = latency_quantiles(delta(model_before, model_after, (0.0,)))
    return {
        (metric, label): (found[metric].by_label()[label] if metric in found else None)
        for metric in FAMILY
        for label, _ in QUANTILES
    }


@pytest.mark.e2e
async def test_quantiles_equal_prometheus_histogram_quantile(tmp_path: Path) -> None:
    binary("prometheus")
    texts = [(page(before), page(after)) for before, after in PAIRS]
    theirs_all = await histogram_quantiles(tmp_path, texts)
    compared = 0
    for i, (before, after) in enumerate(PAIRS):
        ours = spectax_figures(before, after)
        for metric in FAMILY:
            for label, q in QUANTILES:
                theirs = theirs_all[(i, metric, q)]
                mine = ours[(metric, label)]
                where = f"{before} -> {after}, {metric} {label}"
                if math.isnan(theirs):
                    assert mine is None, where
                else:
                    assert mine == pytest.approx(theirs, rel=1e-12, abs=1e-15), where
                    compared += 1
    # Most pairs carry traffic: the comparison is over real numbers, not NaN = None.
    assert compared >= 9 * len(FAMILY) * len(QUANTILES)


# ---------------------------------------------------------------- the rules, one by one


def test_interpolates_linearly_inside_the_bucket_holding_the_rank() -> None:
    # 10 observations: 4 in (0, 0.1], 6 in (0.1, 0.2]. p50 = rank 5, the first of the six.
    buckets = [(0.1, 4.0), (0.2, 10.0), (math.inf, 10.0)]
    assert bucket_quantile(0.5, buckets) == pytest.approx(0.1 + 0.1 * (1 / 6))
    assert bucket_quantile(0.2, buckets) == pytest.approx(0.05)  # lower bound 0


def test_a_rank_in_the_inf_bucket_answers_the_largest_finite_bound() -> None:
    assert bucket_quantile(0.99, [(0.1, 1.0), (0.5, 2.0), (math.inf, 100.0)]) == 0.5


def test_no_quantile_where_prometheus_answers_nan() -> None:
    assert bucket_quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]) is None  # no observations
    assert bucket_quantile(0.5, [(0.1, 1.0), (1.0, 2.0)]) is None  # no +Inf bucket
    assert bucket_quantile(0.5, [(math.inf, 3.0)]) is None  # fewer than two buckets
    assert quantiles(Histogram(0.0, 0.0, ((0.1, 0.0), (math.inf, 0.0)))) is None
    assert quantiles(Histogram(1.0, 2.0)) is None  # an engine that gives no buckets


def test_non_monotonic_counts_are_flattened_as_prometheus_does() -> None:
    # A bucket below its predecessor (a torn scrape) counts as its predecessor.
    assert bucket_quantile(0.5, [(0.1, 6.0), (0.2, 4.0), (math.inf, 10.0)]) == pytest.approx(
        bucket_quantile(0.5, [(0.1, 6.0), (0.2, 6.0), (math.inf, 10.0)])
    )


def test_merging_adds_bound_by_bound_and_refuses_other_bounds() -> None:
    a = ((0.1, 1.0), (math.inf, 2.0))
    assert merged([a, a, ()]) == ((0.1, 2.0), (math.inf, 4.0))
    assert merged([a, ((0.2, 1.0), (math.inf, 2.0))]) == ()


def test_every_latency_metric_has_a_field() -> None:
    assert {metric for metric, _ in LATENCY_METRICS} == set(FAMILY)


_bound = st.sampled_from([-1.0, 0.0, 0.001, 0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 10.0, math.inf])


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(_bound, st.floats(0, 1e6, allow_nan=False)), min_size=1, max_size=12),
    st.booleans(),
)
def test_a_histograms_quantiles_are_those_of_its_buckets_as_pairs(
    pairs: list[tuple[float, float]], ascending: bool
) -> None:
    """`quantiles` reads a histogram's shared bounds and packed counts without building
    pairs (issue 31): the same numbers and buckets as Prometheus' rule over the pairs, for
    bounds ascending as engines print them or in any order, repeated, with float noise or
    counts that fall (each of which the rule flattens its own way)."""
    if ascending:
        pairs = sorted(dict(pairs).items())
    histogram = Histogram(1.0, max(n for _, n in pairs) or 1.0, pairs)
    found = quantiles(histogram)
    expected = [_located(q, histogram.buckets) for _, q in QUANTILES]
    assert found is not None  # it has buckets and observations
    assert [found.p50, found.p95, found.p99] == [value for value, _ in expected]
    assert list(found.buckets) == [bucket for _, bucket in expected]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([0.0, 7.0, 1e6, 99_999_999_999.0, 2e12]),
    st.lists(
        st.tuples(_bound, st.sampled_from([0.0, 1.0, 2.0, 0.5, 1e-3, -1.0])),
        min_size=1,
        max_size=12,
    ),
    st.booleans(),
)
@example(2e12, [(1.0, 0.0), (2.0, 1.0), (math.inf, 0.0)], True)  # a step of 1 within tolerance
@example(7.0, [(1.0, 0.0), (2.0, 1e-3), (math.inf, 0.0)], True)  # not whole
def test_whole_counts_skip_no_fix_the_rule_would_make(
    base: float, steps: list[tuple[float, float]], ascending: bool
) -> None:
    """Whole counts that never fall skip the rule's two fixes (`_already_prepared`): the same
    numbers as the rule over the pairs, for counts from a base with small steps: whole or
    not, under 1e11 and past 1e12 (where a step of 1 is within the rule's float tolerance),
    and falling."""
    if ascending:
        steps = sorted(dict(steps).items())
    pairs, count = [], base
    for bound, step in steps:
        count += step
        pairs.append((bound, count))
    histogram = Histogram(1.0, max(n for _, n in pairs) or 1.0, pairs)
    found = quantiles(histogram)
    expected = [_located(q, histogram.buckets) for _, q in QUANTILES]
    if found is None:
        assert all(value is None for value, _ in expected)
        return
    assert [found.p50, found.p95, found.p99] == [value for value, _ in expected]
    assert list(found.buckets) == [bucket for _, bucket in expected]
