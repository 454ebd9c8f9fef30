"""A real vLLM server running a K schedule, as recorded (tests/fixtures/vllm-0.32.0-schedule/).

The pages come from the live schedule tier (tests/test_live_vllm_schedule.py): an n-gram
server with `num_speculative_tokens_per_batch_size` = [[1, 2, 4], [3, 8, 0]], driven at one
client for two 15 s windows and at twelve (the engine running 8) for two more; INDEX.txt
there says how. Here, without vLLM: spectax's parser reads what the server did exactly as
prometheus_client does, and `spectax assess` over the pages sees K fall with load, assesses
each window at the K in force and writes the schedule that follows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spectax.cli.main import main
from spectax.engines import get_parser
from spectax.pipeline.intervals import interval_between

FIXTURES = Path(__file__).parent / "fixtures" / "vllm-0.32.0-schedule"
MODEL = "tiny-llama"
SCHEDULE = "[[1, 2, 4], [3, 8, 0]]"
#: The pages in the order they were read, 5 s apart: each level's edge, then 5 s and 10 s in.
SERIES = [
    name
    for level in range(4)
    for name in (
        f"schedule_edge_{level}.txt",
        f"schedule_level_{level}_at_5s.txt",
        f"schedule_level_{level}_at_10s.txt",
    )
] + ["schedule_edge_4.txt"]
ONE_CLIENT, TWELVE_CLIENTS = (0, 1), (2, 3)


def text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def level_counts(level: int) -> Any:
    """Level `level`'s counts from edge to edge, by spectax's own parser."""
    parse = get_parser("vllm")
    before, after = (
        parse(text(f"schedule_edge_{level}.txt")),
        parse(text(f"schedule_edge_{level + 1}.txt")),
    )
    return interval_between(before, after, 0.0, 15.0).models[MODEL]


def per_step(counts: Any) -> float:
    return float(counts.draft_tokens / (counts.generation_tokens - counts.accepted_tokens))


def test_the_server_drafted_every_position_at_one_request_and_almost_none_at_eight() -> None:
    for level in ONE_CLIENT:
        counts = level_counts(level)
        assert per_step(counts) > 3.0  # K = 4 at batch 1; n-gram matches are sometimes short
        assert len(counts.accepted_per_position) == 4 and min(counts.accepted_per_position) > 0
    for level in TWELVE_CLIENTS:
        counts = level_counts(level)
        # K = 0 from 3 running requests: what drafted is the ramps, where the batch dipped.
        assert per_step(counts) < 0.1
        assert counts.generation_tokens > 10_000


def assess_series(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    args = [str(FIXTURES / name) for name in SERIES]
    options = ["--seconds", "5", "--method", "ngram", "--usd-per-hour", "2"]
    code = main(["assess", *args, *options, "--schedule", SCHEDULE, "--max-num-seqs", "8",
                 "--format", "json"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    [result] = json.loads(out)
    return dict(result)


def test_assess_sees_k_fall_with_load_on_the_recorded_series(capsys) -> None:
    curve = assess_series(capsys)["load_curve"]
    by_bin = {b["running_requests"]: b for b in curve["bins"]}
    # The pages 5 s apart, each window's load the larger of the gauge's and the time vLLM
    # spent on requests in it: one request's windows in bin 1 (0.5-1.0 running, by the
    # time spent: the gauge read 0 on three of the eight pages taken mid-traffic,
    # test_the_running_gauge_missed_what_ran), the engine's 8 in 4-7 (4.9-7.5: the ramps
    # and the quiet tails in it) and 8-15 (both pages read 8).
    assert sorted(by_bin) == [1, 4, 8]
    assert by_bin[1]["draft_tokens_per_step"] > 1.0
    for edge in (4, 8):
        assert by_bin[edge]["draft_tokens_per_step"] < 0.05 * by_bin[1]["draft_tokens_per_step"]
    # Each window is assessed at the K the schedule runs at its mean load.
    for window in curve["windows"]:
        running = window["concurrency_requests"]
        assert window["scheduled_speculative_tokens"] == (4 if running < 3 else 0), window


def test_the_running_gauge_missed_what_ran() -> None:
    """Why a window's load is the time vLLM spent on its requests, not its running gauge: on
    these pages, read mid-traffic, the gauge said no request ran while the engine had run
    its 8 (level 2 at 5 s: 7.5 on average in the 5 s before) and while one client's requests
    ran back to back (levels 0 and 1 at 5 s)."""
    parse = get_parser("vllm")
    pages = [parse(text(name)) for name in SERIES]
    missed = []
    for before, after, name in zip(pages, pages[1:], SERIES[1:], strict=False):
        assert after.models[MODEL].prefill_seconds is not None
        ran = interval_between(before, after, 0.0, 5.0).models[MODEL].running_seconds / 5.0
        if "_at_" in name and after.models[MODEL].requests_running == 0 and ran > 0.9:
            missed.append((name, round(ran, 1)))
    assert missed == [
        ("schedule_level_0_at_5s.txt", 1.0),
        ("schedule_level_1_at_5s.txt", 0.9),
        ("schedule_level_2_at_5s.txt", 7.5),
    ], missed


def test_assess_writes_the_schedule_that_follows_for_vllm(capsys) -> None:
    schedule = assess_series(capsys)["k_schedule"]
    assert schedule["max_num_seqs"] == 8 and schedule["per_batch"]
    ranges = schedule["ranges"]
    # K 4 where one request ran, 0 where eight ran, covering batches 1 to 8 exactly.
    assert ranges[0][:1] == [1] and ranges[0][2] == 4
    assert ranges[-1][1:] == [8, 0] and ranges[-1][0] <= 4
    config = schedule["speculative_config"]
    assert config["num_speculative_tokens"] == 4
    assert config["num_speculative_tokens_per_batch_size"] == ranges
