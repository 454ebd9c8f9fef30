"""`spectax assess P1 P2 [P3 ...]`: each two consecutive pages a window, binned by load into
a load curve, and the K schedule that follows (issue 34).

The pages are real recorded vLLM 0.32.0 pages (tests/fixtures/vllm-0.32.0: the ngram
server's four pages, the draft-model server's three), every counter as recorded but one:
each series sets one line per page, vLLM's `vllm:request_prefill_time_seconds_sum`, to put
its windows at chosen loads: a window's load is the time the engine spent on requests
between its two pages (decode and prefill) over its seconds (flooring at 1 request aside).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from recorded_pages import FIXTURES, page, reference_values
from spectax.cli.assess_curve import (
    MONTH_SECONDS,
    CurveSection,
    curve_lines,
    curve_object,
    schedule_lines,
)
from spectax.cli.main import main
from spectax.economics.draft_schedule import draft_schedule
from spectax.economics.k_schedule import k_at_load
from spectax.economics.load_curve import LoadSample, load_curve

MODEL = "tiny-llama"
NGRAM = (
    "spec_ngram_0_before_traffic.txt",
    "spec_ngram_1_after_first_request.txt",
    "spec_ngram_2_mid.txt",
    "spec_ngram_3_after.txt",
)
#: The loads the ngram pages' three windows are put at, in running requests.
NGRAM_LOADS = (1.0, 8.0, 64.0)
DRAFT = ("spec_draft_0_before_traffic.txt", "spec_draft_2_mid.txt", "spec_draft_3_after.txt")
NGRAM_ARGS = ("--method", "ngram", "--seconds", "60", "--usd-per-hour", "3.99")
DRAFT_ARGS = ("--method", "draft_model", "--draft-cost-ratio", "0.3", "--seconds", "60")
PREFILL_TIME = re.compile(
    r"^(vllm:request_prefill_time_seconds_sum\{[^}]*\}) (\S+)$", flags=re.MULTILINE
)


def at_load(
    tmp_path: Path, names: tuple[str, ...], loads: tuple[float, ...], seconds: float = 60.0
) -> list[str]:
    """The recorded pages as files in a series whose windows of `seconds` ran `loads`
    requests on average: each page's prefill time is set so that, with its recorded decode
    time (the inter-token latencies' sum), the time spent on requests since the first page
    is the loads' request-seconds."""
    assert len(loads) == len(names) - 1
    decoded = [
        reference_values(page(name))["vllm:inter_token_latency_seconds_sum"][MODEL]
        for name in names
    ]
    first = float(PREFILL_TIME.search(page(names[0])).group(2))  # type: ignore[union-attr]
    ran = itertools.accumulate((load * seconds for load in loads), initial=0.0)
    paths = []
    for i, (name, total) in enumerate(zip(names, ran, strict=True)):
        prefill = first + total - (decoded[i] - decoded[0])
        text, found = PREFILL_TIME.subn(lambda m, t=prefill: f"{m.group(1)} {t!r}", page(name))
        assert found == 1, name
        path = tmp_path / f"page{i}.txt"
        path.write_text(text)
        paths.append(str(path))
    return paths


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["assess", *args])
    out, err = capsys.readouterr()
    return code, out, err


def as_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, err = run(capsys, *args, "--format", "json")
    assert code == 0, err
    [result] = json.loads(out)
    return dict(result)


def rows(text: str, *header: str) -> list[list[str]]:
    """The rows of the text table whose first columns are headed `header`, each split on
    the gaps of two spaces or more between its columns."""
    lines = text.splitlines()
    start = next(
        i
        for i, line in enumerate(lines)
        if re.split(r"\s{2,}", line.strip())[: len(header)] == list(header)
    )
    found = []
    for line in lines[start + 1 :]:
        if not line.startswith("    "):
            break
        found.append(re.split(r"\s{2,}", line.strip()))
    return found


