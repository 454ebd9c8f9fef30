"""An endpoint running a K schedule (`speculation.schedule`, vLLM's
num_speculative_tokens_per_batch_size) has each window assessed at the K in force for its
load (issue 34 item 3): windows built from the recorded vLLM 0.32.0 ngram pages (K = 4)."""

from __future__ import annotations

from dataclasses import replace

from builders import NGRAM_PAGES, monitor_of, ngram_settings
from recorded_pages import page, reference_values
from spectax.economics import Money, Parameters, Traffic, assess_model
from spectax.economics.k_schedule import k_at_load, window_straddles
from spectax.status.history import StatusHistory
from spectax.status.page import render_status_page

MODEL = "tiny-llama"
#: K = 4 up to batch 7, 2 from 8 to 47, off from 48: a boundary at 8 and one at 48.
SCHEDULE = ((1, 7, 4), (8, 47, 2), (48, 1024, 0))
MONEY = Money(seconds=300.0, spend_usd=0.3, busy_spend_usd=0.3)


def recorded_traffic(before: str, after: str, concurrency: float) -> Traffic:
    """The counter deltas between two recorded pages, as a window at `concurrency`."""
    a, b = reference_values(page(before)), reference_values(page(after))

    def delta(name: str, key: str = MODEL) -> float:
        return b[name][key] - a[name][key]

    return Traffic(
        output_tokens=delta("vllm:generation_tokens_total"),
        prompt_tokens=delta("vllm:prompt_tokens_total"),
        concurrency=concurrency,
        drafts=delta("vllm:spec_decode_num_drafts_total"),
        draft_tokens=delta("vllm:spec_decode_num_draft_tokens_total"),
        accepted_tokens=delta("vllm:spec_decode_num_accepted_tokens_total"),
        accepted_per_position=tuple(
            delta("vllm:spec_decode_num_accepted_tokens_per_pos_total", f"{MODEL}/{p}")
            for p in range(4)
        ),
    )


def ngram_at(concurrency: float) -> Traffic:
    """The recorded ngram run (K = 4: 216 drafts, 740 drafted, 564 accepted)."""
    return recorded_traffic(
        "spec_ngram_1_after_first_request.txt", "spec_ngram_3_after.txt", concurrency
    )


def at_k2(traffic: Traffic) -> Traffic:
    """The same run as K = 2 drafts it: positions 2 and 3 never drafted, 2 tokens a draft."""
    drafts = traffic.drafts or 0.0
    kept = traffic.accepted_per_position[:2]
    return replace(
        traffic,
        draft_tokens=2 * drafts,
        accepted_tokens=sum(kept),
        accepted_per_position=(*kept, 0.0, 0.0),
    )


def test_the_endpoints_schedule_reaches_its_assessment() -> None:
    speculation = {"method": "ngram", "schedule": [list(r) for r in SCHEDULE]}
    monitor = monitor_of(ngram_settings(speculation=speculation))
    assert monitor.parameters().schedule == SCHEDULE
    assert monitor_of(ngram_settings()).parameters().schedule is None


def test_a_monitor_assesses_its_recorded_window_at_the_schedules_k() -> None:
    """The recorded ngram pages fed to a monitor whose schedule runs K = 2 at their load
    (under one running request) and 0 from batch 8: the window is assessed at K = 2, and its
    drafts of 3.4 tokens (the server ran K = 4) mark it as having run two K."""
    speculation = {"method": "ngram", "schedule": [[1, 7, 2], [8, 1024, 0]]}
    monitor = monitor_of(ngram_settings(speculation=speculation))
    monitor.observe_page(0, page(NGRAM_PAGES[0]), 0.01)
    monitor.observe_page(200, page(NGRAM_PAGES[2]), 0.01)
    observed = monitor.observe_page(400, page(NGRAM_PAGES[3]), 0.01)
    assert observed is not None and observed.closed
    found = observed.closed[0].assessments[MODEL]
    assert found.concurrency_requests < 8
    assert (found.scheduled_speculative_tokens, found.speculative_tokens) == (2, 2)
    assert found.schedule_boundary and found.verdict != "no_speculation"
    html = render_status_page({"ngram": monitor.snapshot}, StatusHistory(step_seconds=60.0), 400)
    assert "(the schedule's K here: 2; ran two K, its figures mix them)" in html


