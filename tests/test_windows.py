"""Counter deltas, restarts and windows, on recorded vLLM pages."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import NGRAM_PAGES, monitor_of, ngram_settings
from recorded_pages import page, reference_values
from spectax.engines import get_parser
from spectax.engines.base import Histogram
from spectax.pipeline.counts import Counts
from spectax.pipeline.intervals import Interval, interval_between, restarted
from spectax.pipeline.packing import pack_counts, unpack_counts
from spectax.pipeline.windows import (
    AlignedWindows,
    SlidingWindow,
    Window,
    interval_window,
    sum_intervals,
)
from spectax.store.cursor import encode_sample
from spectax.store.rows import pending_write

parse = get_parser("vllm")
M = "tiny-llama"


def sample(name: str):
    return parse(page(name))


def test_delta_between_two_pages_of_one_process() -> None:
    before, after = sample("spec_ngram_2_mid.txt"), sample("spec_ngram_3_after.txt")
    interval = interval_between(before, after, 100.0, 160.0)
    ref_b = reference_values(page("spec_ngram_2_mid.txt"))
    ref_a = reference_values(page("spec_ngram_3_after.txt"))
    counts = interval.models[M]
    assert not interval.restarted
    name = "vllm:generation_tokens_total"
    assert counts.generation_tokens == ref_a[name][M] - ref_b[name][M]
    name = "vllm:spec_decode_num_draft_tokens_total"
    assert counts.draft_tokens == ref_a[name][M] - ref_b[name][M]
    assert interval.seconds == 60.0


def test_restart_counts_the_new_process_from_zero() -> None:
    """After a restart the new value is the delta: nothing negative, nothing lost."""
    before, after = sample("spec_ngram_3_after.txt"), sample("spec_ngram_restart_2_mid.txt")
    assert restarted(before, after)
    interval = interval_between(before, after, 0.0, 30.0)
    assert interval.restarted
    assert interval.models[M].generation_tokens == after.models[M].generation_tokens
    assert interval.models[M].accepted_per_position == after.models[M].accepted_per_position


def test_restart_seen_by_counters_when_there_is_no_process_start_time() -> None:
    """Data-parallel pages have no process_* families; a counter going down is the restart."""
    before, after = sample("spec_ngram_dp2_3_after.txt"), sample("spec_ngram_dp2_2_mid.txt")
    assert before.process_start_time_seconds is None
    assert restarted(before, after)
    forward = interval_between(after, before, 0, 1)
    assert not forward.restarted and forward.models[M].generation_tokens > 0


def test_new_model_in_same_process_has_no_delta_yet() -> None:
    empty, first = (
        sample("spec_ngram_disable_log_stats_2_mid.txt"),
        sample("spec_ngram_3_after.txt"),
    )
    interval = interval_between(empty, first, 0, 15)
    # The disable-log-stats page has a different process: that is a restart, counted from zero.
    assert interval.restarted and interval.models[M].generation_tokens == 2186
    same_process = type(first)(
        engine="vllm", models={}, process_start_time_seconds=first.process_start_time_seconds
    )
    assert interval_between(same_process, first, 0, 15).models == {}


ITL_SUM = "vllm:inter_token_latency_seconds_sum"
PREFILL_SUM = "vllm:request_prefill_time_seconds_sum"


def running_time(name: str) -> float:
    """A recorded page's decode and prefill time, by prometheus_client."""
    values = reference_values(page(name))
    return values[ITL_SUM][M] + values[PREFILL_SUM][M]


def test_concurrency_is_the_time_the_engine_spent_on_its_requests() -> None:
    """Where vLLM times its requests, an interval's running request-seconds are the decode
    time its tokens came out over (the inter-token latencies' sum) plus the prefill time of
    the requests that finished, whatever the running gauge read at the two pages (2, 0)."""
    before, after = "spec_ngram_inflight_running_waiting.txt", "spec_ngram_inflight_after.txt"
    busy = sample(before)
    assert busy.models[M].requests_running == 2
    interval = interval_between(busy, sample(after), 0.0, 10.0)
    ran = running_time(after) - running_time(before)
    assert ran > 1.0  # the requests running at the first page finished by the second
    assert interval.models[M].running_seconds == pytest.approx(ran, rel=1e-12)
    assert interval.busy


def test_without_the_engines_timing_concurrency_is_the_gauges_trapezoid() -> None:
    """An engine that keeps no prefill time (or a page without vLLM's histogram): the
    running gauge integrated between the two pages, (2 + 0) / 2 over 10 s."""

    def without_prefill_time(name: str):
        text = page(name)
        lines = [ln for ln in text.splitlines(True) if not ln.startswith(PREFILL_SUM)]
        assert len(lines) < len(text.splitlines())
        return get_parser("vllm")("".join(lines))

    busy = without_prefill_time("spec_ngram_inflight_running_waiting.txt")
    after = without_prefill_time("spec_ngram_inflight_after.txt")
    assert busy.models[M].prefill_seconds is None
    interval = interval_between(busy, after, 0.0, 10.0)
    assert interval.models[M].running_seconds == pytest.approx(10.0)
    assert interval.busy


