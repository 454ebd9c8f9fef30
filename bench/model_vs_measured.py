"""Model check against measurement: spectax's verdict without a control, held out, vs the control.

Starts the live-vLLM tier's three servers (tests/live_vllm/: n-gram speculation,
draft-model speculation, no-speculation control; same tiny random-weight model) and,
for each workload and concurrency level, drives each server ALONE (the other two sit
idle) with the same seeded request sequence for `--seconds`, split in `--rounds`
rounds in which the three take turns (background load then hits all three alike); each
round visits every workload and level before the next (`schedule`).
`collect` keeps the raw runs (`--save`); `analyse` judges them (`--load`):

- measured speedup = control TPOT / endpoint TPOT, from the deltas of
  `vllm:request_time_per_output_token_seconds` sum/count summed over the rounds;
- modelled = spectax's own `estimate_speedup` over the same deltas, B the time-average
  of `vllm:num_requests_running`, for each source of the counterfactual, calibrated on
  data the judged row did not contribute: the control's plain curve from the same
  workload's OTHER half of the levels (`control`), from another workload (`profile`),
  §3b's B*, h, c fitted to another workload's speedups (`sweep`, where the tree has
  `fit_sweep`), the configured defaults; and §3 as it was (h = 0, B* from the
  endpoint's own step times) for contrast;
- c: 0 for n-gram (spectax's default), and for the draft model its parameter count
  relative to the target's (~0.88: both carry a 4096 x 128 embedding and LM head,
  which outweigh the one layer the draft lacks).

    PYTHONPATH=exporter python bench/model_vs_measured.py [--seconds 60] [--rounds 12] --save F
    PYTHONPATH=exporter python bench/model_vs_measured.py --load bench/data/FILE.json.gz

Needs `bash tests/live_vllm/setup.sh` first to measure. ~55 minutes with the defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gzip
import itertools
import json
import os
import platform
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from live_vllm import servers as live  # noqa: E402
from live_vllm import traffic  # noqa: E402
from live_vllm.servers import Raw, VllmServer  # noqa: E402
from spectax.economics.calibration import (  # noqa: E402
    MIN_REQUESTS,
    MIN_SPREAD,
    MIN_WINDOWS,
    StepPoint,
)
from spectax.economics.formulas import DEFAULT_RIDGE_BATCH, modelled_speedup  # noqa: E402
from spectax.economics.step_model import (  # noqa: E402
    PlainCurve,
    StepModel,
    estimate_speedup,
    fit_plain_curve,
    plain_tokens_per_step,
    verdict_of_band,
)

try:  # the sweep fitter (issue 15, item 4), where this tree has it
    from spectax.economics.sweep import SweepFit, SweepRow, fit_sweep
except ImportError:  # pragma: no cover
    fit_sweep = None

WORKLOADS = {
    # name: (prompt kinds, temperatures)
    "repetitive t=0": (("repetitive",), (0.0,)),
    "mixed": (("repetitive", "random"), (0.0, 1.0)),
    "chat t=0.7": (("chat",), (0.7,)),
}
SUBWINDOW = 3.0  # seconds per calibration point
ORDERS = {True: "every workload and level in each round", False: "a (workload, level) at a time"}


@dataclass
class Run:
    server: str
    workload: str
    level: int
    delta: dict[str, float]
    running: list[float]
    points: list[StepPoint]
    requests: int
    seconds: float
    subwindows: list[dict[str, float]]

    @property
    def concurrency(self) -> float:
        """Time-average of running requests (sampled every second), as spectax computes B."""
        return sum(self.running) / len(self.running) if self.running else float(self.level)

    def merge(self, other: Run) -> Run:
        keys = self.delta.keys() | other.delta.keys()
        return Run(
            self.server,
            self.workload,
            self.level,
            {k: self.delta.get(k, 0.0) + other.delta.get(k, 0.0) for k in keys},
            self.running + other.running,
            self.points + other.points,
            self.requests + other.requests,
            self.seconds + other.seconds,
            self.subwindows + other.subwindows,
        )


def params(config: dict[str, int]) -> int:
    """Parameter count of a Llama config: embeddings, LM head, attention, MLP, norms."""
    h, i, n, v = (
        config["hidden_size"],
        config["intermediate_size"],
        config["num_hidden_layers"],
        config["vocab_size"],
    )
    kv = config["num_key_value_heads"] * config.get("head_dim", h // config["num_attention_heads"])
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * i + 2 * h
    return 2 * v * h + n * per_layer + h


def draft_cost_ratio() -> float:
    models = live.vllm_home() / "models"
    target = json.loads((models / "target" / "config.json").read_text())
    draft = json.loads((models / "draft" / "config.json").read_text())
    return params(draft) / params(target)


def measure(server: VllmServer, workload: str, level: int, seconds: float, seed: int) -> Run:
    kinds, temperatures = WORKLOADS[workload]
    live.settle([server])
    before = server.raw()
    samples: list[Raw] = [before]
    running: list[float] = []
    stop = threading.Event()

    sub_running: list[float] = []  # mean running requests of each sub-window

    def sampler() -> None:
        next_point = time.monotonic() + SUBWINDOW
        since = len(running)
        while not stop.wait(1.0):
            raw = server.raw()
            running.append(raw.get("running") or 0.0)
            if time.monotonic() >= next_point:
                samples.append(raw)
                part = running[since:]
                sub_running.append(sum(part) / len(part) if part else 0.0)
                since = len(running)
                next_point += SUBWINDOW

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    result = asyncio.run(
        traffic.drive(
            server.url,
            live.MODEL_NAME,
            concurrency=level,
            seconds=seconds,
            max_requests=10_000,
            requests=traffic.mix(seed, kinds, temperatures),
        )
    )
    stop.set()
    thread.join()
    after = live.settle([server])[server.name]
    samples.append(after)
    if result.errors:
        raise RuntimeError(f"{server.name}: {result.errors[:3]}")
    points = []
    subwindows = []
    sub_running.append(sum(running[-3:]) / len(running[-3:]) if running else 0.0)
    for i, (a, b) in enumerate(itertools.pairwise(samples)):
        d = b - a
        subwindows.append({**d, "running_mean": sub_running[i] if i < len(sub_running) else 0.0})
        if d.get("iter_count", 0) > 0 and d.get("itl_count", 0) > 0 and d["iter_sum"] > 0:
            points.append(StepPoint(d["iter_sum"] / d["iter_count"], d["itl_sum"] / d["itl_count"]))
    return Run(
        server.name,
        workload,
        level,
        after - before,
        running,
        points,
        result.requests,
        result.seconds,
        subwindows,
    )


def schedule(
    workloads: list[str], levels: list[int], rounds: int, interleave: bool
) -> list[tuple[int, str, int]]:
    """(round, workload, level) in the order they are driven. Interleaved, each round
    visits every workload and level before the next begins, so a slow spell of the
    machine (minutes long on a shared VM) lands on every level and workload alike
    instead of on the one being driven; a held-out curve fitted on some levels and
    judged on others then measures the model, not the drift. Blocked: all rounds of
    one (workload, level) in a row, as before."""
    if interleave:
        return [(t, w, lv) for t in range(rounds) for w in workloads for lv in levels]
    return [(t, w, lv) for w in workloads for lv in levels for t in range(rounds)]


def collect(
    workloads: list[str], levels: list[int], seconds: float, rounds: int, interleave: bool
) -> dict:
    """Drive the three servers and return the raw runs (JSON-able), one per server,
    workload, level and round."""
    workdir = live.new_workdir("spectax-bench-")
    fleet = {s.name: s for s in live.fleet(workdir)}
    started = time.monotonic()
    runs: list[Run] = []
    # /metrics of every server before a (workload, level)'s first round and after its last
    pages: dict[str, dict] = {}
    with live.running(list(fleet.values())) as ready:
        print(f"servers ready in {ready:.0f} s (logs in {workdir})", flush=True)
        for server in fleet.values():  # warm-up: the first requests of a process are slow
            asyncio.run(
                traffic.drive(server.url, live.MODEL_NAME, concurrency=2, seconds=2, max_requests=6)
            )
        load_before = os.getloadavg()
        order = ["control", "ngram", "draft"]
        for turn, workload, level in schedule(workloads, levels, rounds, interleave):
            key = f"{workload} c={level}"
            if key not in pages:
                pages[key] = {"before": {n: fleet[n].page() for n in order}, "seconds": 0.0}
            started_at = time.time()
            for name in order[turn % 3 :] + order[: turn % 3]:
                run = measure(
                    fleet[name], workload, level, seconds / rounds, seed=100 * level + turn
                )
                runs.append(run)
                print(
                    f"  {workload:15s} c={level} {name:8s} round {turn}: "
                    f"{run.requests:4d} requests, B={run.concurrency:.2f}",
                    flush=True,
                )
            pages[key]["seconds"] += time.time() - started_at
            if turn == rounds - 1:
                pages[key]["after"] = {n: fleet[n].page() for n in order}
        load_after = os.getloadavg()
    return {
        "machine": f"{platform.platform()}, {platform.processor() or platform.machine()}",
        "seconds": seconds,
        "rounds": rounds,
        "interleaved": interleave,
        "elapsed": time.monotonic() - started,
        "load_before": load_before[1],
        "load_after": load_after[1],
        "cpus": os.cpu_count(),
        "draft_cost_ratio": draft_cost_ratio(),
        "runs": [dataclasses.asdict(r) for r in runs],
        "pages": pages,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=60.0, help="traffic per server, workload and level"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=12,
        help="split each run in this many rounds, the servers taking turns (so a change in "
        "background load hits all three alike)",
    )
    parser.add_argument("--levels", default="1,2,4,8", help="concurrency levels")
    parser.add_argument(
        "--blocked",
        action="store_true",
        help="drive all rounds of a (workload, level) in a row (the runs before 2026-12-02) "
        "instead of interleaving every workload and level within each round",
    )
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated")
    parser.add_argument(
        "--save", type=Path, help="write the raw runs to this JSON file (gzipped if it ends .gz)"
    )
    parser.add_argument(
        "--load",
        type=Path,
        help="analyse the raw runs of this JSON file (.gz: gzipped) instead of measuring",
    )
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    workloads = [w.strip() for w in args.workloads.split(",")]
    if args.load:
        raw = args.load.read_bytes()
        data = json.loads(gzip.decompress(raw) if args.load.suffix == ".gz" else raw)
    else:
        if not live.installed():
            print(f"vLLM not installed in {live.vllm_home()}: run bash tests/live_vllm/setup.sh")
            return 2
        data = collect(workloads, levels, args.seconds, args.rounds, not args.blocked)
        if args.save:
            text = json.dumps(data).encode()
            args.save.write_bytes(gzip.compress(text) if args.save.suffix == ".gz" else text)
    return analyse(data)


# ------------------------------------------------------------------ the hold-out check

ENDPOINTS = ("ngram", "draft")
SHORT = {"repetitive t=0": "rep", "mixed": "mixed", "chat t=0.7": "chat"}
KINDS = ("control", "profile", "sweep", "defaults", "old §3")


@dataclass
class Row:
    """One judged (workload, level, endpoint) under one calibration source."""

    workload: str
    endpoint: str
    level: int
    concurrency: float
    alpha: float | None
    tau: float | None
    kind: str  # control | profile | sweep | defaults | old §3
    source: str  # the kind and what it was calibrated on
    measured: float
    noise: float  # the measured speedup's own standard error, relative (`round_noise`)
    modelled: float | None = None
    low: float | None = None
    high: float | None = None

    @property
    def error(self) -> float | None:
        return None if self.modelled is None else (self.modelled - self.measured) / self.measured

    @property
    def verdict_measured(self) -> str:
        return "pays" if self.measured > 1.0 else "tax"

    @property
    def verdict_modelled(self) -> str:
        if self.low is None or self.high is None:
            return "-"
        return verdict_of_band(self.low, self.high)


def tpot(d: dict[str, float]) -> float:
    return d["tpot_sum"] / d["tpot_count"]


def mean_running(run: dict) -> float:
    """Time-average of running requests (sampled every second), as spectax computes B."""
    running = run["running"]
    return sum(running) / len(running) if running else float(run["level"])


def merged(runs: list[dict], server: str, workload: str, level: int) -> tuple[dict, float]:
    """The summed deltas of a (server, workload, level)'s rounds, and its mean concurrency."""
    parts = [
        r for r in runs if (r["server"], r["workload"], r["level"]) == (server, workload, level)
    ]
    keys = {k for r in parts for k in r["delta"]}
    delta = {k: sum(r["delta"].get(k, 0.0) for r in parts) for k in keys}
    running = [x for r in parts for x in r["running"]]
    return delta, (sum(running) / len(running) if running else float(level))


