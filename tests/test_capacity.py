"""What a draft model costs in capacity (issue 20), on recorded vLLM pages: the draft-model
server and the plain one served the same tiny Llama with the same 1 GiB KV budget."""

from __future__ import annotations

import dataclasses

import pytest

from builders import monitor_of, queued
from recorded_pages import page
from report_history import MAY, fill_golden, golden_settings, report_of
from spectax.config import validate
from spectax.economics import capacity_of, window_capacities
from spectax.endpoint import EndpointMonitor
from spectax.engines import get_parser
from spectax.pipeline.counts import Counts
from spectax.pipeline.intervals import interval_between
from spectax.pipeline.packing import pack_counts, unpack_counts
from spectax.pipeline.windows import SlidingWindow, interval_window
from spectax.report.capacity_figures import CapacityRow
from spectax.report.capacity_table import HEADERS, capacity_table
from spectax.report.charts import charts
from spectax.report.render import render
from spectax.store import Store
from spectax.store.rows import window_from_rows

parse = get_parser("vllm")
M = "tiny-llama"
GIB = 2**30


def window_of(before: str, after: str, seconds: float = 60.0):
    interval = interval_between(parse(page(before)), parse(page(after)), 0.0, seconds)
    return interval_window(interval)


def test_draft_blocks_measured_against_the_control() -> None:
    draft = window_of("spec_draft_2_mid.txt", "spec_draft_3_after.txt")
    plain = window_of("nospec_2_mid.txt", "nospec_3_after.txt")
    capacity = window_capacities(draft, plain)[M]
    assert capacity.kv_cache_blocks == 5461
    assert capacity.draft_blocks == 8192 - 5461
    assert capacity.draft_blocks_basis == "measured"
    assert capacity.draft_kv_share_ratio == pytest.approx((8192 - 5461) / 8192)
    counts = draft.models[M]
    context = (counts.prompt_tokens + counts.generation_tokens) / counts.requests_finished
    assert capacity.context_tokens == pytest.approx(context)
    per_request = max(1.0, context / 128 + 0.5)  # each last block half full, at least one
    assert capacity.blocks_per_request == pytest.approx(per_request)
    assert capacity.concurrency_capacity_requests == pytest.approx(5461 / per_request)
    assert capacity.concurrency_capacity_no_draft_requests == pytest.approx(8192 / per_request)


def test_draft_blocks_from_configured_weight_bytes_without_a_control() -> None:
    draft = window_of("spec_draft_2_mid.txt", "spec_draft_3_after.txt")
    capacity = window_capacities(
        draft, None, draft_weight_bytes=GIB // 8, gpu_memory_bytes=8 * GIB
    )[M]
    # The engine states 1 GiB over 5461 blocks: an eighth of that is 5461 / 8 blocks.
    assert capacity.draft_blocks == pytest.approx(5461 / 8)
    assert capacity.draft_blocks_basis == "configured"
    assert capacity.draft_gpu_memory_ratio == 1 / 64


def test_no_draft_cost_without_speculation_or_without_a_basis() -> None:
    plain = window_of("nospec_2_mid.txt", "nospec_3_after.txt")
    capacity = window_capacities(plain, None, draft_weight_bytes=GIB)[M]
    assert capacity.draft_blocks is capacity.draft_blocks_basis is None
    assert capacity.concurrency_capacity_no_draft_requests is None
    assert capacity.kv_cache_blocks == 8192
    unstated = Counts(kv_cache_blocks=100.0, kv_block_size=16.0, requests_finished=1.0)
    capacity = capacity_of(unstated, 60.0, speculating=True, draft_weight_bytes=GIB)
    assert capacity.draft_blocks is None  # no control, and the engine states no KV bytes


def test_waiting_requests_and_usage_are_time_averages() -> None:
    idle = parse(page("spec_ngram_inflight_after.txt"))
    queued = parse(page("spec_ngram_inflight_running_waiting.txt"))
    interval = interval_between(idle, queued, 0.0, 10.0)
    capacity = capacity_of(interval.models[M], interval.seconds)
    usage = queued.models[M].kv_cache_usage
    before = idle.models[M]
    assert capacity.requests_waiting == pytest.approx((before.requests_waiting + 4.0) / 2)
    assert capacity.kv_usage_ratio == pytest.approx(((before.kv_cache_usage or 0) + usage) / 2)
    assert capacity.kv_headroom_ratio == pytest.approx(1 - capacity.kv_usage_ratio)


def test_preemptions_per_hour_and_no_usage_when_the_engine_lacks_it() -> None:
    counts = Counts(preemptions=3.0, waiting_seconds=120.0)
    capacity = capacity_of(counts, 60.0)
    assert capacity.preemptions_per_hour == 180.0
    assert capacity.requests_waiting == 2.0
    assert capacity.kv_usage_ratio is capacity.kv_headroom_ratio is None


