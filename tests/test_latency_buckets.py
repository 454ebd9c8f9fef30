"""Histogram buckets on their way from a page to the store: deltas, the sliding window's
packing, the cursor, the windows table and the rollups. A quantile is only as good as the
buckets under it, so wherever they cannot be known they are dropped, never made up."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from engine_pages import pages
from recorded_pages import page
from report_history import window_row
from spectax.engines import get_parser
from spectax.engines.base import COUNTERS, EngineSample, Histogram
from spectax.engines.vllm import parse
from spectax.pipeline.counts import Counts, delta
from spectax.pipeline.packing import pack_counts, unpack_counts
from spectax.store import Store
from spectax.store.cursor import decode_sample, encode_sample
from spectax.store.rows import counter_columns, decode_buckets, encode_buckets

INF = math.inf
ENGINE_FIXTURES = {
    "vllm": "vllm-0.32.0",
    "sglang": "sglang-0.5.23",
    "tgi": "tgi-3.3.6",
    "trtllm": "trtllm-050f80d",
    "llamacpp": "llamacpp-11434.0.0",
}


def recorded(name: str) -> Counts:
    before = parse(page("spec_ngram_0_before_traffic.txt")).models["tiny-llama"]
    after = parse(page(name)).models["tiny-llama"]
    return delta(before, after, (1.0,))


def test_packed_counts_keep_every_bucket() -> None:
    counts = recorded("spec_ngram_3_after.txt")
    assert counts.time_per_output_token is not None and counts.time_per_output_token.buckets
    assert unpack_counts(pack_counts(counts)) == counts
    assert unpack_counts(pack_counts(Counts())) == Counts()  # no histograms at all


def test_the_cursor_keeps_the_buckets_and_reads_one_written_before_them() -> None:
    sample = parse(page("spec_ngram_dp2_3_after.txt"))
    assert decode_sample(encode_sample(sample)) == sample
    old = json.loads(encode_sample(sample))
    for fields in old["models"].values():  # a cursor stored before buckets were read
        for value in fields.values():
            if isinstance(value, dict):
                value.pop("buckets")
    decoded = decode_sample(json.dumps(old)).models["tiny-llama"]
    assert decoded.time_per_output_token is not None
    assert decoded.time_per_output_token.buckets == ()


def test_the_cursor_text_is_the_one_every_earlier_version_wrote() -> None:
    """The cursor codec writes field by field; a daemon upgraded across it must read and
    write the same text as `dataclasses.asdict` made (spooled and stored cursors), for every
    recorded page of every engine."""

    def as_before(sample: EngineSample) -> str:
        data = asdict(sample)
        for name, model in sample.models.items():
            for key, value in data["models"][name].items():
                if isinstance(value, dict):
                    h = getattr(model, key)
                    data["models"][name][key] = {
                        "sum": h.sum,
                        "count": h.count,
                        "buckets": h.buckets,
                    }
        return json.dumps(data)

    seen = 0
    for engine, directory in ENGINE_FIXTURES.items():
        for name, text in pages(directory).items():
            if "headers" in name:  # response headers, no page
                continue
            sample = get_parser(engine)(text)
            assert encode_sample(sample) == as_before(sample), (directory, name)
            assert decode_sample(encode_sample(sample)) == sample, (directory, name)
            seen += 1
    assert seen > 50


_ODD = st.sampled_from([math.inf, -math.inf, math.nan, -0.0, 0.0, 1e300, 2.0**60, 5e-324])


@settings(max_examples=200, deadline=None)
@given(_ODD, _ODD, _ODD, st.integers(0, 19))
def test_the_cursor_text_holds_odd_numbers_as_json_does(
    scalar: float, histogram_sum: float, count: float, bucket: int
) -> None:
    """The cursor's own JSON writer (issue 31) spells infinities, NaN, -0.0 and huge or tiny
    numbers in a field, a histogram's sum and a bucket count as json.dumps does."""
    model = parse(page("spec_ngram_3_after.txt")).models["tiny-llama"]
    tpot = model.time_per_output_token
    assert tpot is not None
    counts = list(tpot.bucket_counts())
    counts[bucket % len(counts)] = count
    odd = replace(
        model,
        prompt_tokens=scalar,
        time_per_output_token=Histogram.of(histogram_sum, count, tpot.bounds, counts),
    )
    sample = EngineSample("vllm", {"tiny-llama": odd}, scalar)
    expected = asdict(sample)
    expected["models"]["tiny-llama"]["time_per_output_token"] = {
        "sum": histogram_sum,
        "count": count,
        "buckets": tuple(zip(tpot.bounds, counts, strict=True)),
    }
    for key, value in expected["models"]["tiny-llama"].items():
        if isinstance(value, dict) and key != "time_per_output_token":
            h = getattr(odd, key)
            expected["models"]["tiny-llama"][key] = {
                "sum": h.sum,
                "count": h.count,
                "buckets": h.buckets,
            }
    assert encode_sample(sample) == json.dumps(expected)