def round_noise(runs: list[dict], endpoint: str, workload: str, level: int) -> float:
    """How well the measurement knows itself: the standard error of the per-round speedups
    (control TPOT / endpoint TPOT, the k-th round of each), relative to their mean. An error
    within about twice this is noise, not the model."""
    of = [
        [r for r in runs if (r["server"], r["workload"], r["level"]) == (s, workload, level)]
        for s in ("control", endpoint)
    ]
    ratios = [tpot(c["delta"]) / tpot(e["delta"]) for c, e in zip(*of, strict=True)]
    if len(ratios) < 2:
        return float("nan")
    return statistics.stdev(ratios) / len(ratios) ** 0.5 / statistics.mean(ratios)


def plain_points(runs: list[dict], workload: str, levels: list[int]) -> list[tuple[float, float]]:
    """The control's rounds as spectax's plain points (`calibration.plain_point`): tokens a
    plain step carried against the mean time per output token, from >= 10 finished requests."""
    points = []
    for r in runs:
        if r["server"] != "control" or r["workload"] != workload or r["level"] not in levels:
            continue
        d = r["delta"]
        if d.get("tpot_count", 0) >= MIN_REQUESTS and d["output"] > 0 and d["tpot_sum"] > 0:
            x = plain_tokens_per_step(mean_running(r), d["output"], d["prompt"])
            points.append((x, tpot(d)))
    return points