def test_a_decode_time_missing_from_the_earlier_page_is_not_taken_as_zero() -> None:
    """An earlier page without the inter-token histogram (cut, or another engine version)
    is no zero to count the process's whole decode time from: the gauges' trapezoid."""
    name = "spec_ngram_inflight_running_waiting.txt"
    lines = page(name).splitlines(True)
    kept = [ln for ln in lines if not ln.startswith("vllm:inter_token_latency_seconds")]
    assert len(kept) < len(lines)
    before = get_parser("vllm")("".join(kept))
    assert before.models[M].inter_token_latency is None
    interval = interval_between(before, sample(name), 0.0, 10.0)
    assert interval.models[M].running_seconds == pytest.approx((2 + 2) / 2 * 10.0)


def test_a_restart_counts_the_new_process_time_from_zero() -> None:
    """Across a restart the running time is the new process's own sums, as every counter."""
    before, fresh = "spec_ngram_3_after.txt", "spec_ngram_restart_3_after.txt"
    interval = interval_between(sample(before), sample(fresh), 0.0, 30.0)
    assert interval.restarted
    assert interval.models[M].running_seconds == pytest.approx(running_time(fresh), rel=1e-12)
    assert interval.models[M].running_seconds > 0


def _interval(start: float, end: float, tokens: float) -> Interval:
    return Interval(
        start,
        end,
        {M: Counts(generation_tokens=tokens, running_seconds=end - start)},
        restarted=False,
        busy=tokens > 0,
    )


def test_sliding_window_keeps_only_its_length() -> None:
    window = SlidingWindow(60)
    for i in range(10):
        window.add(_interval(i * 15, (i + 1) * 15, 10))
    total = window.total()
    assert total is not None
    assert total.seconds == 60 and total.models[M].generation_tokens == 40
    assert total.concurrency(M) == pytest.approx(1.0)


def test_aligned_windows_close_on_boundaries_and_sum_exactly() -> None:
    windows = AlignedWindows(300)
    closed = []
    for i in range(60):  # 15 minutes of 15 s intervals
        closed += windows.add(_interval(1000 + i * 15, 1000 + (i + 1) * 15, i))
    assert [w.start for w in closed] == [900, 1200, 1500]
    assert windows.open is not None and windows.open.start == 1800
    total = sum(w.models[M].generation_tokens for w in [*closed, windows.open])
    assert total == sum(range(60))
    assert closed[0].end == 1200 and closed[0].seconds == 195  # 1000..1195; 1195..1210 is later
    # An interval ending exactly on a boundary belongs to the window before it.
    assert windows.add(_interval(1900, 2100, 1)) == []
    assert windows.open.start == 1800 and windows.open.end == 2100


def test_due_closes_a_window_when_no_scrape_arrives() -> None:
    windows = AlignedWindows(300)
    windows.add(_interval(0, 15, 1))
    assert windows.due(299) == []
    [closed] = windows.due(300)
    assert closed.start == 0 and windows.open is None


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(1, 40),
            st.sampled_from(["a", "b"]),
            st.integers(0, 500),
            st.integers(0, 9),
        ),
        min_size=1,
        max_size=80,
    )
)
def test_sliding_total_kept_up_to_date_equals_a_fresh_sum(steps) -> None:
    """The incremental sum (add one, take out the expired) is the sum of what is in the window."""
    window = SlidingWindow(60)
    window.REBUILD_EVERY = 1000  # exercise the incremental path only
    kept: list[Interval] = []
    t = 0.0
    for seconds, model, tokens, drafted in steps:
        counts = Counts(
            generation_tokens=tokens,
            draft_tokens=float(drafted),
            accepted_per_position=(float(drafted),) * (drafted % 3),
            inter_token_latency=Histogram(sum=seconds / 10, count=float(tokens)),
            running_seconds=seconds * 2,
        )
        interval = Interval(t, t + seconds, {model: counts}, restarted=tokens == 0, busy=tokens > 0)
        t += seconds
        window.add(interval)
        kept = [i for i in [*kept, interval] if i.end > t - 60]
        expected, got = sum_intervals(kept), window.total()
        assert got is not None
        assert set(got.models) == set(expected.models)
        assert got.seconds == pytest.approx(expected.seconds)
        assert got.restarts == expected.restarts
        for name, want in expected.models.items():
            have = got.models[name]
            assert have.generation_tokens == want.generation_tokens
            assert have.draft_tokens == want.draft_tokens
            assert have.running_seconds == pytest.approx(want.running_seconds)
            assert have.inter_token_latency.count == want.inter_token_latency.count
            assert [round(x) for x in have.accepted_per_position][
                : len(want.accepted_per_position)
            ] == list(want.accepted_per_position)


