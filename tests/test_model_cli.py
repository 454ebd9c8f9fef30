"""`spectax model predict|fit`: the what-if planner and the sweep fitter (ECONOMICS.md §3b)."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import math
import random
import time
from pathlib import Path
from typing import Any

import pytest

from spectax.cli.main import main
from spectax.economics.formulas import speedup_per_step
from spectax.economics.sweep import SweepRow, row_speedup
from spectax.store import Store

BENCH = Path(__file__).parent / "fixtures" / "vllm-bench"
LEVELS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["model", *args])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, err = run(capsys, *args, "--format", "json")
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


# ---------------------------------------------------------------- predict


def test_predict_reproduces_the_worked_check_of_3b(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(
        capsys,
        "predict",
        *("--acceptance-length", "3.2", "--num-speculative-tokens", "3"),
        *("--draft-cost-ratio", "0.05", "--ridge-batch", "200", "--step-overhead-ratio", "0.5"),
        *("--concurrency", "2,16,64"),
    )
    speedups = [row["speedup_ratio"] for row in result["rows"]]
    assert speedups == pytest.approx([1.910730, 1.743693, 1.418402], abs=1e-6)
    assert [row["verdict"] for row in result["rows"]] == ["pays", "pays", "pays"]
    assert [row["concurrency"] for row in result["rows"]] == [2, 16, 64]


def test_predict_crossover_is_where_the_speedup_crosses_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["--acceptance-length", "2.6", "--num-speculative-tokens", "4", "--ridge-batch", "64"]
    args += ["--step-overhead-ratio", "0.4", "--method", "eagle3"]
    first = run_json(capsys, "predict", *args, "--concurrency", "1")
    x = first["crossover_concurrency_requests"]
    assert first["crossover"] == "at" and 1 < x < 512
    around = run_json(capsys, "predict", *args, "--concurrency", f"{x},{x * 0.9},{x * 1.1}")
    at, below, above = around["rows"]
    assert at["speedup_ratio"] == pytest.approx(1.0, abs=1e-9)
    assert (below["verdict"], above["verdict"]) == ("pays", "tax")
    # Above the crossover the recommendation turns speculation off, with vLLM's own key.
    config = around["speculative_config"]
    assert config["method"] == "eagle3" and config["num_speculative_tokens"] == 4
    schedule = config["num_speculative_tokens_per_batch_size"]
    # The last range runs to the engine's largest batch (vLLM's default max_num_seqs), not
    # to the largest --concurrency asked: every batch says its K.
    assert schedule == [[1, math.floor(x), 4], [math.floor(x) + 1, 1024, 0]]


def test_predict_finds_the_best_k_per_concurrency_and_its_vllm_schedule(
    capsys: pytest.CaptureFixture[str],
) -> None:
    p = [0.8, 0.6, 0.4, 0.25, 0.1]
    bstar, h, c = 64.0, 0.5, 0.05
    result = run_json(
        capsys,
        "predict",
        *("--position-acceptance", ",".join(map(str, p)), "--num-speculative-tokens", "3"),
        *("--ridge-batch", str(bstar), "--step-overhead-ratio", str(h), "--method", "eagle"),
        *("--concurrency", "1,4,16,64,128"),
    )
    assert result["acceptance_length"] == pytest.approx(1 + 0.8 + 0.6 + 0.4)
    for row in result["rows"]:
        b = row["concurrency"]
        brute = [speedup_per_step(1 + sum(p[:k]), k, b, bstar, c, h) for k in range(len(p) + 1)]
        assert row["best_speedup_ratio"] == pytest.approx(max(brute))
        assert row["best_num_speculative_tokens"] == brute.index(max(brute))
    best = [row["best_num_speculative_tokens"] for row in result["rows"]]
    assert best[0] > 3 and best[-1] == 0  # more drafts at low load, none when saturated
    schedule = result["speculative_config"]["num_speculative_tokens_per_batch_size"]
    # vLLM's rules (vllm/v1/spec_decode/dynamic/utils.py): inclusive ranges from 1, in
    # order, without gaps here, each K capped by num_speculative_tokens.
    assert schedule[0][0] == 1 and schedule[-1][1] == 1024  # max_num_seqs, vLLM's default
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(schedule))
    assert max(k for _, _, k in schedule) == result["speculative_config"]["num_speculative_tokens"]
    by_batch = {b: k for first, last, k in schedule for b in range(first, last + 1)}
    assert [by_batch[b] for b in (1, 4, 16, 64, 128)] == best


def test_predict_says_to_turn_speculation_off_when_it_never_pays(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["predict", "--acceptance-length", "1.1", "--num-speculative-tokens", "4"]
    args += ["--ridge-batch", "32", "--step-overhead-ratio", "1", "--concurrency", "1,8"]
    result = run_json(capsys, *args)
    assert result["crossover"] == "never_pays" and result["crossover_concurrency_requests"] is None
    assert result["speculative_config"] == {}
    code, out, _ = run(capsys, *args)
    assert code == 0 and "turn speculation off" in out


H_ZERO = ["--step-overhead-ratio", "0"]
EAGLE_H = ["--method", "eagle", "--step-overhead-ratio", "0.005"]
# A drafter an eighth of the target reads an eighth of its weights on every drafting pass:
# c is at least 0.125 (its weight reads are priced per draft token, in c, not in h).
DRAFT_C = ["--method", "draft_model", "--draft-params", "1e9", "--target-params", "8e9"]
DRAFT_C += ["--draft-cost-ratio", "0.05"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--num-speculative-tokens", "3"], "--acceptance-length"),
        (["--acceptance-length", "2"], "--num-speculative-tokens"),
        (["--acceptance-length", "5", "--num-speculative-tokens", "3"], "tau"),
        (["--position-acceptance", "0.5,0.3", "--num-speculative-tokens", "3"], "only 2"),
        (
            [
                "--acceptance-length",
                "2",
                "--num-speculative-tokens",
                "3",
                "--method",
                "draft_model",
            ],
            "--draft-cost-ratio",
        ),
        (["--acceptance-length", "2", "--num-speculative-tokens", "-1"], "K >= 0"),
        (["--position-acceptance", "0.5,0.3", "--num-speculative-tokens", "1.5"], "whole"),
        # h below the method's floor h_min, named (economics.step_overhead_floor)
        (
            ["--acceptance-length", "2", "--num-speculative-tokens", "3", *H_ZERO],
            "below h_min 0.01",
        ),
        (
            ["--acceptance-length", "2", "--num-speculative-tokens", "3", *EAGLE_H],
            "below h_min 0.01, the floor for eagle",
        ),
        (
            ["--acceptance-length", "2", "--num-speculative-tokens", "3", *DRAFT_C],
            "--draft-cost-ratio 0.05 is below 0.125",
        ),
    ],
)
def test_predict_refuses_what_it_cannot_compute_in_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    code, out, err = run(capsys, "predict", *args, "--ridge-batch", "32", "--concurrency", "1,2")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and says in err


def test_predict_at_k_zero_is_speculation_off_with_speedup_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["predict", "--acceptance-length", "1", "--num-speculative-tokens", "0"]
    result = run_json(capsys, *args, "--concurrency", "1,8,64")
    assert [row["speedup_ratio"] for row in result["rows"]] == [1.0, 1.0, 1.0]
    assert {row["verdict"] for row in result["rows"]} == {"no_speculation"}
    assert result["crossover"] == "no_speculation" and result["speculative_config"] is None
    code, out, _ = run(capsys, *args, "--concurrency", "4")
    assert code == 0 and "speculation off" in out


def test_predict_takes_every_row_fit_takes_and_gives_it_the_fitted_speedup(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """K per request-step, as fit reads bench files: 2.6 when not every step of a K = 4
    server drafted, 0 when none did. With the fitted B*, h and c, predict gives a drafting
    row the fit's own modelled speedup; a row at K = 0 it takes as speculation off."""
    rows = write_sweep(tmp_path / "s.csv", 24.0, 0.4, 0.0, [(2.1, 2.6), (1.0, 0)], seed=2)
    assert {r.num_speculative_tokens for r in rows} == {2.6, 0}
    fit = run_json(capsys, "fit", str(tmp_path / "s.csv"), "--method", "ngram")
    for row in fit["rows"]:
        result = run_json(
            capsys,
            "predict",
            *("--acceptance-length", repr(row["acceptance_length"])),
            *("--num-speculative-tokens", repr(row["num_speculative_tokens"])),
            *("--ridge-batch", repr(fit["ridge_batch_requests"])),
            *("--step-overhead-ratio", repr(fit["step_overhead_ratio"])),
            *("--method", "ngram", "--concurrency", repr(row["concurrency"])),
        )
        speedup = result["rows"][0]["speedup_ratio"]
        expected = row["modelled"] if row["num_speculative_tokens"] else 1.0
        assert speedup == pytest.approx(expected, rel=1e-12)