def describe(curve: PlainCurve | None, points: int) -> str:
    if curve is None:
        return f"no sound fit from {points} points"
    ridge = curve.ridge_batch
    return (
        f"a = {curve.fixed_seconds * 1e3:.2f} ms, b = {curve.per_token_seconds * 1e3:.3f} ms/token"
        + (f", B* = {ridge:.1f}" if ridge else " (flat)")
        + f", residuals {curve.residuals[0]:+.0%}/{curve.residuals[1]:+.0%}, {curve.points} points"
    )


def judge(row: Row, model: StepModel, d: dict, c: float) -> Row:
    """spectax's own estimate for the row's counters under `model` (`estimate_speedup`)."""
    estimate = estimate_speedup(
        model,
        output_tokens=d["output"],
        accepted=d.get("accepted", 0.0),
        draft_tokens=d.get("draft_tokens", 0.0),
        prompt_tokens=d["prompt"],
        concurrency=max(row.concurrency, 1.0),
        c=c,
        time_per_output_token=tpot(d),
    )
    if estimate is not None:
        row.modelled, row.low, row.high = estimate.speedup, estimate.low, estimate.high
    return row


def sweep_rows(runs: list[dict], endpoint: str, workload: str, levels: list[int]) -> list:
    """A workload's rows as a benchmark sweep: per request-step, tau = G/(G-A) and
    K = Dt/(G-A), so §3b over the row is `modelled_speedup` over its counters."""
    rows = []
    for level in levels:
        d, b = merged(runs, endpoint, workload, level)
        control, _ = merged(runs, "control", workload, level)
        steps = d["output"] - d.get("accepted", 0.0)
        rows.append(
            SweepRow(
                b, tpot(control) / tpot(d), d["output"] / steps, d.get("draft_tokens", 0) / steps
            )
        )
    return rows