finite = st.floats(min_value=0, max_value=1e12, allow_nan=False)
optional = st.none() | finite
histogram = st.none() | st.builds(Histogram, sum=finite, count=finite)


@given(
    st.builds(
        Counts,
        generation_tokens=finite,
        prompt_tokens=finite,
        requests_finished=finite,
        drafts=optional,
        draft_tokens=optional,
        accepted_tokens=optional,
        accepted_per_position=st.lists(finite, max_size=8).map(tuple),
        iteration_tokens=histogram,
        inter_token_latency=histogram,
        time_per_output_token=histogram,
        running_seconds=finite,
    )
)
def test_packed_counts_come_back_unchanged(counts: Counts) -> None:
    """The sliding window keeps its intervals packed; what leaves it must be what came in."""
    assert unpack_counts(pack_counts(counts)) == counts


def test_the_sliding_window_holds_nothing_the_garbage_collector_must_scan() -> None:
    """At 2,000 endpoints the windows hold ~40,000 intervals; were they tracked, every full
    collection (a pause in scraping and serving /metrics) would walk them all. What leaves
    the window is what came in, money to the last digit."""
    import gc
    from dataclasses import replace
    from decimal import Decimal

    spend = Decimal("0.0123456789012345678901")
    window = SlidingWindow(300)
    for i in range(25):
        window.add(replace(_interval(i * 15, (i + 1) * 15, 10 + i), spend_usd=spend))
    # A packed interval is bytes, which the collector never tracks; a tuple is untracked
    # only once a pass finds nothing tracked in it, and a class instance never is. The
    # passes give a tuple-based packing its fair chance before the check.
    for _ in range(3):
        gc.collect()
    kept = list(window._intervals)
    assert len(kept) == 20
    assert not any(gc.is_tracked(interval) for interval in kept)
    total = window.total()
    assert total is not None
    assert total.models[M].generation_tokens == sum(range(15, 35))
    assert total.spend_usd == 20 * spend


def test_every_declared_counter_is_stored_in_its_columns_and_read_back() -> None:
    """Adding a counter is one line in spectax.engines.base.Counters plus its columns: the
    row codec derives where each counter goes from its kind, and reads it back unchanged."""
    from spectax.store.models import DailyRow, HourlyRow, WindowRow
    from spectax.store.rows import counter_columns, counts_from_row

    counts = Counts(
        generation_tokens=1200,
        prompt_tokens=3400,
        requests_finished=12,
        drafts=300,
        draft_tokens=900,
        accepted_tokens=600,
        accepted_per_position=(250, 200, 150),
        iteration_tokens=Histogram(sum=4600, count=100),
        inter_token_latency=Histogram(sum=3.5, count=1100),
        time_per_output_token=Histogram(sum=0.25, count=12),
        running_seconds=42.5,
    )
    columns = counter_columns(counts)
    for table in (WindowRow, HourlyRow, DailyRow):
        assert set(columns) <= set(table.__table__.columns.keys()), table.__tablename__
    assert counts_from_row(WindowRow(**columns)) == counts


@pytest.mark.parametrize(
    "engine, directory",
    [
        ("vllm", "vllm-0.32.0"),
        ("sglang", "sglang-0.5.23"),
        ("tgi", "tgi-3.3.6"),
        ("trtllm", "trtllm-050f80d"),
        ("llamacpp", "llamacpp-11434.0.0"),
    ],
)
def test_every_recorded_pages_sample_comes_back_from_its_packing(
    engine: str, directory: str
) -> None:
    """Between scrapes an endpoint keeps its last page's sample packed (the cursor the next
    interval starts from): unpacked, it must be the sample that was parsed, field for field,
    histograms, per-position counts and settings included."""
    from pathlib import Path

    from spectax.engines.base import ParseError
    from spectax.pipeline.packing import pack_sample, unpack_sample

    parse_page = get_parser(engine)
    pages = sorted((Path(__file__).parent / "fixtures" / directory).glob("*.txt"))
    checked = 0
    for path in pages:
        try:
            parsed = parse_page(path.read_text())
        except ParseError:
            continue  # INDEX.txt and the like
        assert unpack_sample(pack_sample(parsed)) == parsed, path.name
        checked += bool(parsed.models)
    assert checked >= 2


