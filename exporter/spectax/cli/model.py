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
from collections.abc import Sequence
from typing import Any

from spectax import economics
from spectax.cli import model_fit
from spectax.cli.model_fit import CSV_COLUMNS, InputError
from spectax.economics import formulas

#: vLLM 0.32.0's SpeculativeConfig (vllm/config/speculative.py) has no switch that turns
#: speculation off above a batch size; it has `num_speculative_tokens_per_batch_size`, a
#: list of inclusive [first, last, K] batch ranges, the first starting at 1, K >= 0, each
#: K capped at `num_speculative_tokens` (which must be > 0), the last range carried on.
VLLM_SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"


class ModelError(ValueError):
    """Arguments `spectax model` cannot use; the message is one line for the user."""


# ---------------------------------------------------------------- predict


def predict(args: argparse.Namespace) -> dict[str, Any]:
    """The JSON of `spectax model predict`, from its parsed arguments."""
    concurrencies = _numbers(args.concurrency, "--concurrency", positive=True)
    positions = (
        _numbers(args.position_acceptance, "--position-acceptance")
        if args.position_acceptance
        else None
    )
    k = args.num_speculative_tokens
    if positions is not None:
        if any(not 0 <= p <= 1 for p in positions):
            raise ModelError("--position-acceptance: each p_k is a share, between 0 and 1")
        k = k if k is not None else len(positions)
        if k > len(positions):
            raise ModelError(
                f"K = {k}: --position-acceptance gives only {len(positions)} positions"
            )
        tau = 1.0 + sum(positions[:k])
    else:
        if args.acceptance_length is None:
            raise ModelError("give --acceptance-length TAU or --position-acceptance p0,p1,...")
        if k is None:
            raise ModelError("--acceptance-length needs --num-speculative-tokens K")
        tau = args.acceptance_length
    if k < 1 or not 1 <= tau <= k + 1:
        raise ModelError(f"K = {k} and tau = {tau:g}: need K >= 1 and 1 <= tau <= K + 1")
    if args.ridge_batch <= 0:
        raise ModelError("--ridge-batch: B* must be > 0")
    c, h, bstar = _draft_cost(args), args.step_overhead_ratio, args.ridge_batch
    alpha, q = (tau - 1.0) / k, 1.0 / k

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
            "verdict": "pays" if s > 1.0 else "tax",
            "breakeven_acceptance_ratio": formulas.breakeven_acceptance(b, bstar, c, h, q),
        }
        if positions is not None:
            row["best_num_speculative_tokens"], row["best_speedup_ratio"] = best_k(b)
        rows.append(row)
    crossover = formulas.crossover_concurrency(alpha, bstar, c, h, q)

    def k_at(b: int) -> int:
        if positions is not None:
            return best_k(b)[0]
        return k if formulas.speedup_per_step(tau, k, b, bstar, c, h) > 1.0 else 0

    schedule = batch_schedule([k_at(b) for b in range(1, math.ceil(max(concurrencies)) + 1)])
    return {
        "acceptance_length": tau,
        "acceptance_ratio": alpha,
        "num_speculative_tokens": k,
        "draft_cost_ratio": c,
        "ridge_batch_requests": bstar,
        "step_overhead_ratio": h,
        "rows": rows,
        "crossover_concurrency_requests": crossover if crossover not in (None, math.inf) else None,
        "crossover": "never_pays"
        if crossover is None
        else "never_tax"
        if crossover == math.inf
        else "at",
        "speculative_config": vllm_speculative_config(schedule, k, args.method),
    }


def batch_schedule(k_by_batch: Sequence[int]) -> list[list[int]]:
    """[[first, last, K], ...]: runs of equal K over batch sizes 1, 2, ..."""
    ranges: list[list[int]] = []
    for b, k in enumerate(k_by_batch, start=1):
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = b
        else:
            ranges.append([b, b, k])
    return ranges


def vllm_speculative_config(
    schedule: list[list[int]], configured_k: int, method: str | None
) -> dict[str, Any] | None:
    """The `--speculative-config` that applies the schedule; None when it is the configured
    one already, {} when speculation is to be off at every batch (start without it)."""
    ks = {k for _, _, k in schedule}
    if ks == {configured_k}:
        return None
    if ks == {0}:
        return {}
    config: dict[str, Any] = {"method": method} if method else {}
    config["num_speculative_tokens"] = max(ks)
    if len(ks) > 1:
        config[VLLM_SCHEDULE_KEY] = schedule
    return config


def _draft_cost(args: argparse.Namespace) -> float:
    if args.draft_cost_ratio is not None:
        return float(args.draft_cost_ratio)
    if args.method is None:
        return 0.0
    c = economics.draft_cost_ratio_for(args.method)
    if c is None:
        raise ModelError(f"--method {args.method} needs --draft-cost-ratio C (its cost per token)")
    return c


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
        f"§3b: tau {r['acceptance_length']:g}, K {r['num_speculative_tokens']}"
        f" (acceptance {r['acceptance_ratio']:.3f}), c {r['draft_cost_ratio']:g},"
        f" B* {r['ridge_batch_requests']:g}, h {r['step_overhead_ratio']:g}",
        "",
    ]
    best = "best_num_speculative_tokens" in r["rows"][0]
    header = f"{'concurrency':>11}  {'speedup':>8}  {'verdict':<7}  {'break-even':>10}"
    lines.append(header + (f"  {'best K':>6}  {'its speedup':>11}" if best else ""))
    for row in r["rows"]:
        line = (
            f"{row['concurrency']:>11g}  {row['speedup_ratio']:>8.6f}  {row['verdict']:<7}"
            f"  {row['breakeven_acceptance_ratio']:>10.3f}"
        )
        if best:
            line += f"  {row['best_num_speculative_tokens']:>6}  {row['best_speedup_ratio']:>11.6f}"
        lines.append(line)
    lines.append("")
    if r["crossover"] == "never_pays":
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
    p = sub.add_parser("predict", help="speedup, verdict and crossover per concurrency (§3b)")
    given = p.add_mutually_exclusive_group()
    given.add_argument(
        "--acceptance-length", type=float, metavar="TAU", help="tokens per verify step"
    )
    given.add_argument(
        "--position-acceptance",
        metavar="P0,P1,...",
        help="per-position acceptance: also the best K",
    )
    p.add_argument("--num-speculative-tokens", type=int, metavar="K", help="draft tokens per step")
    p.add_argument(
        "--ridge-batch", type=float, required=True, metavar="BSTAR", help="B* = a/b, plain"
    )
    _add_cost_options(p)
    p.add_argument(
        "--step-overhead-ratio", type=float, default=0.0, metavar="H", help="h (default 0)"
    )
    p.add_argument("--concurrency", required=True, metavar="1,2,4,...", help="running requests")
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
        sweep, result = model_fit.fit(args, _draft_cost)
    except (ModelError, InputError, economics.SweepError) as exc:
        print(f"spectax model fit: {exc}", file=sys.stderr)
        return 2
    data = model_fit.fit_json(sweep, result)
    print(json.dumps(data, indent=2) if args.format == "json" else model_fit.fit_text(data))
    if args.save_profile:
        url = load_config(args.config).config.database_url
        profile = model_fit.profile_of_fit(args.save_profile, sweep, result)
        asyncio.run(model_fit.save_profile(url, profile))
        print(f"saved profile {args.save_profile!r} (source sweep)", file=sys.stderr)
    return 0