def analyse(data: dict) -> int:
    """Hold-out: each source calibrated on data the judged row did not contribute to."""
    runs = data["runs"]
    workloads = list(dict.fromkeys(r["workload"] for r in runs))
    levels = sorted({r["level"] for r in runs})
    halves = (levels[0::2], levels[1::2])
    costs = {"ngram": 0.0, "draft": data["draft_cost_ratio"]}
    print(f"machine: {data['machine']}")
    print(
        f"runs: {data['seconds']:.0f} s per server, workload and level, in {data['rounds']} "
        f"rounds, one server at a time, "
        f"{ORDERS[bool(data.get('interleaved'))]}; total {data['elapsed']:.0f} s; load average "
        f"before/after {data['load_before']:.1f}/{data['load_after']:.1f} (5 min, "
        f"{data['cpus']} CPUs); c(ngram) = 0, c(draft) = {costs['draft']:.2f} (parameter ratio)"
    )

    print("\ncalibration (control's plain curve, a + b*n over tokens per plain step):")
    control_curves: dict[tuple[str, int], tuple[str, PlainCurve | None]] = {}
    profiles: dict[str, PlainCurve | None] = {}
    for workload in workloads:
        for half, other in (halves, halves[::-1]):
            points = plain_points(runs, workload, other)
            curve = fit_plain_curve(points, MIN_WINDOWS, MIN_SPREAD)
            label = f"control({','.join(map(str, other))})"
            print(f"  {workload:15s} {label:16s} {describe(curve, len(points))}")
            for level in half:
                control_curves[workload, level] = (label, curve)
        points = plain_points(runs, workload, levels)
        curve = fit_plain_curve(points, MIN_WINDOWS, MIN_SPREAD)
        print(f"  {workload:15s} {'all levels':16s} {describe(curve, len(points))}")
        # As the store keeps a profile and reads it back (store/profiles.py `profile_of`):
        # a, b and the residual band, but no load range (a profile is used at any load).
        profiles[workload] = (
            PlainCurve(curve.fixed_seconds, curve.per_token_seconds, curve.points, curve.residuals)
            if curve
            else None
        )

    sweeps: dict[tuple[str, str], SweepFit] = {}
    if fit_sweep is not None:
        print("\nsweep fits (B*, h, c to the calibration workload's measured speedups, §3b):")
        for endpoint in ENDPOINTS:
            for workload in workloads:
                rows = sweep_rows(runs, endpoint, workload, levels)
                fit = fit_sweep(rows, endpoint == "draft", costs[endpoint])
                sweeps[endpoint, workload] = fit
                c = fit.draft_cost_ratio if fit.draft_cost_ratio is not None else costs[endpoint]
                print(
                    f"  {endpoint:6s} on {workload:15s} B* = {fit.ridge_batch:7.1f}, "
                    f"h = {fit.step_overhead_ratio:5.2f}, c = {c:.2f}, mean |error| "
                    f"{fit.mean_abs_error_ratio:.1%}"
                    + (f" (on a bound: {', '.join(fit.bounded)})" if fit.bounded else "")
                )

    own: dict[str, float | None] = {}
    for endpoint in ENDPOINTS:
        steps = [
            (p["tokens_per_step"], p["step_seconds"])
            for r in runs
            if r["server"] == endpoint
            for p in r["points"]
        ]
        curve = fit_plain_curve(steps, MIN_WINDOWS, MIN_SPREAD)
        own[endpoint] = curve.ridge_batch if curve else None
        print(f"old §3, {endpoint}'s own step times: {describe(curve, len(steps))}")

    rows: list[Row] = []
    for workload in workloads:
        for endpoint in ENDPOINTS:
            c = costs[endpoint]
            for level in levels:
                d, b = merged(runs, endpoint, workload, level)
                control, _ = merged(runs, "control", workload, level)
                dt, dr = d.get("draft_tokens", 0.0), d.get("drafts", 0.0)
                alpha = d["accepted"] / dt if dt else None
                tau = 1 + d["accepted"] / dr if dr else None

                measured = tpot(control) / tpot(d)
                noise = round_noise(runs, endpoint, workload, level)
                base = Row(workload, endpoint, level, b, alpha, tau, "", "", measured, noise)

                def row(kind: str, source: str, base: Row = base) -> Row:
                    return dataclasses.replace(base, kind=kind, source=source)

                label, curve = control_curves[workload, level]
                judged = row("control", label)
                if curve is not None:
                    model = StepModel(
                        ridge_batch=curve.ridge_batch or DEFAULT_RIDGE_BATCH,
                        step_overhead_ratio=0.0,
                        source="control",
                        curve=curve,
                    )
                    judged = judge(judged, model, d, c)
                rows.append(judged)
                others = [w for w in workloads if w != workload]
                for other in others:
                    name = f"profile({SHORT.get(other, other)})"
                    plain = profiles[other]
                    judged = row("profile", name)
                    if plain is not None:
                        model = StepModel(
                            ridge_batch=plain.ridge_batch or DEFAULT_RIDGE_BATCH,
                            step_overhead_ratio=0.0,
                            source="profile",
                            curve=plain,
                            profile=name,
                        )
                        judged = judge(judged, model, d, c)
                    rows.append(judged)
                for other in others:
                    fit = sweeps.get((endpoint, other))
                    if fit is None:
                        continue
                    model = StepModel(
                        ridge_batch=fit.ridge_batch,
                        step_overhead_ratio=fit.step_overhead_ratio,
                        source="sweep",
                        relative_error=fit.mean_abs_error_ratio,
                        overhead_known=True,  # fitted on the same method's sweep
                    )
                    c_fit = fit.draft_cost_ratio if fit.draft_cost_ratio is not None else c
                    name = f"sweep({SHORT.get(other, other)})"
                    rows.append(judge(row("sweep", name), model, d, c_fit))
                rows.append(judge(row("defaults", "defaults"), StepModel(), d, c))
                old = row("old §3", "old §3")
                ridge = own[endpoint]
                if ridge is not None and dt > 0:
                    old.modelled = modelled_speedup(d["output"], d["accepted"], dt, b, ridge, c)
                    old.low = old.high = old.modelled
                rows.append(old)

    print()
    header = (
        f"{'workload':15s} {'endpoint':8s} {'conc':>4s} {'B':>5s} {'alpha':>5s} {'tau':>4s} "
        f"{'source':15s} {'modelled':>8s} {'band':>11s} {'measured':>8s} {'+-':>4s} {'error':>6s} "
        f"{'v(meas)':7s} {'v(model)':9s}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        band = f"{r.low:.2f}-{r.high:.2f}" if r.low is not None and r.high is not None else "-"
        print(
            f"{r.workload:15s} {r.endpoint:8s} {r.level:4d} {r.concurrency:5.2f} "
            + (f"{r.alpha:5.2f} " if r.alpha is not None else "    - ")
            + (f"{r.tau:4.2f} " if r.tau is not None else "   - ")
            + f"{r.source:15s} "
            + (f"{r.modelled:8.3f} " if r.modelled is not None else "       - ")
            + f"{band:>11s} {r.measured:8.3f} {r.noise:4.0%} "
            + (f"{r.error:+6.0%} " if r.error is not None else "     - ")
            + f"{r.verdict_measured:7s} {r.verdict_modelled:9s}"
        )

    print()
    header = (
        f"{'source':9s} {'rows':>4s} {'mean |error|':>12s} {'max |error|':>11s} "
        f"{'direction right (|measured-1| > 0.1)':>37s} {'wrong':>5s} {'uncertain':>9s} "
        f"{'|error| <= 2 noise':>18s}"
    )
    print(header)
    print("-" * len(header))
    for kind in KINDS:
        of_kind = [r for r in rows if r.kind == kind and r.error is not None]
        if not of_kind:
            print(f"{kind:9s}    - (not exercised)")
            continue
        errors = [abs(r.error) for r in of_kind if r.error is not None]
        clear = [r for r in of_kind if abs(r.measured - 1.0) > 0.1]
        right = sum(r.verdict_modelled == r.verdict_measured for r in clear)
        wrong = sum(r.verdict_modelled not in (r.verdict_measured, "uncertain") for r in clear)
        uncertain = sum(r.verdict_modelled == "uncertain" for r in of_kind) / len(of_kind)
        missing = sum(1 for r in rows if r.kind == kind and r.error is None)
        within = sum(abs(r.error or 0.0) <= 2 * r.noise for r in of_kind)
        print(
            f"{kind:9s} {len(of_kind):4d} {sum(errors) / len(errors):12.1%} {max(errors):11.1%} "
            f"{f'{right}/{len(clear)}':>37s} {wrong:5d} {uncertain:9.0%} "
            f"{f'{within}/{len(of_kind)}':>18s}"
            + (f"   ({missing} rows without a figure)" if missing else "")
        )
    print(
        "baseline: not exercised (it needs the same server's history without speculation, "
        "and these servers speculate from start-up)"
    )
    if fit_sweep is None:
        print("sweep: not exercised (spectax.economics.sweep.fit_sweep is not on this tree)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
