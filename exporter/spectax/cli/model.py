"""`spectax model predict|fit`: the what-if planner and the sweep fitter (ECONOMICS.md §3b).

`predict` answers "would speculation pay at these concurrencies?" from a tau,
a K and the endpoint's B*, h and c, before anything is deployed; `fit` learns
B*, h and c from a benchmark sweep, so that `predict`, and every endpoint
that names the saved profile, stop guessing them. Where the answer changes K
or turns speculation off above some batch, it is also printed as the vLLM
`--speculative-config` that does it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from typing import Any

from spectax import economics
from spectax.cli import model_fit
from spectax.cli.model_fit import CSV_COLUMNS, InputError
from spectax.economics import formulas
from spectax.economics.draft_schedule import (
    DEFAULT_MAX_NUM_SEQS,
    batch_schedule,
    vllm_speculative_config,
)


class ModelError(ValueError):
    """Arguments `spectax model` cannot use; the message is one line for the user."""


# ---------------------------------------------------------------- predict


def predict(args: argparse.Namespace) -> dict[str, Any]:
    """The JSON of `spectax model predict`, from its parsed arguments.

    K is draft tokens per request-step, as `fit` reads it: fractional when not every step
    drafted, 0 for speculation off (speedup 1). B* and h default to what `spectax assess`
    and the daemon assume, so the same question gets the same figure everywhere.
    """
    concurrencies = _numbers(args.concurrency, "--concurrency", positive=True)
    positions = (
        _numbers(args.position_acceptance, "--position-acceptance")
        if args.position_acceptance
        else None
    )
    k, tau = _acceptance(args, positions)
    if args.ridge_batch <= 0:
        raise ModelError("--ridge-batch: B* must be > 0")
    c, h, bstar = _draft_cost(args), args.step_overhead_ratio, args.ridge_batch
    floor = step_overhead_floor(args)
    if h < floor:
        raise ModelError(
            f"--step-overhead-ratio {h:g} is below h_min {floor:g}, the floor for "
            f"{args.method or 'every speculative method'} (its proposer runs on every step)"
        )
    least_c = economics.draft_cost_floor(args.draft_params, args.target_params)
    if c < least_c:
        raise ModelError(
            f"--draft-cost-ratio {c:g} is below {least_c:.3g}, --draft-params over "
            "--target-params: each drafting pass reads the drafter's weights"
        )
    alpha, q = ((tau - 1.0) / k, 1.0 / k) if k > 0 else (None, None)

    def best_k(b: float) -> tuple[int, float]:
        assert positions is not None
        speedups = [
            formulas.speedup_per_step(1.0 + sum(positions[:j]), j, b, bstar, c, h)
            for j in range(len(positions) + 1)
        ]
        j = max(range(len(speedups)), key=lambda i: (speedups[i], -i))
        return j, speedups[j]

    rows = []
    for b in concurrencies:
        s = formulas.speedup_per_step(tau, k, b, bstar, c, h)
        row: dict[str, Any] = {
            "concurrency": b,
            "speedup_ratio": s,
            "verdict": "no_speculation" if k == 0 else "pays" if s > 1.0 else "tax",
            "breakeven_acceptance_ratio": None
            if q is None
            else formulas.breakeven_acceptance(b, bstar, c, h, q),
        }
        if positions is not None:
            row["best_num_speculative_tokens"], row["best_speedup_ratio"] = best_k(b)
        rows.append(row)
    crossover = (
        None
        if alpha is None or q is None
        else formulas.crossover_concurrency(alpha, bstar, c, h, q)
    )

    def k_at(b: int) -> float:
        if positions is not None:
            return best_k(b)[0]
        return k if formulas.speedup_per_step(tau, k, b, bstar, c, h) > 1.0 else 0

    largest = max(math.ceil(max(concurrencies)), args.max_num_seqs)
    schedule = batch_schedule([k_at(b) for b in range(1, largest + 1)])
    return {
        "acceptance_length": tau,
        "acceptance_ratio": alpha,
        "num_speculative_tokens": k,
        "draft_cost_ratio": c,
        "ridge_batch_requests": bstar,
        "step_overhead_ratio": h,
        "step_overhead_floor": floor,
        "rows": rows,
        "crossover_concurrency_requests": crossover if crossover not in (None, math.inf) else None,
        "crossover": "no_speculation"
        if k == 0
        else "never_pays"
        if crossover is None
        else "never_tax"
        if crossover == math.inf
        else "at",
        "speculative_config": vllm_speculative_config(schedule, k, args.method),
        "max_num_seqs": largest,
    }


def _acceptance(args: argparse.Namespace, positions: list[float] | None) -> tuple[float, float]:
    """(K, tau) from the arguments: as given, or tau from the first K positions' acceptance."""
    k = args.num_speculative_tokens
    if positions is not None:
        if any(not 0 <= p <= 1 for p in positions):
            raise ModelError("--position-acceptance: each p_k is a share, between 0 and 1")
        k = k if k is not None else len(positions)
        if k != int(k):
            raise ModelError(f"K = {k:g}: with --position-acceptance K is a whole number")
        if k > len(positions):
            raise ModelError(
                f"K = {k:g}: --position-acceptance gives only {len(positions)} positions"
            )
        return int(k), 1.0 + sum(positions[: int(k)])
    if args.acceptance_length is None and args.acceptance is None:
        raise ModelError(
            "give --acceptance ALPHA, --acceptance-length TAU or --position-acceptance p0,p1,..."
        )
    given = "--acceptance-length" if args.acceptance is None else "--acceptance"
    if k is None:
        raise ModelError(f"{given} needs --num-speculative-tokens K")
    if args.acceptance is not None:
        if not 0 <= args.acceptance <= 1:
            raise ModelError("--acceptance: alpha is a share of draft tokens, between 0 and 1")
        tau = 1.0 + args.acceptance * k  # alpha = A / Dt and tau = 1 + A / Dr, Dt = K * Dr
    else:
        tau = args.acceptance_length
    if k < 0 or not 1 <= tau <= k + 1:
        raise ModelError(f"K = {k:g} and tau = {tau:g}: need K >= 0 and 1 <= tau <= K + 1")
    return int(k) if k == int(k) else k, tau