def test_a_series_bins_each_window_by_its_mean_running_requests(capsys, tmp_path) -> None:
    pages = at_load(tmp_path, NGRAM, NGRAM_LOADS)
    data = as_json(capsys, *pages, *NGRAM_ARGS)
    curve = data["load_curve"]
    assert [w["pages"] for w in curve["windows"]] == [[1, 2], [2, 3], [3, 4]]
    assert [w["concurrency_requests"] for w in curve["windows"]] == list(NGRAM_LOADS)
    assert [b["running_requests"] for b in curve["bins"]] == [1, 8, 64]
    assert [b["label"] for b in curve["bins"]] == ["1-1", "8-15", "64-127"]
    assert [b["time_share_ratio"] for b in curve["bins"]] == pytest.approx([1 / 3] * 3)
    assert all(b["thin"] and b["windows"] == 1 for b in curve["bins"])
    # Defaults' band: uncertain at every load here, so no bin paid and none is a crossover.
    assert curve["crossover_running_requests"] is None and curve["tax_usd"] is None
    code, text, _ = run(capsys, *pages, *NGRAM_ARGS)
    assert code == 0
    table = rows(text, "running requests", "windows")
    assert [r[0] for r in table] == ["1-1", "8-15", "64-127"]
    for row, b in zip(table, curve["bins"], strict=True):
        assert row[1] == "1 (thin)" and row[2] == "33%"
        low, high = b["speedup_low_ratio"], b["speedup_high_ratio"]
        assert row[3] == f"{b['speedup_ratio']:.3f} ({low:.3f} to {high:.3f}, default)"
        assert row[4] == f"{b['acceptance_ratio']:.3f}"
        assert row[6] == f"+${b['speculation_savings_usd']:.4f}"
        assert row[8] == f"{b['draft_tokens_per_step']:.3f}"
    assert "  crossover: none: no bin paid" in text
    # Every load seen keeps K = 4: the list's other K are the model's, so it is not
    # advised, and the advice says why.
    assert [b["speculative_tokens"] for b in data["k_schedule"]["bins"]] == [4, 4, 4]
    [advice] = [line for line in text.splitlines() if line.startswith("  advice: ")]
    assert advice.startswith("  advice: keep the speculative config as it is: every load seen")
    assert advice.endswith(
        " would change K only at batch sizes no window ran at, the model's alone"
    )


def test_each_window_is_assessed_as_its_two_pages_alone(capsys, tmp_path) -> None:
    """A window of the series concludes what `spectax assess` of its two pages does."""
    pages = at_load(tmp_path, NGRAM, NGRAM_LOADS)
    windows = as_json(capsys, *pages, *NGRAM_ARGS)["load_curve"]["windows"]
    for i, window in enumerate(windows):
        alone = as_json(capsys, pages[i], pages[i + 1], *NGRAM_ARGS)
        assert window["verdict"] == alone["verdict"]
        assert window["speedup_ratio"] == alone["speedup_ratio"]
        assert window["concurrency_requests"] == alone["concurrency_requests"]


def test_the_headline_stays_the_first_page_to_the_last(capsys, tmp_path) -> None:
    pages = at_load(tmp_path, NGRAM, NGRAM_LOADS)
    series = as_json(capsys, *pages, *NGRAM_ARGS)
    span = ["--method", "ngram", "--seconds", "180", "--usd-per-hour", "3.99"]
    two = as_json(capsys, pages[0], pages[-1], *span)
    curve_keys = ("load_curve", "k_schedule")
    assert {k: v for k, v in series.items() if k not in curve_keys} == {
        k: v for k, v in two.items() if k not in curve_keys
    }