def test_windows_either_side_of_a_boundary_are_assessed_at_their_own_k() -> None:
    params = Parameters(schedule=SCHEDULE)
    low = assess_model(MODEL, ngram_at(4.0), params, MONEY)
    high = assess_model(MODEL, at_k2(ngram_at(16.0)), params, MONEY)
    assert (low.scheduled_speculative_tokens, low.speculative_tokens) == (4, 4)
    assert len(low.position_acceptance_ratio) == 4
    assert (high.scheduled_speculative_tokens, high.speculative_tokens) == (2, 2)
    # Positions 2 and 3 were not drafted at 16 requests: not a K = 4 that accepted nothing.
    assert len(high.position_acceptance_ratio) == 2
    assert high.recommended_speculative_tokens is not None
    assert high.recommended_speculative_tokens <= 2
    assert not low.schedule_boundary and not high.schedule_boundary
    # Without the schedule the K = 2 window is taken for a K = 4 one.
    unscheduled = assess_model(MODEL, at_k2(ngram_at(16.0)), Parameters(), MONEY)
    assert unscheduled.speculative_tokens == 4
    assert unscheduled.scheduled_speculative_tokens is None


def test_a_window_where_the_schedule_turns_speculation_off_is_not_a_tax() -> None:
    # Recorded: output moved, drafts did not (vLLM 0.32.0, ngram, chat t=0.7, 4 clients).
    plain = recorded_traffic(
        "spec_ngram_chat_t07_c4_zero_drafts_before.txt",
        "spec_ngram_chat_t07_c4_zero_drafts_after.txt",
        64.0,
    )
    unscheduled = assess_model(MODEL, plain, Parameters(), MONEY, measured_speedup=0.8)
    assert unscheduled.verdict == "tax"
    found = assess_model(MODEL, plain, Parameters(schedule=SCHEDULE), MONEY, measured_speedup=0.8)
    assert found.scheduled_speculative_tokens == 0
    assert found.verdict == "no_speculation"
    assert found.speedup_in_force is None and found.speculation_savings_usd is None
    assert found.output_tokens == plain.output_tokens


def test_a_window_that_ran_two_ks_says_so() -> None:
    params = Parameters(schedule=SCHEDULE)
    # A mean of 7.5: its batches were 7 (K = 4) and 8 (K = 2).
    across = assess_model(MODEL, at_k2(ngram_at(7.5)), params, MONEY)
    assert across.scheduled_speculative_tokens == 4 and across.schedule_boundary
    # A mean of 16 in the K = 2 range, with drafts of 3.4 tokens: it also ran K = 4.
    longer = assess_model(MODEL, ngram_at(16.0), params, MONEY)
    assert longer.speculative_tokens == 2 and longer.schedule_boundary
    # Its advice is the K = 2 run's own: among K <= 2, drafts of at most 2 tokens.
    own = assess_model(MODEL, at_k2(ngram_at(16.0)), params, MONEY)
    assert longer.recommended_speculative_tokens == own.recommended_speculative_tokens
    # A mean of 64 where K is 0, yet it drafted: it ran the K = 2 range too, and is judged.
    drafted = assess_model(MODEL, ngram_at(64.0), params, MONEY)
    assert drafted.schedule_boundary and drafted.verdict != "no_speculation"


def test_the_k_in_force_is_the_range_holding_the_means_batch() -> None:
    assert [k_at_load(SCHEDULE, m) for m in (0.0, 0.5, 7.99, 8.0, 47.9, 48.0, 5000.0)] == [
        4,
        4,
        4,
        2,
        2,
        0,
        0,
    ]
    assert not window_straddles(SCHEDULE, 8.5, draft_tokens=20.0, drafts=10.0)
    assert window_straddles(SCHEDULE, 47.5, draft_tokens=0.0, drafts=0.0)
    assert window_straddles(SCHEDULE, 50.0, draft_tokens=2.0, drafts=1.0)