def test_predict_defaults_give_the_figure_assess_gives_on_its_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same question, the same answer: B* = 32 and h = 0.1 (economics' defaults) in
    both, tau and K per request-step from the same counters (G/(G - A), Dt/(G - A))."""
    pages = Path(__file__).parent / "fixtures" / "vllm-0.32.0"
    pair = [str(pages / "spec_ngram_2_mid.txt"), str(pages / "spec_ngram_3_after.txt")]
    code = main(["assess", *pair, "--seconds", "60", "--method", "ngram", "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    (assessed,) = json.loads(out)
    g, a = assessed["output_tokens"], assessed["accepted_tokens"]
    result = run_json(
        capsys,
        "predict",
        *("--acceptance-length", repr(g / (g - a))),
        *("--num-speculative-tokens", repr(assessed["draft_tokens"] / (g - a))),
        # the pages ran one request at a time: 0 on both snapshots, a batch of at least 1
        *("--method", "ngram", "--concurrency", repr(max(assessed["concurrency_requests"], 1))),
    )
    assert (result["ridge_batch_requests"], result["step_overhead_ratio"]) == (32.0, 0.1)
    assert result["rows"][0]["speedup_ratio"] == pytest.approx(assessed["speedup_ratio"])


# ---------------------------------------------------------------- fit: sweeps


def write_sweep(
    path: Path,
    bstar: float,
    h: float,
    c: float,
    design: list[tuple[float, int]],
    seed: int,
    levels: tuple[int, ...] = LEVELS,
    noise: float = 0.02,
) -> list[SweepRow]:
    """A sweep generated by §3b itself, each speedup times (1 + N(0, noise)): 2% by default."""
    rng = random.Random(seed)
    rows = [
        SweepRow(b, speedup_per_step(tau, k, b, bstar, c, h) * (1 + rng.gauss(0, noise)), tau, k)
        for b in levels
        for tau, k in design
    ]
    lines = ["concurrency,speedup,acceptance_length,num_speculative_tokens"]
    lines += [
        f"{r.concurrency},{r.speedup!r},{r.acceptance_length},{r.num_speculative_tokens:g}"
        for r in rows
    ]
    path.write_text("\n".join(lines) + "\n")
    return rows


def squared_error(rows: list[SweepRow], bstar: float, h: float, c: float) -> float:
    return sum((row_speedup(r, bstar, c, h) / r.speedup - 1) ** 2 for r in rows)


# The tolerances: the same design fitted over 200 seeds (2% Gaussian noise) stayed within
# B* x/÷ 1.15, h ± 0.06 for n-gram (c known) and B* x/÷ 1.5, h ± 0.16, c ± 0.065 for a
# draft model (c fitted too: h and c trade off against each other at small batch). The
# bounds below are those, rounded up; the fit must also beat the true parameters on the
# noisy data (it minimises the error; the truth is only one candidate).
@pytest.mark.parametrize(
    ("method", "bstar", "h", "c", "design", "tolerance"),
    [
        ("ngram", 64.0, 0.5, 0.0, [(2.4, 4)], (1.15, 0.07, 0.0)),
        ("draft_model", 100.0, 1.5, 0.15, [(1.8, 2), (2.4, 4)], (1.6, 0.2, 0.07)),
    ],
)
def test_fit_recovers_the_parameters_of_a_noisy_sweep(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    method: str,
    bstar: float,
    h: float,
    c: float,
    design: list[tuple[float, int]],
    tolerance: tuple[float, float, float],
) -> None:
    rows = write_sweep(tmp_path / "sweep.csv", bstar, h, c, design, seed=15)
    fit = run_json(capsys, "fit", str(tmp_path / "sweep.csv"), "--method", method)
    factor, h_tol, c_tol = tolerance
    assert bstar / factor <= fit["ridge_batch_requests"] <= bstar * factor
    assert fit["step_overhead_ratio"] == pytest.approx(h, abs=h_tol)
    assert fit["draft_cost_ratio"] == pytest.approx(c, abs=c_tol)
    assert fit["at_bound"] == [] and fit["not_pinned"] == []
    assert 0.008 <= fit["mean_abs_error_ratio"] <= 0.025  # the noise's own mean |e| is 1.6%
    # Each true parameter lies in its 95% interval, and every interval inside physics.
    truth = {"ridge_batch_requests": bstar, "step_overhead_ratio": h, "draft_cost_ratio": c}
    for name, p in fit["parameters"].items():
        assert p["pinned"] and p["low"] <= truth[name] <= p["high"], (name, p)
    assert fit["parameters"]["step_overhead_ratio"]["low"] >= 0.01
    assert (
        set(fit["parameters"]) == set(truth)
        if method == "draft_model"
        else set(truth) - {"draft_cost_ratio"}
    )
    found = (fit["ridge_batch_requests"], fit["step_overhead_ratio"], fit["draft_cost_ratio"])
    assert squared_error(rows, *found) <= squared_error(rows, bstar, h, c)
    assert len(fit["rows"]) == len(rows)
    for out, row in zip(fit["rows"], rows, strict=True):
        assert out["measured"] == pytest.approx(row.speedup)
        assert out["error_ratio"] == pytest.approx(out["modelled"] / out["measured"] - 1)


def test_fit_prints_rows_parameters_and_mean_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    write_sweep(tmp_path / "s.csv", 40.0, 0.3, 0.05, [(2.6, 3)], seed=1)
    code, out, _ = run(capsys, "fit", str(tmp_path / "s.csv"), "--method", "eagle")
    assert code == 0
    assert "B* (ridge batch, requests)" in out and "mean |error|" in out
    assert "0.05 (fixed)" in out
    assert len([line for line in out.splitlines() if line.strip().startswith("256 ")]) == 1


@pytest.mark.parametrize("seed", range(6))
def test_a_draft_model_fit_never_leaves_the_physical_range(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, seed: int
) -> None:
    """One K at 1 to 8 requests, 3% noise: h and c trade off at small batch, and the old
    search box's floor, h = -0.5, was where seeds 1 and 5 ended (at c = 0 seeds 0, 2, 3)."""
    write_sweep(tmp_path / "s.csv", 16.0, 0.3, 0.3, [(1.8, 3)], seed, (1, 2, 4, 8), 0.03)
    fit = run_json(capsys, "fit", str(tmp_path / "s.csv"), "--method", "draft_model")
    assert fit["ridge_batch_requests"] >= 1.0
    assert fit["step_overhead_ratio"] >= 0.01
    assert fit["draft_cost_ratio"] >= 0.0
    assert fit["step_overhead_floor"] == 0.01  # a draft model of unknown size: every method's
    for name, p in fit["parameters"].items():
        low, high = p["range"]
        assert low <= p["low"] <= p["value"] <= p["high"] <= high, name
    assert (low, high) == (0.0, 2.0)  # c's, the last


def test_a_sweep_that_cannot_pin_h_says_so_and_what_would(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Every level far past a ridge at 8: h only weighs B*/B of a step there, so the error
    hardly moves with it. The fit still gives a physical h, and says it is not the sweep's."""
    write_sweep(tmp_path / "s.csv", 8.0, 0.5, 0.0, [(2.4, 4)], 3, (128, 256, 512, 1024), 0.02)
    args = ["fit", str(tmp_path / "s.csv"), "--method", "ngram"]
    fit = run_json(capsys, *args)
    h = fit["parameters"]["step_overhead_ratio"]
    assert "step_overhead_ratio" in fit["not_pinned"] and not h["pinned"]
    assert fit["step_overhead_ratio"] >= 0.01
    assert h["high"] - h["low"] > 2.0  # the 95% interval spans most of the range
    assert "small batch" in h["why"]
    code, out, _ = run(capsys, *args)
    assert code == 0
    assert "not pinned by this sweep:" in out
    assert any(line.startswith("  h: ") and "small batch" in line for line in out.splitlines())


def test_a_sweep_that_spans_the_ridge_pins_everything_and_says_nothing_is_free(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    write_sweep(tmp_path / "s.csv", 40.0, 0.3, 0.05, [(2.6, 3)], seed=1)
    code, out, _ = run(capsys, "fit", str(tmp_path / "s.csv"), "--method", "eagle")
    assert code == 0 and "95%:" in out and "not pinned" not in out


def test_a_fit_of_a_few_rows_is_fast(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The fit and its intervals: 18 rows, B*, h and c, ~0.5 s here; a few seconds at most."""
    write_sweep(tmp_path / "s.csv", 100.0, 1.5, 0.15, [(1.8, 2), (2.4, 4)], seed=15)
    started = time.perf_counter()
    run_json(capsys, "fit", str(tmp_path / "s.csv"), "--method", "draft_model")
    assert time.perf_counter() - started < 3.0


VLLM_SCHEDULE = next(
    iter(
        (Path.home() / ".cache" / "spectax-vllm" / "venv" / "lib").glob(
            "python3*/site-packages/vllm/v1/spec_decode/dynamic/utils.py"
        )
    ),
    None,
)


@pytest.mark.skipif(VLLM_SCHEDULE is None, reason="the live tier's vLLM venv is not installed")
def test_vllm_own_schedule_code_applies_the_recommended_k_per_batch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """vLLM's scheduler expands the schedule with this function (dependency-free source):
    it must accept ours, and give every batch size the K we computed for it."""
    assert VLLM_SCHEDULE is not None
    spec = importlib.util.spec_from_file_location("vllm_dynamic_sd", VLLM_SCHEDULE)
    assert spec is not None and spec.loader is not None
    vllm_utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vllm_utils)
    result = run_json(
        capsys,
        "predict",
        *("--position-acceptance", "0.9,0.7,0.5,0.3,0.2,0.1", "--num-speculative-tokens", "2"),
        *("--ridge-batch", "48", "--step-overhead-ratio", "0.3", "--method", "mtp"),
        *("--concurrency", ",".join(str(b) for b in range(1, 97))),
    )
    config = result["speculative_config"]
    lookup = vllm_utils.build_dynamic_sd_schedule_lookup(
        config["num_speculative_tokens_per_batch_size"], 96, config["num_speculative_tokens"]
    )
    assert lookup[1:] == [row["best_num_speculative_tokens"] for row in result["rows"]]


# ---------------------------------------------------------------- fit: vllm bench serve files


def bench_result(concurrency: int, tpot_ms: float, **extra: Any) -> dict[str, Any]:
    """The keys `vllm bench serve --save-result` writes (vLLM 0.32.0, benchmarks/serve.py),
    with the figures a run at this concurrency would have (40 prompts, 32 in, 48 out)."""
    return {
        "date": "20261201-153000",
        "endpoint_type": "vllm",
        "backend": "vllm",
        "label": None,
        "model_id": "tiny-llama",
        "tokenizer_id": "/models/target",
        "num_prompts": 40,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": concurrency,
        "duration": 10.0,
        "completed": 40,
        "failed": 0,
        "total_input_tokens": 1280,
        "total_output_tokens": 1920,
        "mean_tpot_ms": tpot_ms,
        "median_tpot_ms": tpot_ms,
        **extra,
    }


def spec_keys(tau: float, k: float, output_tokens: int = 1920) -> dict[str, Any]:
    """spec_decode_* as vLLM derives them, for tau and K per request-step."""
    steps = output_tokens / tau
    accepted, draft_tokens = output_tokens - steps, k * steps
    drafts = steps  # every step drafted
    return {
        "spec_decode_acceptance_rate": 100 * accepted / draft_tokens,
        "spec_decode_acceptance_length": 1 + accepted / drafts,
        "spec_decode_num_drafts": round(drafts),
        "spec_decode_draft_tokens": round(draft_tokens),
        "spec_decode_accepted_tokens": round(accepted),
        "spec_decode_per_position_acceptance_rates": [],
    }


def write_bench_sweep(directory: Path, bstar: float, h: float, levels: tuple[int, ...]) -> None:
    """Plain runs on a + b*n (n = B*(1 + 32/48)), spec runs S times faster, S from §3b."""
    a, b = 0.004, 0.004 / bstar
    for level in levels:
        plain_tpot = a + b * level * (1 + 32 / 48)
        tau, k = 2.2, 4
        steps = 1920 / tau
        real_tau, real_k = 1920 / steps, round(k * steps) / steps
        s = speedup_per_step(real_tau, real_k, level, bstar, 0.0, h)
        for name, result in (
            (f"plain-c{level}.json", bench_result(level, plain_tpot * 1e3)),
            (f"spec-c{level}.json", bench_result(level, plain_tpot / s * 1e3, **spec_keys(tau, k))),
        ):
            (directory / name).write_text(json.dumps(result))


def test_fit_reads_vllm_bench_results_pairs_them_and_fits_the_plain_curve(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    write_bench_sweep(tmp_path, bstar=20.0, h=0.8, levels=(1, 2, 4, 8, 16, 32))
    files = sorted(str(p) for p in tmp_path.glob("*.json"))
    fit = run_json(capsys, "fit", *files, "--method", "ngram")
    assert [r["concurrency"] for r in fit["rows"]] == [1, 2, 4, 8, 16, 32]
    assert fit["ridge_batch_requests"] == pytest.approx(20.0, rel=1e-3)
    assert fit["step_overhead_ratio"] == pytest.approx(0.8, abs=1e-3)
    assert fit["mean_abs_error_ratio"] < 1e-4
    plain = fit["plain_curve"]
    assert plain["fixed_seconds"] == pytest.approx(0.004)
    assert plain["per_token_seconds"] == pytest.approx(0.004 / 20)


def test_a_speculative_run_that_proposed_nothing_is_a_priced_row(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """vLLM writes no spec_decode_* keys when the server drafted nothing; tagged with
    `--metadata speculative=true` the run is a speculative row with K = 0 that paid h."""
    for level, plain, spec in ((1, 10.0, 12.0), (8, 11.0, 12.5), (32, 14.0, 15.0)):
        (tmp_path / f"p{level}.json").write_text(json.dumps(bench_result(level, plain)))
        tagged = bench_result(level, spec, speculative="true")
        (tmp_path / f"s{level}.json").write_text(json.dumps(tagged))
    fit = run_json(capsys, "fit", *sorted(map(str, tmp_path.glob("*.json"))), "--method", "ngram")
    assert [r["num_speculative_tokens"] for r in fit["rows"]] == [0, 0, 0]
    assert [r["acceptance_length"] for r in fit["rows"]] == [1, 1, 1]
    assert [r["measured"] for r in fit["rows"]] == pytest.approx([10 / 12, 11 / 12.5, 14 / 15])
    assert fit["step_overhead_ratio"] > 0  # the proposer's cost, with nothing to show for it


def test_fit_saves_a_sweep_profile_with_its_plain_curve(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    write_bench_sweep(tmp_path, bstar=20.0, h=0.8, levels=(1, 4, 16))
    db = tmp_path / "history.sqlite"
    config = tmp_path / "spectax.yml"
    config.write_text(f"storage_url: sqlite+aiosqlite:///{db}\n")
    files = sorted(str(p) for p in tmp_path.glob("*.json"))
    args = ["fit", *files, "--method", "ngram", "--save-profile", "tiny-cpu-ngram"]
    code, _, err = run(capsys, *args, "--config", str(config))
    assert code == 0, err

    async def stored() -> dict[str, Any]:
        store = await Store.open(f"sqlite+aiosqlite:///{db}")
        try:
            return await store.profiles()
        finally:
            await store.close()

    profile = asyncio.run(stored())["tiny-cpu-ngram"]
    assert profile.source == "sweep" and profile.points == 3
    assert profile.method == "ngram"  # h and c are the method's: it goes with them
    assert profile.ridge_batch == pytest.approx(20.0, rel=1e-3)
    assert profile.step_overhead_ratio == pytest.approx(0.8, abs=1e-3)
    assert profile.draft_cost_ratio == 0.0
    assert profile.plain is not None and profile.plain.fixed_seconds == pytest.approx(0.004)
    assert "--config" in run(capsys, *args)[2]  # --save-profile without --config: one line


@pytest.mark.parametrize(
    ("files", "says"),
    [
        ({"s.csv": "concurrency,speedup\n1,1.2\n"}, "missing column(s) acceptance_length"),
        (
            {"s.csv": "concurrency,speedup,acceptance_length,num_speculative_tokens\n1,x,2,3\n"},
            "line 2: not a number",
        ),
        ({"r.json": '{"date": "x", "duration": 3}'}, "not a `vllm bench serve --save-result` file"),
        ({"r.json": "{not json"}, "not JSON"),
        (
            {
                "p.json": json.dumps(bench_result(1, 10.0)),
                "q.json": json.dumps(bench_result(2, 10.0)),
            },
            "no concurrency has both a speculative and a plain run",
        ),
        (
            {
                "p.json": json.dumps(bench_result(1, 10.0)),
                "q.json": json.dumps(bench_result(1, 9.0)),
            },
            "a second plain run at concurrency 1",
        ),
        (
            {"p.json": json.dumps({**bench_result(1, 10.0), "max_concurrency": None})},
            "without --max-concurrency",
        ),
        (
            {
                "s.csv": "concurrency,speedup,acceptance_length,num_speculative_tokens\n4,1.2,2,3\n"
                "4,1.1,2,3\n"
            },
            "one concurrency",
        ),
    ],
)
def test_fit_refuses_a_bad_file_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, files: dict[str, str], says: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    code, out, err = run(capsys, "fit", *(str(tmp_path / n) for n in files))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and says in err, err


def test_fit_reads_real_vllm_bench_files_as_vllm_wrote_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Recorded with vLLM 0.32.0 (fixtures/vllm-bench/README.md): the greedy n-gram runs have
    spec_decode_* keys, the random ones proposed nothing and carry only the metadata tag."""
    greedy = {p.name: json.loads(p.read_text()) for p in BENCH.glob("greedy-*.json")}
    fit = run_json(capsys, "fit", *(str(BENCH / n) for n in sorted(greedy)), "--method", "ngram")
    assert [r["concurrency"] for r in fit["rows"]] == [1, 2, 4]
    for row in fit["rows"]:
        level = int(row["concurrency"])
        spec, plain = greedy[f"greedy-ngram-c{level}.json"], greedy[f"greedy-control-c{level}.json"]
        assert row["measured"] == pytest.approx(plain["mean_tpot_ms"] / spec["mean_tpot_ms"])
        steps = spec["total_output_tokens"] - spec["spec_decode_accepted_tokens"]
        assert row["acceptance_length"] == pytest.approx(spec["total_output_tokens"] / steps)
        assert row["num_speculative_tokens"] == pytest.approx(
            spec["spec_decode_draft_tokens"] / steps
        )
        assert row["num_speculative_tokens"] <= 4  # the server's K
    assert fit["plain_curve"] is not None

    silent = sorted(str(p) for p in BENCH.glob("random-*.json"))
    assert all("spec_decode_num_drafts" not in json.loads(Path(p).read_text()) for p in silent)
    fit = run_json(capsys, "fit", *silent, "--method", "ngram")
    assert [(r["acceptance_length"], r["num_speculative_tokens"]) for r in fit["rows"]] == [
        (1, 0),
        (1, 0),
    ]


def test_predict_answers_k3_at_8_requests_and_acceptance_0_6_from_its_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The question a user asks: "K=3, 8 requests, acceptance 0.6". Acceptance (vLLM's
    acceptance rate, alpha = A/Dt) was not an input; tau = 1 + alpha*K is the same question."""
    args = ["predict", "--num-speculative-tokens", "3", "--concurrency", "8"]
    by_alpha = run_json(capsys, *args, "--acceptance", "0.6")
    by_tau = run_json(capsys, *args, "--acceptance-length", str(1 + 0.6 * 3))
    assert by_alpha["acceptance_length"] == pytest.approx(2.8)
    assert by_alpha["acceptance_ratio"] == pytest.approx(0.6)
    assert by_alpha["rows"] == by_tau["rows"]
    code, _, err = run(capsys, *args, "--acceptance", "1.5")
    assert code == 2 and "between 0 and 1" in err


def test_predict_always_says_what_to_do_with_the_speculative_config(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The vLLM snippet appeared only with --position-acceptance and a K change: a user
    whose K already pays everywhere was told nothing."""
    args = ["predict", "--acceptance", "0.9", "--num-speculative-tokens", "3"]
    code, out, _ = run(capsys, *args, "--concurrency", "1,2", "--max-num-seqs", "64")
    assert code == 0
    assert "recommendation: keep --speculative-config as it is (K = 3 at every batch up to 64)" in (
        out
    )


def test_predict_schedule_covers_the_engines_largest_batch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With --concurrency 1,8,32,64,128 the last range stopped at 128: a batch above it had no
    range of the list. It now runs to --max-num-seqs."""
    p = "0.8,0.6,0.4,0.25,0.1"
    args = ["predict", "--position-acceptance", p, "--num-speculative-tokens", "3"]
    args += ["--ridge-batch", "64", "--step-overhead-ratio", "0.5", "--method", "eagle"]
    result = run_json(capsys, *args, "--concurrency", "1,8,32,64,128", "--max-num-seqs", "512")
    schedule = result["speculative_config"]["num_speculative_tokens_per_batch_size"]
    assert schedule[-1][1] == 512 and schedule[-1][2] == 0


@pytest.mark.live_vllm
def test_predict_schedule_gives_every_batch_the_k_vllm_itself_reads_from_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """vLLM's own reading of the list (`build_dynamic_sd_schedule_lookup`, vLLM 0.32.0's
    vllm/v1/spec_decode/dynamic/utils.py, from the live tier's install; a module of plain
    Python) gives each batch 1..max_num_seqs the K spectax computed for it."""
    from live_vllm import servers as live

    found = sorted(
        (live.vllm_home() / "venv").glob("lib/python*/site-packages/vllm/v1/spec_decode/dynamic")
    )
    if not found:
        if live.in_ci():
            pytest.fail("vLLM is not installed (tests/live_vllm/setup.sh)", pytrace=False)
        pytest.skip("vLLM is not installed: run tests/live_vllm/setup.sh")
    spec = importlib.util.spec_from_file_location("vllm_dynamic_sd", found[0] / "utils.py")
    assert spec is not None and spec.loader is not None
    vllm_sd = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vllm_sd)

    p = [0.8, 0.6, 0.4, 0.25, 0.1]
    args = ["predict", "--position-acceptance", ",".join(map(str, p)), "--ridge-batch", "64"]
    args += ["--step-overhead-ratio", "0.5", "--method", "eagle", "--max-num-seqs", "300"]
    result = run_json(capsys, *args, "--concurrency", ",".join(map(str, range(1, 301))))
    config = result["speculative_config"]
    dense = vllm_sd.build_dynamic_sd_schedule_lookup(
        config["num_speculative_tokens_per_batch_size"], 300, config["num_speculative_tokens"]
    )
    ours = {row["concurrency"]: row["best_num_speculative_tokens"] for row in result["rows"]}
    assert [dense[b] for b in range(1, 301)] == [ours[b] for b in range(1, 301)]
    assert len(set(dense[1:])) > 1  # a schedule that changes K, not a constant