def test_a_delta_across_an_upgrade_has_no_buckets_rather_than_wrong_ones() -> None:
    before = Histogram(1.0, 10.0)  # the cursor, from before buckets were read
    after = Histogram(2.0, 12.0, ((0.1, 5.0), (INF, 12.0)))
    grown = delta(Counts(time_per_output_token=before), Counts(time_per_output_token=after), (0,))
    assert grown.time_per_output_token == Histogram(1.0, 2.0, ())
    # An idle interval without buckets adds nothing and removes nothing.
    busy = Counts(time_per_output_token=after)
    idle = Counts(time_per_output_token=Histogram(0.0, 0.0))
    assert (busy + idle).time_per_output_token == after
    assert ((busy + busy) - busy).time_per_output_token == after


def test_the_sliding_sum_of_intervals_is_the_whole_deltas_buckets() -> None:
    first = recorded("spec_ngram_1_after_first_request.txt")
    second = recorded("spec_ngram_3_after.txt") - first
    whole = recorded("spec_ngram_3_after.txt")
    assert (first + second).time_per_output_token == whole.time_per_output_token


def test_bucket_json_is_standard_and_round_trips() -> None:
    buckets = ((0.01, 3.0), (0.5, 7.0), (INF, 9.0))
    text = encode_buckets(buckets)
    assert "Infinity" not in text and '"+Inf"' in text
    assert decode_buckets(text) == buckets
    assert decode_buckets(None) == () and decode_buckets("") == ()


def test_a_rows_bucket_text_is_the_json_of_its_pairs_on_every_recorded_page() -> None:
    """The windows table's bucket columns are written from a template per bound list (issue
    31): the same text, byte for byte, as the JSON of the pairs that every stored row has,
    for every histogram of every recorded page of every engine."""
    checked = 0
    for engine, fixtures in ENGINE_FIXTURES.items():
        for text in pages(fixtures).values():
            for model in get_parser(engine)(text).models.values():
                for column, histogram in _histograms(model):
                    if histogram is None or not histogram.bounds:
                        continue
                    row = counter_columns(Counts(**{column: histogram}))
                    assert row[f"{_COLUMN[column]}_buckets"] == encode_buckets(histogram.buckets)
                    checked += 1
    assert checked >= 90  # 92 histograms with buckets among the recorded pages


_COLUMN = {c.name: c.column for c in COUNTERS if c.kind == "histogram"}


def _histograms(model: object) -> list[tuple[str, Histogram | None]]:
    return [(name, getattr(model, name)) for name in _COLUMN]


async def test_rollups_add_buckets_and_drop_them_when_a_window_has_none(tmp_path: Path) -> None:
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'b.sqlite'}")
    try:
        a = ((0.1, 2.0), (1.0, 5.0), (INF, 6.0))
        b = ((0.1, 1.0), (1.0, 1.0), (INF, 4.0))
        rows = []
        for minute, buckets in ((0, a), (10, b)):
            row = window_row(
                "e", datetime(2026, 5, 4, 10, minute, tzinfo=UTC), concurrency=1.0, output_tokens=10
            )
            row.update(
                time_per_output_token_sum=1.0,
                time_per_output_token_count=buckets[-1][1],
                time_per_output_token_buckets=encode_buckets(buckets),
            )
            rows.append(row)
        # Another hour: one window saw requests but has no buckets (stored before 0007).
        for minute, text in ((0, encode_buckets(a)), (10, None)):
            row = window_row(
                "e", datetime(2026, 5, 4, 11, minute, tzinfo=UTC), concurrency=1.0, output_tokens=10
            )
            row.update(
                time_per_output_token_sum=1.0,
                time_per_output_token_count=6.0,
                time_per_output_token_buckets=text,
            )
            rows.append(row)
        await store.save("e", rows, None)
        await store.rollup()
        hours = {r.start.hour: r for r in await store.rows("hour")}
        summed = decode_buckets(hours[10].time_per_output_token_buckets)
        assert summed == ((0.1, 3.0), (1.0, 6.0), (INF, 10.0))
        assert hours[11].time_per_output_token_buckets is None
        (day,) = await store.rows("day")
        assert day.time_per_output_token_buckets is None  # one unknown hour: the day unknown
    finally:
        await store.close()
