"""Model check against measurement: modelled speedup (calibrated B*) vs the control's TPOT ratio.

Starts the live-vLLM tier's three servers (tests/live_vllm/: n-gram speculation,
draft-model speculation, no-speculation control; same tiny random-weight model) and,
for each workload and concurrency level, drives each server ALONE (the other two sit
idle) with the same seeded request sequence for `--seconds`, split in `--rounds`
rounds in which the three take turns (background load then hits all three alike):

- measured speedup = control TPOT / endpoint TPOT, from the deltas of
  `vllm:request_time_per_output_token_seconds` sum/count over the run;
- modelled speedup = `spectax.economics.formulas.modelled_speedup(G, A, Dt, B, B*, c)` from the
  same run's deltas, with B the time-average of `vllm:num_requests_running` (sampled
  every second) and B* calibrated per endpoint the way spectax does it: Theil-Sen
  `spectax.economics.calibration.fit_ridge_batch` over sub-windows of every run of that endpoint
  (mean tokens/step from `vllm:iteration_tokens_total`, mean step time from
  `vllm:inter_token_latency_seconds`);
- c: 0 for n-gram (spectax's default), and for the draft model its parameter count
  relative to the target's (~0.88: both carry a 4096 x 128 embedding and LM head,
  which outweigh the one layer the draft lacks).

    PYTHONPATH=exporter python bench/model_vs_measured.py [--seconds 20] [--rounds 4]

Needs `bash tests/live_vllm/setup.sh` first. ~14 minutes with the defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import json
import os
import platform
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
from spectax.economics import fit_plain_curve  # noqa: E402
from spectax.economics.calibration import StepPoint  # noqa: E402
from spectax.economics.formulas import modelled_speedup  # noqa: E402

WORKLOADS = {
    # name: (prompt kinds, temperatures)
    "repetitive t=0": (("repetitive",), (0.0,)),
    "mixed": (("repetitive", "random"), (0.0, 1.0)),
    "chat t=0.7": (("chat",), (0.7,)),
}
SUBWINDOW = 3.0  # seconds per calibration point


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


def collect(workloads: list[str], levels: list[int], seconds: float, rounds: int) -> dict:
    """Drive the three servers and return the raw runs (JSON-able), one per server,
    workload, level and round."""
    workdir = live.new_workdir("spectax-bench-")
    fleet = {s.name: s for s in live.fleet(workdir)}
    started = time.monotonic()
    runs: list[Run] = []
    pages: dict[str, dict] = {}  # /metrics of every server before and after each level
    with live.running(list(fleet.values())) as ready:
        print(f"servers ready in {ready:.0f} s (logs in {workdir})", flush=True)
        for server in fleet.values():  # warm-up: the first requests of a process are slow
            asyncio.run(
                traffic.drive(server.url, live.MODEL_NAME, concurrency=2, seconds=2, max_requests=6)
            )
        load_before = os.getloadavg()
        for workload in workloads:
            for level in levels:
                order = ["control", "ngram", "draft"]
                key = f"{workload} c={level}"
                pages[key] = {"before": {n: fleet[n].page() for n in order}}
                started_at = time.time()
                for turn in range(rounds):
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
                pages[key]["after"] = {n: fleet[n].page() for n in order}
                pages[key]["seconds"] = time.time() - started_at
        load_after = os.getloadavg()
    return {
        "machine": f"{platform.platform()}, {platform.processor() or platform.machine()}",
        "seconds": seconds,
        "rounds": rounds,
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
        "--seconds", type=float, default=20.0, help="traffic per server, workload and level"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=4,
        help="split each run in this many rounds, the servers taking turns (so a change in "
        "background load hits all three alike)",
    )
    parser.add_argument("--levels", default="1,2,4,8,12", help="concurrency levels")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated")
    parser.add_argument("--save", type=Path, help="write the raw runs to this JSON file")
    parser.add_argument(
        "--load", type=Path, help="analyse the raw runs of this JSON file instead of measuring"
    )
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    workloads = [w.strip() for w in args.workloads.split(",")]
    if args.load:
        data = json.loads(args.load.read_text())
    else:
        if not live.installed():
            print(f"vLLM not installed in {live.vllm_home()}: run bash tests/live_vllm/setup.sh")
            return 2
        data = collect(workloads, levels, args.seconds, args.rounds)
        if args.save:
            args.save.write_text(json.dumps(data))
    return analyse(data)


def analyse(data: dict) -> int:
    """The table: per workload, level and endpoint, modelled against measured."""
    merged: dict[tuple[str, str, int], Run] = {}
    for raw in data["runs"]:
        run = Run(**{**raw, "points": [StepPoint(**p) for p in raw["points"]]})
        key = (run.server, run.workload, run.level)
        merged[key] = merged[key].merge(run) if key in merged else run
    runs = list(merged.values())
    fleet = sorted({r.server for r in runs})
    workloads = list(dict.fromkeys(r.workload for r in runs))
    levels = sorted({r.level for r in runs})
    elapsed, load_before, load_after = data["elapsed"], data["load_before"], data["load_after"]
    c_draft = data["draft_cost_ratio"]
    costs = {"ngram": 0.0, "draft": c_draft}
    fits = {}
    for name in fleet:
        points = [p for r in runs if r.server == name for p in r.points]
        fits[name] = fit_plain_curve([(p.tokens_per_step, p.step_seconds) for p in points], 8, 1.5)
        fit = fits[name]
        described = (
            f"B* = {fit.ridge_batch or float('inf'):.1f} (a = {fit.fixed_seconds * 1e3:.2f} ms, "
            f"b = {fit.per_token_seconds * 1e3:.3f} ms/token, {fit.points} points)"
            if fit
            else f"no sound fit from {len(points)} points"
        )
        print(f"calibration {name}: {described}")

    print()
    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}")
    print(
        f"runs: {data['seconds']:.0f} s per server, workload and level, "
        f"in {data['rounds']} rounds, "
        f"one server at a time; c(ngram) = 0, c(draft) = {c_draft:.2f} (parameter ratio); "
        f"total {elapsed:.0f} s; load average before/after "
        f"{load_before:.1f}/{load_after:.1f} (5 min, {data['cpus']} CPUs)"
    )
    header = (
        f"{'workload':15s} {'endpoint':8s} {'conc':>4s} {'B':>5s} {'alpha':>6s} {'tau':>5s} "
        f"{'B*':>6s} {'modelled':>8s} {'measured':>8s} {'error':>7s}"
    )
    print(header)
    print("-" * len(header))
    errors = []
    for workload in workloads:
        for level in levels:
            control = next(
                r for r in runs if (r.server, r.workload, r.level) == ("control", workload, level)
            )
            for name in ("ngram", "draft"):
                run = next(
                    r for r in runs if (r.server, r.workload, r.level) == (name, workload, level)
                )
                d, dc = run.delta, control.delta
                measured = (dc["tpot_sum"] / dc["tpot_count"]) / (d["tpot_sum"] / d["tpot_count"])
                fit = fits[name]
                modelled = None
                if fit is not None and d["draft_tokens"] > 0:
                    modelled = modelled_speedup(
                        d["output"],
                        d["accepted"],
                        d["draft_tokens"],
                        run.concurrency,
                        fit.ridge_batch,
                        costs[name],
                    )
                alpha = d["accepted"] / d["draft_tokens"] if d["draft_tokens"] else float("nan")
                tau = 1 + d["accepted"] / d["drafts"] if d["drafts"] else float("nan")
                error = (modelled - measured) / measured if modelled is not None else None
                if error is not None:
                    errors.append(abs(error))
                print(
                    f"{workload:15s} {name:8s} {level:4d} {run.concurrency:5.2f} {alpha:6.3f} "
                    f"{tau:5.2f} {fit.ridge_batch if fit else float('nan'):6.1f} "
                    f"{modelled if modelled is not None else float('nan'):8.3f} "
                    f"{measured:8.3f} " + (f"{error:+7.0%}" if error is not None else "      -")
                )
    if errors:
        print(f"\nmean |error| {sum(errors) / len(errors):.0%}, max {max(errors):.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