def test_sliding_window_keeps_the_latest_kv_settings_and_packs_them() -> None:
    pages = ["spec_draft_2_mid.txt", "spec_draft_3_after.txt"]
    samples = [parse(page(p)) for p in pages]
    sliding = SlidingWindow(length=30.0)
    sliding.add(interval_between(samples[0], samples[1], 0.0, 15.0))
    sliding.add(interval_between(samples[1], samples[1], 15.0, 30.0))
    sliding.add(interval_between(samples[1], samples[1], 30.0, 45.0))  # the first one leaves
    total = sliding.total()
    assert total is not None
    counts = total.models[M]
    assert (counts.kv_cache_blocks, counts.kv_block_size, counts.kv_cache_bytes) == (
        5461,
        128,
        GIB,
    )
    assert unpack_counts(pack_counts(counts)) == counts


def monitor(control=None) -> EndpointMonitor:
    settings = validate(
        {
            "window": "1m",
            "endpoints": [
                {
                    "name": "e",
                    "url": "http://h:1",
                    "gpu_memory_bytes": 8 * GIB,
                    "speculation": {
                        "method": "draft_model",
                        "draft_cost_ratio": 0.1,
                        "draft_weight_bytes": GIB // 8,
                    },
                }
            ],
        }
    )
    return monitor_of(settings, 60.0, control_window=control)  # unpriced


def test_the_snapshot_measures_the_draft_against_a_full_control_window() -> None:
    plain = window_of("nospec_2_mid.txt", "nospec_3_after.txt")
    m = monitor(control=lambda: plain)
    m.observe_page(0, page("spec_draft_2_mid.txt"), 0.01)
    m.observe_page(60, page("spec_draft_3_after.txt"), 0.01)
    capacity = m.snapshot.capacities[M]
    assert (capacity.draft_blocks, capacity.draft_blocks_basis) == (8192 - 5461, "measured")
    held = capacity.concurrency_capacity_requests
    without = capacity.concurrency_capacity_no_draft_requests
    assert held is not None and without is not None
    assert without / held == pytest.approx(8192 / 5461)  # as the live tier checks it
    alone = monitor()  # no control: from the configured weight bytes
    alone.observe_page(0, page("spec_draft_2_mid.txt"), 0.01)
    alone.observe_page(60, page("spec_draft_3_after.txt"), 0.01)
    capacity = alone.snapshot.capacities[M]
    assert (capacity.draft_blocks, capacity.draft_blocks_basis) == (5461 / 8, "configured")


@pytest.fixture
async def store(database_url: str):
    store = await Store.open(database_url)
    yield store
    await store.close()


async def test_kv_cache_is_stored_with_the_window_and_rolled_up(store) -> None:
    m = monitor()
    m.observe_page(0, page("spec_ngram_inflight_after.txt"), 0.01)
    m.observe_page(60, page("spec_ngram_inflight_running_waiting.txt"), 0.01)
    write = queued(m.observe_page(120, page("spec_ngram_inflight_running_waiting.txt"), 0.01))
    assert write is not None
    await store.save(write.endpoint, write.rows, write.cursor)
    (row,) = [r for r in await store.window_rows("e") if r.model]
    assert (row.kv_cache_blocks, row.kv_block_size, row.kv_cache_bytes) == (8192, 128, GIB)
    assert row.waiting_seconds == pytest.approx(4.0 / 2 * 60)
    assert row.kv_usage_seconds is not None and row.kv_usage_seconds > 0
    await store.rollup()
    (hour,) = [r for r in await store.rows("hour") if r.model]
    assert (hour.kv_cache_blocks, hour.waiting_seconds) == (8192, row.waiting_seconds)
    assert hour.kv_usage_seconds == pytest.approx(row.kv_usage_seconds)
    window = window_from_rows([row])  # read back: a restart reads only what the calibration does
    assert window.models[M].kv_cache_blocks == 8192