def test_the_k_schedule_and_its_stake_over_the_span_and_a_month(capsys, tmp_path) -> None:
    """The draft-model server (acceptance 0.31, c = 0.3) at 1 and 128 running requests: K 1
    where it ran 3 at one request and 0 at 128, written as vLLM's list, the dollars at
    stake over the 120 s span and carried on to 30 days."""
    pages = at_load(tmp_path, DRAFT, (1.0, 128.0))
    priced = (*DRAFT_ARGS, "--usd-per-hour", "3.99")
    data = as_json(capsys, *pages, *priced)
    schedule = data["k_schedule"]
    assert [(b["running_requests"], b["speculative_tokens"]) for b in schedule["bins"]] == [
        (1, 1),
        (128, 0),
    ]
    assert schedule["ranges"] == [[1, 1, 1], [2, 1024, 0]]
    config = schedule["speculative_config"]
    assert config["num_speculative_tokens_per_batch_size"] == schedule["ranges"]
    assert schedule["modelled_batches"] == [[2, 127], [256, 1024]]
    assert schedule["thin_bins"] == [1, 128] and schedule["windows"] == 2
    stake = schedule["at_stake_usd"]
    assert stake == pytest.approx(sum(b["at_stake_usd"] for b in schedule["bins"]))
    assert stake > 0
    assert schedule["at_stake_month_usd"] == pytest.approx(stake * MONTH_SECONDS / 120)
    code, text, _ = run(capsys, *pages, *priced)
    assert code == 0
    assert f"  vLLM: --speculative-config '{json.dumps(config)}'" in text
    assert "  K by batch size: 1 at 1, 0 from 2 (up to 1024)" in text
    assert "every load the pages saw keeps the K it ran" not in text
    assert f"at stake: +${stake:.4f} over the 120 s span" in text
    month = schedule["at_stake_month_usd"]
    assert f"+${month:,.2f} over a 30-day month at this rate (an extrapolation" in text
    assert "2 thin (under 3 windows: 1-1, 128-255)" in text
    assert "no window ran there: batches 2-127, 256-1024" in text
    # --max-num-seqs: the list stops at the engine's largest batch.
    data = as_json(capsys, *pages, *priced, "--max-num-seqs", "256")
    assert data["k_schedule"]["ranges"] == [[1, 1, 1], [2, 256, 0]]
    # No price: the curve and the K, no dollars.
    unpriced = as_json(capsys, *pages, *DRAFT_ARGS)["k_schedule"]
    assert unpriced["at_stake_usd"] is None and unpriced["ranges"] == schedule["ranges"]


def test_two_pages_show_one_thin_bin_and_the_schedule_the_model_extends(capsys) -> None:
    pages = (str(FIXTURES / NGRAM[0]), str(FIXTURES / NGRAM[-1]))
    data = as_json(capsys, *pages, *NGRAM_ARGS)
    [only] = data["load_curve"]["bins"]
    assert only["running_requests"] == 1 and only["thin"] and only["time_share_ratio"] == 1
    assert only["speedup_ratio"] == data["speedup_ratio"]
    assert data["k_schedule"]["modelled_batches"] == [[2, 1024]]
    code, text, _ = run(capsys, *pages, *NGRAM_ARGS)
    assert code == 0
    assert "  load curve: 1 window (each two consecutive pages)" in text
    assert [r[0] for r in rows(text, "running requests", "K ran")] == ["1-1 (thin)"]
    assert "1 thin (under 3 windows: 1-1); modelled, no window ran there: batches 2-1024" in text