def _draft_cost(args: argparse.Namespace) -> float:
    if args.draft_cost_ratio is not None:
        return float(args.draft_cost_ratio)
    if args.method is None:
        return 0.0
    c = economics.draft_cost_ratio_for(args.method, args.draft_params, args.target_params)
    if c is None:
        raise ModelError(
            f"--method {args.method} needs --draft-cost-ratio C (its cost per token), or "
            "--draft-params and --target-params"
        )
    return c


def step_overhead_floor(args: argparse.Namespace) -> float:
    """h_min of the method (`economics.step_overhead_floor`); without --method, the floor
    of every method: whatever it is, a speculative server runs its proposer each step."""
    return max(economics.MIN_STEP_OVERHEAD_RATIO, economics.step_overhead_floor(args.method))


def _numbers(text: str, flag: str, positive: bool = False) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ModelError(f"{flag}: a comma-separated list of numbers, e.g. 1,2,4") from None
    if not values or (positive and min(values) <= 0):
        raise ModelError(f"{flag}: give at least one number{', each > 0' if positive else ''}")
    return values


def predict_text(result: dict[str, Any]) -> str:
    r = result
    lines = [
        f"model (docs/economics.md): tau {r['acceptance_length']:g},"
        f" K {r['num_speculative_tokens']:g}"
        + ("" if r["acceptance_ratio"] is None else f" (acceptance {r['acceptance_ratio']:.3f})")
        + f", c {r['draft_cost_ratio']:g},"
        f" B* {r['ridge_batch_requests']:g}, h {r['step_overhead_ratio']:g}",
        "",
    ]
    best = "best_num_speculative_tokens" in r["rows"][0]
    w = max(7, *(len(row["verdict"]) for row in r["rows"]))
    header = f"{'concurrency':>11}  {'speedup':>8}  {'verdict':<{w}}  {'break-even':>10}"
    lines.append(header + (f"  {'best K':>6}  {'its speedup':>11}" if best else ""))
    for row in r["rows"]:
        breakeven = row["breakeven_acceptance_ratio"]
        line = f"{row['concurrency']:>11g}  {row['speedup_ratio']:>8.6f}  {row['verdict']:<{w}}" + (
            f"  {'-':>10}" if breakeven is None else f"  {breakeven:>10.3f}"
        )
        if best:
            line += f"  {row['best_num_speculative_tokens']:>6}  {row['best_speedup_ratio']:>11.6f}"
        lines.append(line)
    lines.append("")
    if r["crossover"] == "no_speculation":
        lines.append("K = 0: speculation off, a plain step at every concurrency (speedup 1)")
    elif r["crossover"] == "never_pays":
        lines.append(
            "crossover: none, speculation is a tax at every concurrency at this acceptance"
        )
    elif r["crossover"] == "never_tax":
        lines.append("crossover: none, speculation pays at every concurrency at this acceptance")
    else:
        x = r["crossover_concurrency_requests"]
        lines.append(
            f"crossover: above {x:.1f} running requests speculation is a tax at this acceptance"
        )
    config = r["speculative_config"]
    if config == {}:
        lines.append(
            "recommendation: turn speculation off (start vLLM without --speculative-config)"
        )
    elif config is None and r["num_speculative_tokens"]:
        lines.append(
            f"recommendation: keep --speculative-config as it is (K ="
            f" {r['num_speculative_tokens']:g} at every batch up to {r['max_num_seqs']})"
        )
    elif config:
        lines.append(
            "recommendation (vLLM 0.32): --speculative-config '" + json.dumps(config) + "'"
        )
        lines.append(
            "  keep your other keys (method, model, prompt_lookup_*); K applies to the running"
            " batch, and vLLM ignores the per-batch list with data parallelism"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- the command line


def add_parser(commands: Any) -> None:
    model = commands.add_parser(
        "model", help="what-if speedups (`model predict`) and B*, h, c from a sweep (`model fit`)"
    )
    sub = model.add_subparsers(dest="model_command", title="commands", metavar="COMMAND")
    model.set_defaults(func=lambda args: _usage(model))
    p = sub.add_parser(
        "predict", help="speedup, verdict and crossover per concurrency (docs/economics.md)"
    )
    given = p.add_mutually_exclusive_group()
    given.add_argument(
        "--acceptance",
        type=float,
        metavar="ALPHA",
        help="acceptance ratio: accepted over proposed draft tokens (vLLM's acceptance rate)",
    )
    given.add_argument(
        "--acceptance-length", type=float, metavar="TAU", help="tokens per verify step"
    )
    given.add_argument(
        "--position-acceptance",
        metavar="P0,P1,...",
        help="per-position acceptance: also the best K",
    )
    p.add_argument(
        "--num-speculative-tokens",
        type=float,
        metavar="K",
        help="draft tokens per request-step (0: off; fractional when not every step drafts)",
    )
    p.add_argument(
        "--ridge-batch",
        type=float,
        default=economics.DEFAULT_RIDGE_BATCH,
        metavar="BSTAR",
        help=f"B* = a/b, plain (default {economics.DEFAULT_RIDGE_BATCH:g}, as assess)",
    )
    _add_cost_options(p)
    p.add_argument(
        "--step-overhead-ratio",
        type=float,
        default=economics.DEFAULT_STEP_OVERHEAD_RATIO,
        metavar="H",
        help=f"h (default {economics.DEFAULT_STEP_OVERHEAD_RATIO:g}, as assess; >= h_min)",
    )
    p.add_argument("--concurrency", required=True, metavar="1,2,4,...", help="running requests")
    p.add_argument(
        "--max-num-seqs",
        type=int,
        default=DEFAULT_MAX_NUM_SEQS,
        metavar="N",
        help=f"the engine's max_num_seqs: the K schedule covers batches 1..N (default"
        f" {DEFAULT_MAX_NUM_SEQS}, vLLM's largest default)",
    )
    p.add_argument(
        "--format", choices=["text", "json"], default="text", help="output (default text)"
    )
    p.set_defaults(func=predict_command)
    f = sub.add_parser("fit", help="fit B*, h and c to a sweep: a CSV or vllm bench serve results")
    f.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help=f"a CSV ({','.join(CSV_COLUMNS)}[,draft_cost_ratio]) or `vllm bench serve "
        "--save-result` JSON files of a speculative and a plain run per --max-concurrency",
    )
    _add_cost_options(f)
    f.add_argument("--fit-draft-cost", action="store_true", help="fit c too (default: draft_model)")
    f.add_argument("--save-profile", metavar="NAME", help="store the fit as a profile (sweep)")
    f.add_argument("--config", help="YAML configuration file: storage_url, for --save-profile")
    f.add_argument(
        "--format", choices=["text", "json"], default="text", help="output (default text)"
    )
    f.set_defaults(func=fit_command)