async def test_the_reports_capacity_section_from_the_stored_sums(tmp_path) -> None:
    """The golden month (tests/test_report.py): creative speculates against its control
    creative-plain, coder's engine states its KV bytes, the others stored no KV cache."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'golden.sqlite'}"
    await fill_golden(url)
    report = await report_of(url, MAY, golden_settings(url))
    rows = {r.endpoint: r for r in report.capacity}
    assert set(rows) == {"coder", "creative", "creative-plain"}
    per_request = (2 + 1) * 200 / 16 + 0.5  # prompt 2x + output x tokens, x/200 requests
    creative, control = rows["creative"].capacity, rows["creative-plain"].capacity
    assert (creative.draft_blocks, creative.draft_blocks_basis) == (8000 - 6000, "measured")
    assert creative.draft_kv_share_ratio == pytest.approx(2000 / 8000)
    assert creative.concurrency_capacity_requests == pytest.approx(6000 / per_request)
    assert creative.concurrency_capacity_no_draft_requests == pytest.approx(8000 / per_request)
    assert creative.kv_headroom_ratio == pytest.approx(0.15)
    assert (creative.requests_waiting, control.requests_waiting) == pytest.approx((2.0, 0.5))
    assert rows["creative"].control_capacity == control
    assert control.draft_blocks is None and not rows["creative-plain"].speculating
    coder = rows["coder"].capacity
    # 400 MB of draft weights over 20 GB / 10,000 blocks: 200 blocks.
    assert (coder.draft_blocks, coder.draft_blocks_basis) == (pytest.approx(200), "configured")
    assert coder.draft_gpu_memory_ratio == pytest.approx(400e6 / 80e9)
    text = render(report, "md")
    assert "## Capacity: the KV cache speculation takes" in text
    row = "| creative | served-model | 6,000 | 2,000 (25.0%) | measured against creative-plain |"
    assert row in text
    assert "Capacity, not money: nothing in this table is added to the spend" in text
    (chart,) = [c for c in charts(report) if c.key == "capacity"]
    assert chart.svg is not None  # the speculating endpoints with a basis, named with it
    assert "creative (measured)" in chart.svg and "coder (configured)" in chart.svg
    assert "creative-plain" not in chart.svg  # no draft: nothing to give back


def held_at(context_tokens: float) -> float:
    """Requests an 8,192-block cache of 16-token blocks holds at a mean context, one request
    finished (the mean is its tokens)."""
    counts = Counts(
        kv_cache_blocks=8192.0,
        kv_block_size=16.0,
        requests_finished=1.0,
        prompt_tokens=context_tokens,
        generation_tokens=0.0,
    )
    held = capacity_of(counts, 60.0).concurrency_capacity_requests
    assert held is not None
    return held


@pytest.mark.parametrize("blocks", [1, 2, 30])
def test_requests_held_move_smoothly_when_the_mean_context_crosses_a_block(blocks: int) -> None:
    """One token more of mean context across a block's end (16 -> 17 tokens): rounding the
    mean up to whole blocks halved the requests held (8,192 -> 4,096); the mean's blocks as
    a fraction, each last block half full, moves them by a token's worth."""
    edge = 16.0 * blocks
    below, above = held_at(edge), held_at(edge + 1)
    assert above < below  # a longer context holds fewer
    assert below / above < 1 + 1.5 / (blocks + 0.5) / 16  # one token of 16 per block
    # Between the bounds of the true mean of ceil(tokens / 16): L/16 .. L/16 + 1, at least 1.
    for context in (edge, edge + 1, edge + 8):
        per_request = 8192 / held_at(context)
        assert max(1.0, context / 16) <= per_request < context / 16 + 1


def test_the_report_shows_whole_requests_floored() -> None:
    """2,184.8 requests is 2,184 whole ones held at once: floored, never rounded up."""
    counts = Counts(
        kv_cache_blocks=5462.0,
        kv_block_size=16.0,
        requests_finished=1.0,
        prompt_tokens=32.0,  # 32 / 16 + 1/2 = 2.5 blocks: 5,462 / 2.5 = 2,184.8
        generation_tokens=0.0,
    )
    capacity = capacity_of(
        counts, 60.0, speculating=True, control=dataclasses.replace(counts, kv_cache_blocks=8194.0)
    )
    assert capacity.concurrency_capacity_requests == pytest.approx(2184.8)
    assert capacity.concurrency_capacity_no_draft_requests == pytest.approx(3277.6)
    row = CapacityRow("e", M, capacity, True, "plain")
    cells = dict(zip(HEADERS, capacity_table([row]).rows[0], strict=True))
    assert (cells["Holds (requests)"], cells["Without draft"]) == ("2,184", "3,277")


def test_a_control_with_fewer_spare_blocks_than_the_drafts_weights_is_not_a_measure() -> None:
    """The demo showed "954 blocks (lower bound)", then "0 blocks, measured": below its own
    lower bound. The weights alone take the lower bound's blocks; a control with fewer spare
    ones is sized otherwise (another GPU or gpu_memory_utilization): the lower bound holds."""
    draft = window_of("spec_draft_2_mid.txt", "spec_draft_3_after.txt")
    twin = window_of("spec_draft_2_mid.txt", "spec_draft_3_after.txt")  # the same 5461 blocks
    sized = {"draft_weight_bytes": GIB // 8, "gpu_memory_bytes": 8 * GIB}
    held = window_capacities(draft, twin, **sized)[M]
    assert held.draft_blocks == pytest.approx(5461 / 8) and held.draft_blocks_basis == "configured"
    assert held.control_blocks_disagree
    # A control that has at least that many more blocks measures the draft, its own KV
    # cache included: above the lower bound.
    plain = window_of("nospec_2_mid.txt", "nospec_3_after.txt")  # 8192 blocks
    measured = window_capacities(draft, plain, **sized)[M]
    assert (measured.draft_blocks, measured.draft_blocks_basis) == (8192 - 5461, "measured")
    assert not measured.control_blocks_disagree