def test_a_schedule_run_assesses_each_window_at_its_k_and_flags_straddling_bins(
    capsys, tmp_path
) -> None:
    """K 4 up to batch 9, 2 from 10: bin 8-15 holds both sides of the change."""
    pages = at_load(tmp_path, NGRAM, NGRAM_LOADS)
    ranges = [[1, 9, 4], [10, 1024, 2]]
    schedule = ("--schedule", json.dumps(ranges))
    data = as_json(capsys, *pages, *NGRAM_ARGS, *schedule)
    curve = data["load_curve"]
    # The headline, first page to last: the three loads' mean, 24.3 running requests: K = 2,
    # and it ran two K.
    [note] = [n for n in data["notes"] if n.startswith("assessed at K")]
    assert sum(NGRAM_LOADS) / 3 == pytest.approx(24.3333, abs=1e-4)
    assert note.startswith("assessed at K = 2, the K --schedule runs at 24.3333 running requests;")
    assert "the span ran two of its K" in note and data["speculative_tokens"] == 2
    ks = [w["scheduled_speculative_tokens"] for w in curve["windows"]]
    assert ks == [k_at_load(ranges, load) for load in NGRAM_LOADS] == [4, 4, 2]
    # The server recorded ran K = 4 throughout: its drafts at 64 requests are longer than 2.
    assert [w["schedule_boundary"] for w in curve["windows"]] == [False, False, True]
    assert [b["schedule_boundary"] for b in curve["bins"]] == [False, True, False]
    code, text, _ = run(capsys, *pages, *NGRAM_ARGS, *schedule)
    assert code == 0
    table = rows(text, "running requests", "windows")
    assert [r[0] for r in table] == ["1-1", "8-15 (straddles a K change)", "64-127"]
    assert [r[-1] for r in table] == ["4", "4", "2 (1 ran two K)"]
    plain = as_json(capsys, *pages, *NGRAM_ARGS)["load_curve"]
    assert {b["schedule_boundary"] for b in plain["bins"]} == {None}
    assert {w["scheduled_speculative_tokens"] for w in plain["windows"]} == {None}


@pytest.mark.parametrize(
    ("schedule", "problem"),
    [
        ("[[1,4,3],[5,1024,0]", "not JSON"),
        ("[[2,4,3],[5,1024,0]]", "range 1 starts at batch 2; it must start at 1"),
        ("[[1,4,3],[6,1024,0]]", "range 2 starts at batch 6; it must start at 5"),
        ("[[1,4,-1]]", "give last >= first and K >= 0"),
        ("[[1,4,2.5]]", "whole numbers"),
        ("[]", "give at least one"),
    ],
)
def test_a_bad_schedule_is_refused_in_one_line(capsys, schedule, problem) -> None:
    pages = (str(FIXTURES / NGRAM[0]), str(FIXTURES / NGRAM[-1]))
    code, out, err = run(capsys, *pages, *NGRAM_ARGS, "--schedule", schedule)
    assert code == 1 and out == ""
    assert err.startswith("spectax assess: --schedule") and problem in err
    assert len(err.strip().splitlines()) == 1


def test_a_page_out_of_order_in_a_series_is_named(capsys, tmp_path) -> None:
    pages = at_load(tmp_path, NGRAM, NGRAM_LOADS)
    code, out, err = run(capsys, pages[0], pages[2], pages[1], pages[3], *NGRAM_ARGS)
    assert code == 1 and out == ""
    assert err.startswith("spectax assess: pages 2 and 3: AFTER holds fewer output tokens")


def test_an_engine_without_a_per_batch_k_gets_no_vllm_list(capsys) -> None:
    root = FIXTURES.parent / "trtllm-050f80d"
    pages = (str(root / "spec_0_start.txt"), str(root / "spec_1_after.txt"))
    data = as_json(capsys, *pages, "--method", "eagle", "--seconds", "60")
    schedule = data["k_schedule"]
    assert schedule["per_batch"] is False and schedule["speculative_config"] is None
    code, text, _ = run(capsys, *pages, "--method", "eagle", "--seconds", "60")
    assert code == 0 and "--speculative-config" not in text
    assert f"  advice: {schedule['advice']}" in text


def measured(running: float, speedup: float, tokens_per_request_second: float) -> LoadSample:
    """A 5-minute window a control measured at `speedup`, at $3.99 an hour, each of its
    `running` requests given that many output tokens a second."""
    busy_usd = 3.99 * 300 / 3600
    return LoadSample(
        end=running,
        seconds=300.0,
        concurrency=running,
        output_tokens=tokens_per_request_second * running * 300.0,
        plain_busy_seconds=300.0 * speedup,
        assessed_busy_seconds=300.0,
        basis="measured",
        savings_usd=busy_usd * (1 - 1 / speedup),
        busy_usd=busy_usd,
    )