def _add_cost_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--method", choices=formulas.SPECULATIVE_METHODS, help="its default c; the JSON's method"
    )
    p.add_argument(
        "--draft-cost-ratio", type=float, metavar="C", help="c: draft token / target token"
    )
    p.add_argument(
        "--draft-params",
        type=float,
        metavar="N",
        help="drafter's parameters: c's default and floor",
    )
    p.add_argument("--target-params", type=float, metavar="N", help="target's parameters")


def _usage(model: argparse.ArgumentParser) -> int:
    model.print_help(sys.stderr)
    return 2


def predict_command(args: argparse.Namespace) -> int:
    try:
        result = predict(args)
    except ModelError as exc:
        print(f"spectax model predict: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.format == "json" else predict_text(result))
    return 0


def fit_command(args: argparse.Namespace) -> int:
    from spectax.config import load_config

    try:
        if args.save_profile and not args.config:
            raise ModelError("--save-profile needs --config (the storage_url to store it in)")
        sweep, result = model_fit.fit(args, _draft_cost, step_overhead_floor(args))
    except (ModelError, InputError, economics.SweepError) as exc:
        print(f"spectax model fit: {exc}", file=sys.stderr)
        return 2
    data = model_fit.fit_json(sweep, result, args.method)
    print(json.dumps(data, indent=2) if args.format == "json" else model_fit.fit_text(data))
    if args.save_profile:
        url = load_config(args.config).config.database_url
        profile = model_fit.profile_of_fit(args.save_profile, sweep, result, args.method)
        asyncio.run(model_fit.save_profile(url, profile))
        free = f"; not pinned: {', '.join(result.not_pinned)}" if result.not_pinned else ""
        print(f"saved profile {args.save_profile!r} (source sweep{free})", file=sys.stderr)
    return 0