def test_the_open_window_a_scrape_hands_the_store_is_the_one_the_monitor_keeps() -> None:
    """The flush right after a scrape hands the store the open window and cursor the scrape
    built, without unpacking them again (issue 31): they must be what the monitor keeps
    packed, byte for byte in the rows and the cursor, so that a kill -9 resumes exactly
    there. Recorded pages, a restart among them, windows closing on the way."""
    monitor = monitor_of(ngram_settings(), 60.0)
    for i in range(40):
        monitor.observe_page(
            1_700_000_000.0 + 7.5 * i, page(NGRAM_PAGES[i % len(NGRAM_PAGES)]), 0.01
        )
        fresh = monitor.flush()  # the scrape's own objects
        kept = monitor.flush()  # from the packed state
        if i == 0:
            assert fresh is None and kept is None  # no interval yet, nothing open
            continue
        assert fresh is not None and kept is not None
        assert pending_write(fresh).rows == pending_write(kept).rows
        assert fresh.cursor is not None and kept.cursor is not None
        assert fresh.cursor[0] == kept.cursor[0]
        assert encode_sample(fresh.cursor[1]) == encode_sample(kept.cursor[1])


BOUNDS = ((0.1, 1.0, float("inf")), (0.5, 2.0, 8.0, float("inf")))
whole = st.integers(0, 10**6).map(float)
# A shape (pipeline.packing): each histogram None, on one of two bound lists or without
# buckets; which optional fields are None; how many positions.
shapes = st.tuples(
    st.sampled_from([None, 0, 1, "no buckets"]),
    st.sampled_from([None, 0, 1, "no buckets"]),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.integers(0, 3),
)


def _histogram(draw, kind) -> Histogram | None:
    if kind is None:
        return None
    if kind == "no buckets":
        return Histogram(draw(whole), draw(whole))
    bounds = BOUNDS[kind]
    cumulative = sorted(draw(st.lists(whole, min_size=len(bounds), max_size=len(bounds))))
    return Histogram.of(draw(whole), cumulative[-1], bounds, cumulative)


def _counts(draw, shape) -> Counts:
    h1, h2, drafted, used, blocks, positions = shape
    return Counts(
        generation_tokens=draw(whole),
        draft_tokens=draw(whole) if drafted else None,
        accepted_per_position=tuple(draw(whole) for _ in range(positions)),
        inter_token_latency=_histogram(draw, h1),
        time_to_first_token=_histogram(draw, h2),
        running_seconds=draw(st.floats(0, 1e4, allow_nan=False)),
        kv_usage_seconds=draw(st.floats(0, 1e3, allow_nan=False)) if used else None,
        kv_cache_blocks=draw(whole) if blocks else None,
    )


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_windows_summed_packed_are_the_objects_sums_to_the_bit(data) -> None:
    """The windows add and take out intervals on their packed doubles (pipeline.packing
    `add_packed`, issue 31): the sums must be, double for double, what the objects'
    arithmetic (Window.add, Window.remove) gives, whatever the shapes meet: fields None on
    one side only, histograms with other bounds or none, per-position counts of another
    length, settings, models coming and going. Each model mostly keeps its shape, as a
    server's pages do, and now and then takes another."""
    from decimal import Decimal

    draw = data.draw
    usual = {name: draw(shapes) for name in "ab"}
    sliding, aligned = SlidingWindow(60), AlignedWindows(45)
    sliding.REBUILD_EVERY = 1000  # the incremental path, as between two rebuilds
    kept: list[Interval] = []
    expected = expected_open = None
    presence: dict[str, int] = {}
    t = 1000.0
    for _ in range(draw(st.integers(1, 24))):
        models = {
            name: _counts(draw, usual[name] if draw(st.integers(0, 5)) else draw(shapes))
            for name in sorted(draw(st.sets(st.sampled_from("ab"))))
        }
        seconds = draw(st.floats(1, 40))
        restart = draw(st.booleans())
        interval = Interval(
            t, t + seconds, models, restarted=restart, busy=bool(models), spend_usd=Decimal("0.1")
        )
        t += seconds
        got = sliding.add(interval)
        expected = interval_window(interval) if expected is None else expected.add(interval)
        for name in models:
            presence[name] = presence.get(name, 0) + 1
        kept.append(interval)
        while kept[0].end <= t - 60:
            expected = expected.remove(kept.pop(0), presence)
        assert got.models == expected.models
        assert (got.seconds, got.busy_seconds, got.restarts, got.spend_usd) == (
            expected.seconds,
            expected.busy_seconds,
            expected.restarts,
            expected.spend_usd,
        )
        closed, open_window = aligned.add_keeping(interval)
        if expected_open is None or closed:
            expected_open = Window(start=open_window.start, end=open_window.end)
        expected_open = expected_open.add(interval)
        assert open_window == expected_open
        assert aligned.open == open_window
    assert expected is not None
    assert sliding.total() == replace(expected, start=kept[0].start, end=kept[-1].end)