def test_a_crossover_its_tax_and_a_stall_are_said_in_text_and_json() -> None:
    """No recorded series crosses over (two pages' defaults leave the low loads uncertain),
    so the section is fed the curve of measured windows: paying at 4 requests, a tax from 8,
    where the output rate per request collapsed (vLLM issue 49548's 29/12/20 tok/s)."""
    windows = [
        measured(running, speedup, rate)
        for running, speedup, rate in ((4.0, 1.25, 29.0), (8.0, 0.9, 12.0), (16.0, 0.8, 20.0))
        for _ in range(3)
    ]
    curve = load_curve(windows)
    section = CurveSection(
        windows=(),
        curve=curve,
        schedule=draft_schedule(curve, engine="vllm", method="ngram"),
        max_num_seqs=1024,
        priced=True,
        boundaries=None,
    )
    data = curve_object(section)
    assert data["crossover_running_requests"] == 8 and data["stalled_running_requests"] == [8]
    assert data["tax_time_share_ratio"] == pytest.approx(2 / 3)
    tax = sum(w.savings_usd or 0.0 for w in windows[3:])
    assert data["tax_usd"] == pytest.approx(tax) and tax < 0
    text = "\n".join(curve_lines(section))
    assert (
        "  crossover: 8 running requests: speculation was a tax 67% of the time, when 8 or"
        f" more requests ran: -${-tax:.4f}"
    ) in text
    assert [r[0] for r in rows(text, "running requests", "windows")] == [
        "4-7",
        "8-15 (stalled)",
        "16-31",
    ]
    assert "  stalled: 8-15: output tokens per second per request under 0.7" in text
    assert text.startswith("  load curve: 9 windows (each two consecutive pages)")
    assert "\n".join(schedule_lines(section)).count("  K schedule:") == 1


def test_the_same_url_given_n_times_is_fetched_n_times_seconds_apart(capsys, tmp_path) -> None:
    """A loopback server hands out the series' pages in turn, one per GET."""
    served = [Path(p).read_text() for p in at_load(tmp_path, NGRAM, NGRAM_LOADS)]
    times: list[float] = []

    class Pages(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            times.append(time.monotonic())
            body = served[min(len(times), len(served)) - 1].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        urls = [url] * len(served)
        data = as_json(capsys, *urls, "--method", "ngram", "--seconds", "0.2")
        code, _, err = run(capsys, *urls, "--method", "ngram")
    finally:
        server.shutdown()
        server.server_close()
    assert len(times) == len(served)
    assert min(b - a for a, b in itertools.pairwise(times)) >= 0.2
    windows = data["load_curve"]["windows"]
    # the pages' request-seconds are 60 s windows' at NGRAM_LOADS, here over 0.2 s each
    assert [w["concurrency_requests"] for w in windows] == pytest.approx(
        [load * 60 / 0.2 for load in NGRAM_LOADS]
    )
    assert [w["seconds"] for w in windows] == pytest.approx([0.2] * 3)
    assert code == 1 and "give --seconds to fetch the same URL 4 times" in err


def test_a_restart_within_the_series_is_said_of_the_headline(capsys) -> None:
    """The ngram server's pages, then its restarted process's: the headline (first page to
    last) counts only the new process, the curve every two pages, and a note says so."""
    names = (
        *NGRAM[::2],
        NGRAM[3],
        "spec_ngram_restart_2_mid.txt",
        "spec_ngram_restart_3_after.txt",
    )
    pages = [str(FIXTURES / name) for name in names]
    data = as_json(capsys, *pages, "--method", "ngram", "--seconds", "60")
    last = reference_values(page(names[-1]))["vllm:generation_tokens_total"][MODEL]
    assert data["restarted"] is True and data["output_tokens"] == last
    assert len(data["load_curve"]["windows"]) == len(names) - 1
    assert any(n.startswith("the server restarted between the first and") for n in data["notes"])
    two = as_json(capsys, pages[0], pages[-1], "--method", "ngram", "--seconds", "240")
    assert not any(n.startswith("the server restarted between") for n in two["notes"])
