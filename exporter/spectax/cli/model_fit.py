"""`spectax model fit`: what it reads (a sweep CSV, or `vllm bench serve --save-result`
files), what it prints, and the profile it saves.

The bench files are read as vLLM 0.32.0 writes them (vllm/benchmarks/serve.py):
one JSON object per file (several, one a line, with `--append-result`) with
`max_concurrency` (null without `--max-concurrency`), `mean_tpot_ms` (time per
output token, first token excluded), `total_input_tokens`, `total_output_tokens`,
and, only when the server drafted at least one token during the run,
`spec_decode_num_drafts`, `spec_decode_draft_tokens`,
`spec_decode_accepted_tokens` (deltas of the server's `vllm:spec_decode_*`
counters over the run). So a file without them is a plain run, unless it was
tagged `--metadata speculative=true`: a speculative server that proposed
nothing writes no `spec_decode_*` keys at all, and is still a tax worth pricing.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from spectax.cli.files import read_text
from spectax.economics.formulas import draft_cost_floor
from spectax.economics.step_model import (
    PlainCurve,
    Profile,
    fit_plain_curve,
    plain_tokens_per_step,
)
from spectax.economics.sweep import CONFIDENCE, Interval, SweepFit, SweepRow, fit_sweep

CSV_COLUMNS = ("concurrency", "speedup", "acceptance_length", "num_speculative_tokens")
BENCH_KEYS = ("mean_tpot_ms", "total_input_tokens", "total_output_tokens", "max_concurrency")
#: A plain curve from a sweep needs two load levels at least 1.5x apart (as calibration's).
PLAIN_MIN_POINTS, PLAIN_MIN_SPREAD = 2, 1.5


class InputError(ValueError):
    """A file `spectax model fit` cannot use; the message is one line for the user."""


@dataclass(frozen=True, slots=True)
class BenchRun:
    """One `vllm bench serve` run, as much of it as the fit needs."""

    path: str
    concurrency: float
    tpot_seconds: float
    input_tokens: float
    output_tokens: float
    speculative: bool
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0


@dataclass(frozen=True, slots=True)
class Sweep:
    rows: tuple[SweepRow, ...]
    plain: PlainCurve | None
    sources: tuple[str, ...]


def read_sweep(paths: Sequence[str]) -> Sweep:
    """Every row of every file: CSV rows as they are, bench runs paired by concurrency."""
    rows: list[SweepRow] = []
    runs: list[BenchRun] = []
    for path in paths:
        text = read_text(path, InputError)
        if text.lstrip().startswith("{"):
            runs.extend(bench_runs(path, text))
        else:
            rows.extend(csv_rows(path, text))
    plain = None
    if runs:
        rows.extend(pair_runs(runs))
        plain = plain_curve([r for r in runs if not r.speculative])
    return Sweep(tuple(rows), plain, tuple(paths))


def csv_rows(path: str, text: str) -> list[SweepRow]:
    reader = csv.DictReader(io.StringIO(text))
    fields = [f.strip() for f in reader.fieldnames or []]
    missing = [c for c in CSV_COLUMNS if c not in fields]
    if missing:
        raise InputError(
            f"{path}: not a sweep CSV: missing column(s) {', '.join(missing)} (the header is "
            f"{','.join(CSV_COLUMNS)}[,draft_cost_ratio])"
        )
    rows = []
    for line, raw in enumerate(reader, start=2):
        record = {k.strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        try:
            values = [float(record[c]) for c in CSV_COLUMNS]
            c = float(record["draft_cost_ratio"]) if record.get("draft_cost_ratio") else None
        except ValueError:
            raise InputError(f"{path}, line {line}: not a number") from None
        rows.append(SweepRow(values[0], values[1], values[2], values[3], c))
    if not rows:
        raise InputError(f"{path}: the CSV has a header and no rows")
    return rows


def bench_runs(path: str, text: str) -> list[BenchRun]:
    """The runs in one result file (`--append-result` puts one JSON object a line)."""
    try:
        objects = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError:
        try:
            objects = [json.loads(text)]
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    return [bench_run(path, o) for o in objects]


def bench_run(path: str, result: Any) -> BenchRun:
    if not isinstance(result, dict) or any(k not in result for k in BENCH_KEYS):
        have = set(result) if isinstance(result, dict) else set()
        missing = ", ".join(k for k in BENCH_KEYS if k not in have)
        raise InputError(f"{path}: not a `vllm bench serve --save-result` file (no {missing})")
    if result["max_concurrency"] is None:
        raise InputError(
            f"{path}: a run without --max-concurrency: a sweep needs each run at a fixed one"
        )
    try:
        concurrency = float(result["max_concurrency"])
        if result.get("num_prompts"):  # fewer prompts than the limit: never that many at once
            concurrency = min(concurrency, float(result["num_prompts"]))
        tpot = float(result["mean_tpot_ms"]) / 1000.0
        drafted = "spec_decode_draft_tokens" in result
        tagged = str(result.get("speculative", "")).lower()
        speculative = drafted or tagged in ("true", "1", "yes")
        if tagged in ("false", "0", "no"):
            speculative = False
        run = BenchRun(
            path,
            concurrency,
            tpot,
            float(result["total_input_tokens"]),
            float(result["total_output_tokens"]),
            speculative,
            float(result.get("spec_decode_draft_tokens", 0)),
            float(result.get("spec_decode_accepted_tokens", 0)),
        )
    except (TypeError, ValueError):
        raise InputError(f"{path}: a bench result with a non-numeric field") from None
    if run.tpot_seconds <= 0 or run.output_tokens <= run.accepted_tokens:
        raise InputError(f"{path}: no time per output token (did every request fail?)")
    return run


def pair_runs(runs: Sequence[BenchRun]) -> list[SweepRow]:
    """One row per concurrency that has a speculative and a plain run.

    Measured speedup = plain mean TPOT / speculative mean TPOT. tau and K are per
    request-step, G/(G - A) and Dt/(G - A), so that steps without a draft count
    (vLLM's own acceptance length, 1 + A/drafts, counts only the steps that drafted).
    """
    by_level: dict[tuple[bool, float], BenchRun] = {}
    for run in runs:
        key = (run.speculative, run.concurrency)
        if key in by_level:
            kind = "speculative" if run.speculative else "plain"
            raise InputError(
                f"{run.path}: a second {kind} run at concurrency {run.concurrency:g} "
                f"(the first: {by_level[key].path}); give one of each per level"
            )
        by_level[key] = run
    rows = []
    for (speculative, level), spec in sorted(by_level.items(), key=lambda kv: kv[0][1]):
        plain = by_level.get((False, level))
        if not speculative or plain is None:
            continue
        steps = spec.output_tokens - spec.accepted_tokens
        rows.append(
            SweepRow(
                level,
                plain.tpot_seconds / spec.tpot_seconds,
                spec.output_tokens / steps,
                spec.draft_tokens / steps,
            )
        )
    if not rows:
        levels = sorted({(r.speculative, r.concurrency) for r in runs})
        seen = ", ".join(f"{'spec' if s else 'plain'}@{c:g}" for s, c in levels)
        raise InputError(
            f"no concurrency has both a speculative and a plain run (seen: {seen}); a file "
            "is speculative when it has spec_decode_* keys or `--metadata speculative=true`"
        )
    return rows


def plain_curve(runs: Sequence[BenchRun]) -> PlainCurve | None:
    """The plain engine's time per output token against its tokens per step: a + b*n.

    A plain step at concurrency B carries B decode tokens and the prompt tokens
    prefilled alongside (`plain_tokens_per_step`).
    """
    points = [
        (plain_tokens_per_step(r.concurrency, r.output_tokens, r.input_tokens), r.tpot_seconds)
        for r in runs
    ]
    return fit_plain_curve(points, PLAIN_MIN_POINTS, PLAIN_MIN_SPREAD)


def fit(
    args: argparse.Namespace,
    draft_cost: Callable[[argparse.Namespace], float],
    step_overhead_floor: float,
) -> tuple[Sweep, SweepFit]:
    """Read the files and fit, h at or above the method's floor. c is fitted with
    --fit-draft-cost, and for a draft model when neither --draft-cost-ratio nor the rows
    give it (its cost depends on its size); otherwise it is the one given, or the method's
    default (`draft_cost`)."""
    sweep = read_sweep(args.files)
    rows_give_c = any(r.draft_cost_ratio is not None for r in sweep.rows)
    fit_c = args.fit_draft_cost or (
        args.method == "draft_model" and args.draft_cost_ratio is None and not rows_give_c
    )
    c = 0.0 if fit_c else draft_cost(args)
    least_c = draft_cost_floor(args.draft_params, args.target_params)
    return sweep, fit_sweep(sweep.rows, fit_c, c, step_overhead_floor, draft_cost_floor=least_c)


#: What each end of a parameter's range is, and what would pin a parameter the sweep does
#: not (the module docstring of economics/sweep.py: h is read at small batch, c past the
#: ridge, B* off the turn between them).
RANGE_ENDS = {
    "ridge_batch_requests": ("B* >= 1", "the search's top"),
    "step_overhead_ratio": ("the method's floor h_min", "the search's top"),
    "draft_cost_ratio": ("c >= 0", "the search's top"),
}
SETTLE = {
    ("ridge_batch_requests", "high"): "the sweep may not reach the ridge: add higher concurrencies",
    ("ridge_batch_requests", "low"): "every level may be past the ridge: add concurrency 1 and 2",
    ("ridge_batch_requests", "flat"): "the sweep does not show where the speedup turns: add "
    "levels below and above it",
    ("step_overhead_ratio", None): "h is read at small batch: add levels well under B* (1, 2)",
    ("draft_cost_ratio", None): "c is read past the ridge: add levels well over B*",
}
TRADE_OFF = "; with c fitted too, h and c trade off: two K at one level separate them"


def parameter_json(interval: Interval, c_fitted: bool) -> dict[str, Any]:
    """One fitted parameter: its value, 95% interval, range and, when the sweep does not
    pin it, why (at a bound, or the error flat to one) and what would."""
    return {
        "value": interval.value,
        "low": interval.low,
        "high": interval.high,
        "range": list(interval.bounds),
        "pinned": interval.pinned,
        "why": None if interval.pinned else why_not_pinned(interval, c_fitted),
    }


def why_not_pinned(interval: Interval, c_fitted: bool) -> str:
    """One clause: where the sweep leaves the parameter free, and what would pin it."""
    lo, hi = interval.bounds
    low_end, high_end = RANGE_ENDS[interval.name]
    at_low = interval.at_bound and interval.value - lo <= hi - interval.value
    if interval.at_bound:
        where = f"at {low_end} ({lo:g})" if at_low else f"at {high_end} ({hi:g})"
    elif interval.high_open:
        where = f"the error is flat up to {high_end} ({hi:g})"
    else:
        where = f"the error is flat down to {low_end} ({lo:g})"
    if interval.name == "ridge_batch_requests":
        side = "flat" if not interval.at_bound else "low" if at_low else "high"
        settle = SETTLE[interval.name, side]
    else:
        settle = SETTLE[interval.name, None]
        if interval.name == "step_overhead_ratio" and c_fitted:
            settle += TRADE_OFF
    return f"{where}: {settle}"


def fit_json(sweep: Sweep, result: SweepFit, method: str | None = None) -> dict[str, Any]:
    plain = sweep.plain
    return {
        "method": method,
        "ridge_batch_requests": result.ridge_batch,
        "step_overhead_ratio": result.step_overhead_ratio,
        "step_overhead_floor": result.step_overhead_floor,
        "draft_cost_ratio": result.draft_cost_ratio,
        "draft_cost_fitted": result.draft_cost_fitted,
        "at_bound": list(result.bounded),
        "not_pinned": list(result.not_pinned),
        "confidence": {
            "level": CONFIDENCE,
            "method": "profile likelihood",
            "row_noise_ratio": result.row_noise,
        },
        "parameters": {
            i.name: parameter_json(i, result.draft_cost_fitted) for i in result.intervals
        },
        "rows": [
            {
                "concurrency": r.row.concurrency,
                "measured": r.measured,
                "modelled": r.modelled,
                "error_ratio": r.error_ratio,
                "acceptance_length": r.row.acceptance_length,
                "num_speculative_tokens": r.row.num_speculative_tokens,
            }
            for r in result.rows
        ],
        "mean_abs_error_ratio": result.mean_abs_error_ratio,
        "plain_curve": None
        if plain is None
        else {
            "fixed_seconds": plain.fixed_seconds,
            "per_token_seconds": plain.per_token_seconds,
            "ridge_batch_requests": plain.ridge_batch,
        },
    }


PARAMETER_LABELS = {
    "ridge_batch_requests": ("B*", "B* (ridge batch, requests)"),
    "step_overhead_ratio": ("h", "h  (step overhead ratio)  "),
    "draft_cost_ratio": ("c", "c  (draft cost ratio)     "),
}


def fit_text(data: dict[str, Any]) -> str:
    lines = [
        f"{'concurrency':>11}  {'tau':>6}  {'K':>5}  {'measured':>8}  {'modelled':>8}  {'error':>7}"
    ]
    for r in data["rows"]:
        lines.append(
            f"{r['concurrency']:>11g}  {r['acceptance_length']:>6.3f}"
            f"  {r['num_speculative_tokens']:>5.2f}"
            f"  {r['measured']:>8.4f}  {r['modelled']:>8.4f}  {r['error_ratio']:>+7.1%}"
        )
    lines.append("")
    level = f"{data['confidence']['level']:.0%}"
    for name, (_, label) in PARAMETER_LABELS.items():
        p = data["parameters"].get(name)
        if p is not None:
            extra = (
                f" (h >= {data['step_overhead_floor']:g})" if name == "step_overhead_ratio" else ""
            )
            lines.append(
                f"{label}  {p['value']:<8.4g} {level}: {p['low']:.4g} to {p['high']:.4g}{extra}"
            )
        elif name == "draft_cost_ratio":
            c = data["draft_cost_ratio"]
            lines.append(f"{label}  " + ("per row" if c is None else f"{c:.4g} (fixed)"))
    noise = data["confidence"]["row_noise_ratio"]
    lines.append(f"mean |error|                {data['mean_abs_error_ratio']:.1%}")
    lines.append(f"  ({level} profile-likelihood intervals, each row's noise taken as {noise:.1%})")
    free = [(n, p) for n, p in data["parameters"].items() if not p["pinned"]]
    if free:
        lines.append("not pinned by this sweep:")
        lines += [f"  {PARAMETER_LABELS[n][0]}: {p['why']}" for n, p in free]
    plain = data["plain_curve"]
    if plain:
        bstar = plain["ridge_batch_requests"]
        lines.append(
            f"plain curve: {plain['fixed_seconds'] * 1e3:.3f} ms"
            f" + {plain['per_token_seconds'] * 1e3:.4f} ms x tokens/step"
            + (f" (its B* {bstar:.4g})" if bstar else " (flat)")
        )
    return "\n".join(lines)


def profile_of_fit(name: str, sweep: Sweep, result: SweepFit, method: str | None) -> Profile:
    """The stored profile: h and c are the method's, so the method goes with them."""
    return Profile(
        name=name,
        source="sweep",
        learned_from="spectax model fit " + " ".join(sweep.sources),
        ridge_batch=result.ridge_batch,
        step_overhead_ratio=result.step_overhead_ratio,
        draft_cost_ratio=result.draft_cost_ratio,
        plain=sweep.plain,
        points=len(result.rows),
        mean_abs_error_ratio=result.mean_abs_error_ratio,
        method=method,
    )


async def save_profile(url: str, profile: Profile) -> None:
    from spectax.store import Store

    store = await Store.open(url)
    try:
        await store.save_profile(profile, datetime.now(UTC))
    finally:
        await store.close()
