"""A speculating server that proposed nothing is priced like any other (ECONOMICS.md §3b).

On chat prompts at temperature 0.7 the n-gram proposer of the live-vLLM bench found
nothing to draft, at every concurrency, and the server was still ~40% slower than its
control (bench/README.md, "Model check against measurement"). Such a window used to be
`no_drafts`, with no speedup and no verdict: a tax nobody was shown. These pages are one
level of that run (tests/fixtures/vllm-0.32.0/INDEX.txt says how they were recorded).
"""

from __future__ import annotations

import pytest

from recorded_pages import page
from spectax.cli.assess import AssessOptions, assess_pages
from spectax.economics import Assessment

NGRAM = (
    "spec_ngram_chat_t07_c4_zero_drafts_before.txt",
    "spec_ngram_chat_t07_c4_zero_drafts_after.txt",
)
CONTROL = ("nospec_chat_t07_c4_before.txt", "nospec_chat_t07_c4_after.txt")
SECONDS = 89.25  # between the two pages (the bench's data["pages"]["chat t=0.7 c=4"])
USD_PER_HOUR = 2.0
OPTIONS = AssessOptions(seconds=SECONDS, usd_per_hour=USD_PER_HOUR, method="ngram")


def assess(control: tuple[str, str] | None = None) -> Assessment:
    pair = (page(control[0]), page(control[1])) if control else None
    [result] = assess_pages(page(NGRAM[0]), page(NGRAM[1]), OPTIONS, control=pair)
    return result.assessment


def test_the_pages_speculate_and_propose_nothing() -> None:
    a = assess()
    assert a.drafts == 0 and a.draft_tokens == 0 and a.accepted_tokens == 0
    assert a.output_tokens == 13968
    assert a.acceptance_ratio is None  # nothing proposed: no acceptance, not a 0


def test_without_a_control_it_gets_a_speedup_a_verdict_and_a_cost() -> None:
    a = assess()
    assert a.verdict_basis == "default" and a.model_source == "configured"
    assert a.speedup_ratio is not None
    assert a.speedup_low_ratio is not None and a.speedup_high_ratio is not None
    # Nothing drafted can only cost, and the proposer ran every step (h >= h_min > 0): even
    # the band's top is below 1, so without a control it is a tax, as the control says.
    assert a.speedup_low_ratio < a.speedup_high_ratio < 1.0
    assert a.verdict == "tax"
    spend = round(USD_PER_HOUR * SECONDS / 3600, 9)  # priced to the nano-dollar, as stored
    assert a.cost_per_million_output_tokens_usd == pytest.approx(spend / 13968 * 1e6, rel=1e-12)
    assert a.cost_per_million_output_tokens_no_speculation_usd is not None
    assert a.speculation_savings_usd is not None and a.speculation_savings_usd <= 0


def test_with_its_control_it_is_a_measured_tax() -> None:
    a = assess(CONTROL)
    # control TPOT / ours, from the pages' histogram deltas: 3.058 ms / 5.012 ms
    expected = (0.7889036289926299 / 258) / (0.9623092610934325 / 192)
    assert a.speedup_measured_ratio == pytest.approx(expected, rel=1e-9)
    assert a.speedup_measured_ratio < 1.0
    assert a.verdict == "tax" and a.verdict_basis == "measured"
    assert a.speedup_low_ratio == a.speedup_high_ratio == a.speedup_measured_ratio
    spend = round(USD_PER_HOUR * SECONDS / 3600, 9)  # priced to the nano-dollar, as stored
    assert a.speculation_savings_usd == pytest.approx(spend * (expected - 1), rel=1e-9)
