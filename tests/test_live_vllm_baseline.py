"""The live-vLLM tier's baseline source: a verdict from the endpoint's own windows before
speculation was on (ECONOMICS.md §3b, source `baseline`), on real vLLM servers.

Two servers serve the same tiny random-weight model (tests/live_vllm/): the target, at
first WITHOUT speculation, and a control without speculation throughout. spectax watches
them as two separate endpoints: the target's is configured for n-gram speculation and has
no `control:`, so once it speculates its verdict can rest on nothing but its own history.
One scenario runs once per module, in phases, and records what it saw:

  P  plain: clock-aligned windows at concurrency 1 and 8 in turn, the target alone driven
     for the whole window, until spectax has fitted the target's plain curve (8 windows of
     >= 10 finished requests whose loads spread 1.5x: economics.calibration);
  R  the target SIGTERMed and started again on the same port WITH n-gram speculation,
     spectax watching throughout;
  S  speculating: PAIRS pairs of windows at each concurrency c in (1, 8), in turn: the
     target alone for a whole window at c and the control alone for the next at the same
     c with the same seeded requests (the control first in every other pair at a c, so a
     drift of the machine's speed weighs on both sides alike).

All traffic is random words at temperature 1 (the same in P and S, so the plain curve is
read at the loads it was fitted on). On it n-gram finds next to nothing to draft (a stray
match now and then): the target's S windows are the issue's zero-draft tax, which spectax
must call `tax` without a control.
A pair's control window gives the speedup measured in the same run (the control's time
per output token over the target's in the adjacent window): the baseline's verdict must be
the one it measures, and their relative error is printed against the issue's 10% target
(an accuracy figure, recorded in bench/README.md, not a pass/fail fact on this machine).

One server at a time, and for whole windows. Two servers driven at once on two cores get
each other's noise: their times per token depend on who had the CPU (seen: "measured"
speedups of 0.48-2.15 for an n-gram server that drafted nothing, which is never faster
than plain decoding). And never slots inside a window (as in test_live_vllm.py's phase
A): spectax reads a window's load as its time-averaged running requests, floored at 1,
and in a slot's third or half of a window that average is not the batch the steps ran at
(seen: 2.8-6.8 tokens per step for batches of 1 and 8, and a line through them with a
negative intercept, refused). So the plain curve is fitted, and both sides of every pair
measured, on a machine that serves one request stream. It is meant to run alone (as in
CI): other work on the two cores changes a window's speed, and pairs then scatter (seen
with a load average of 6-10 from another suite: single pairs off by -37% to +48%).

Needs tests/live_vllm/setup.sh to have run (skips otherwise, fails with SPECTAX_CI=1,
where the fixture runs setup itself). 6-8 minutes here (most of it two cold starts and
8 + 4 * PAIRS windows of 15 s); two vLLM processes, ~3.2 GB each.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import math
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from live_vllm import servers as live
from live_vllm import traffic
from live_vllm.servers import VllmServer
from live_vllm.spectax_run import (
    SCRAPE,
    WINDOW,
    Metrics,
    SpectaxRun,
    run_watched,
    say,
    skip_unless_available,
    tpot,
)
from spectax.economics.calibration import MIN_REQUESTS, MIN_WINDOWS
from spectax.economics.formulas import MIN_STEP_OVERHEAD_RATIO

pytestmark = [pytest.mark.live_vllm]
if importlib.util.find_spec("pytest_timeout") is not None:
    pytestmark.append(pytest.mark.timeout(1500))  # the scenario runs in the first test's setup

MODEL = live.MODEL_NAME
TARGET, CONTROL = "live-baseline", "live-baseline-control"
ENDPOINT = {"target": TARGET, "control": CONTROL}
# Phase P's windows at most: the fit needs MIN_WINDOWS that count, and a loaded machine's
# concurrency-1 window may finish fewer than MIN_REQUESTS (the other tier keeps 3 to spare).
PLAIN_BLOCKS = MIN_WINDOWS + 3
# Phase S: pairs of adjacent windows (the target's, the control's) at each concurrency.
CONCURRENCIES = (1, 8)
PAIRS = 2
KINDS, TEMPERATURES = ("random",), (1.0,)
# Short requests at both loads, and no new one in a window's last TAIL seconds: at batch 8
# a 96-token request took up to 4.5 s here (47 ms per token, the machine shared), and the
# requests still running at the boundary landed in the next window.
TOKENS = (24, 48)
TAIL = 3.0
# The accuracy target for the baseline against a control measured in the same run.
# An accuracy figure, not a pass/fail fact on a shared 2-core machine: the runs here scattered
# -23.5% to +19.4% with the machine's load (bench/README.md, "The baseline source, live"), so
# the test prints it and asserts what does not move with the load: the verdict's direction.
TARGET_ERROR = 0.10
# Below this share of accepted tokens in the output, a window's speedup ceiling is under 1.
NEXT_TO_NOTHING = MIN_STEP_OVERHEAD_RATIO / (1 + MIN_STEP_OVERHEAD_RATIO)


class BaselineSpectax(SpectaxRun):
    """`spectax run` watching the target and the control as two endpoints."""

    def __init__(self, workdir: Path, fleet: dict[str, VllmServer]):
        price = {"usd_per_hour": 2.0}
        self.configure(
            workdir,
            [
                {
                    "name": TARGET,
                    "url": f"{fleet['target'].url}/metrics",
                    "price": price,
                    "speculation": {"method": "ngram"},
                },
                {"name": CONTROL, "url": f"{fleet['control'].url}/metrics", "price": price},
            ],
        )


@dataclass
class Block:
    """One window of traffic to one server: its aligned start, concurrency, the server's
    raw page deltas over it, and spectax's /metrics right after (the sliding window then
    holds the block)."""

    server: str
    start: float
    concurrency: int
    deltas: dict[str, float]
    read: Metrics
    machine_load: float  # the 1-minute load average at its end, to tell a shared machine


@dataclass
class Pair:
    """Phase S at one concurrency: the target's window and the control's, adjacent."""

    target: Block
    control: Block


@dataclass
class Observed:
    timings: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    plain: list[Block] = field(default_factory=list)
    fitted: Metrics | None = None  # the first read with the baseline in force
    restart_ready_seconds: float = 0.0
    speculating: list[Pair] = field(default_factory=list)
    final: Metrics | None = None  # after the last block, every counter settled and scraped
    rows: list[dict[str, Any]] = field(default_factory=list)  # the target's stored windows
    control_rows: list[dict[str, Any]] = field(default_factory=list)
    spectax_exit: int | None = None
    spectax_log: str = ""


def baseline_in_force(m: Metrics) -> bool:
    return m.value("spectax_ridge_batch_requests", endpoint=TARGET, source="baseline") is not None


def next_start(previous: float | None = None) -> float:
    """The window after `previous` when there is still time to start it, else the next
    boundary to come: a block that ran late is followed by the next whole window."""
    now = time.time()
    if previous is not None and now < previous + WINDOW + 0.5:
        return previous + WINDOW
    return math.ceil(now / WINDOW) * WINDOW


def drive_block(
    server: VllmServer, start: float, concurrency: int, seed: int, spectax: SpectaxRun
) -> Block:
    """Drive `server` alone for the window from `start` with seeded requests; none starts in
    the window's last TAIL seconds, so all finish in it."""
    time.sleep(max(start + 0.1 - time.time(), 0.0))
    before = server.raw()
    asyncio.run(
        traffic.drive(
            server.url,
            MODEL,
            concurrency=concurrency,
            seconds=start + WINDOW - TAIL - time.time(),
            max_requests=400,
            requests=traffic.mix(seed, KINDS, TEMPERATURES, max_tokens=TOKENS),
        )
    )
    time.sleep(max(start + WINDOW - 0.3 - time.time(), 0.0))
    deltas = server.raw() - before
    return Block(server.name, start, concurrency, deltas, spectax.metrics(), os.getloadavg()[0])


def stored_windows(state: Path, endpoint: str) -> list[dict[str, Any]]:
    """The endpoint's window rows for MODEL, oldest first, `start` as Unix time."""
    uri = f"file:{state / 'spectax.sqlite'}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        db.row_factory = sqlite3.Row
        rows = db.execute(
            "SELECT * FROM windows WHERE endpoint = ? AND model = ? ORDER BY start",
            (endpoint, MODEL),
        ).fetchall()
    found = []
    for row in rows:
        values = dict(row)
        start = datetime.fromisoformat(str(values["start"]))
        values["start"] = (start if start.tzinfo else start.replace(tzinfo=UTC)).timestamp()
        found.append(values)
    return found


def run_scenario(obs: Observed, fleet: dict[str, VllmServer], spectax: SpectaxRun) -> None:
    servers = [fleet["target"], fleet["control"]]
    t0 = time.monotonic()

    def mark(name: str) -> None:
        obs.timings[name] = round(time.monotonic() - t0, 1)

    # Warm-up before spectax starts: the first requests of a fresh server are slow.
    targets = [(s.url, MODEL) for s in servers]
    asyncio.run(
        traffic.drive_many(
            targets,
            concurrency=2,
            seconds=2,
            max_requests=4,
            seed=99,
            kinds=KINDS,
            temperatures=TEMPERATURES,
        )
    )
    live.settle(servers)
    spectax.start()
    spectax.wait_for(
        lambda m: all(
            m.value("spectax_output_tokens_total", endpoint=name, model=MODEL) is not None
            for name in ENDPOINT.values()
        ),
        60,
        "token counters for both endpoints",
    )
    mark("spectax_up")

    # ---- P: plain windows until the target's plain curve is fitted. A window closes with
    # the first scrape after its end: the fit of the MIN_WINDOWS-th is in force ~1 s later.
    start = next_start()
    for index in range(PLAIN_BLOCKS):
        concurrency = CONCURRENCIES[index % len(CONCURRENCIES)]
        obs.plain.append(drive_block(fleet["target"], start, concurrency, 500 + index, spectax))
        start = next_start(start)
        if len(obs.plain) < MIN_WINDOWS:
            continue
        try:
            obs.fitted = spectax.wait_for(baseline_in_force, 3 * SCRAPE + 1, "baseline fit")
            break
        except TimeoutError:
            start = next_start()  # the wait ate into the next window: the one after it
    mark("plain_done")
    if obs.fitted is None:
        obs.problems.append(f"no baseline fit after {len(obs.plain)} plain windows")
        return

    # ---- R: the same model on the same port, now with n-gram speculation.
    live.settle(servers)
    fleet["target"].kind = "ngram"
    _, obs.restart_ready_seconds = fleet["target"].restart()
    asyncio.run(
        traffic.drive(
            fleet["target"].url,
            MODEL,
            concurrency=2,
            seconds=2,
            max_requests=4,
            requests=traffic.mix(98, KINDS, TEMPERATURES),
        )
    )
    mark("target_restarted_speculating")

    # ---- S: the same traffic, the target speculating, each pair's control beside it.
    start = next_start()
    for index in range(PAIRS * len(CONCURRENCIES)):
        concurrency, seed = CONCURRENCIES[index % len(CONCURRENCIES)], 600 + index
        order = ["target", "control"]
        if index // len(CONCURRENCIES) % 2:
            order.reverse()
        blocks = {}
        for name in order:
            blocks[name] = drive_block(fleet[name], start, concurrency, seed, spectax)
            start = next_start(start)
        obs.speculating.append(Pair(blocks["target"], blocks["control"]))
    mark("speculating_done")
    live.settle(servers)
    obs.final = spectax.scraped_after(time.time(), list(ENDPOINT.values()))


@pytest.fixture(scope="module")
def observed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Observed]:
    workdir = tmp_path_factory.mktemp("live-vllm-baseline")
    skip_unless_available("live-vLLM baseline tier", 2, workdir)

    obs = Observed()
    fleet = {
        "target": VllmServer("target", "control", workdir),  # plain first: kind changes at R
        "control": VllmServer("control", "control", workdir),
    }
    spectax = BaselineSpectax(workdir, fleet)
    obs.spectax_exit, obs.spectax_log = run_watched(
        list(fleet.values()), spectax, obs.timings, lambda: run_scenario(obs, fleet, spectax)
    )
    obs.rows = stored_windows(spectax.state, TARGET)
    obs.control_rows = stored_windows(spectax.state, CONTROL)
    say(request, f"live-vLLM baseline tier: {obs.timings} (seconds since the first server start)")
    yield obs


# ------------------------------------------------------------------ helpers for the checks


def require_speculating(obs: Observed) -> list[Pair]:
    if len(obs.speculating) != PAIRS * len(CONCURRENCIES):
        pytest.fail(
            f"the scenario did not reach its speculating windows; problems: {obs.problems}; "
            f"requests per plain window (target): "
            f"{[b.deltas.get('tpot_count') for b in obs.plain]}"
        )
    return obs.speculating


def row_of(rows: list[dict[str, Any]], block: Block) -> dict[str, Any]:
    found = [r for r in rows if abs(r["start"] - block.start) < 1.0]
    assert len(found) == 1, (block.start, [r["start"] for r in rows])
    return found[0]


def verdicts(m: Metrics) -> list[dict[str, str]]:
    return m.labels_of("spectax_verdict_info", endpoint=TARGET, model=MODEL)


# ------------------------------------------------------------------ the claims


def test_the_plain_curve_is_fitted_from_the_windows_before_speculation(
    observed: Observed,
) -> None:
    """Within MIN_WINDOWS + 3 plain windows, spectax fits the target's own plain curve and
    puts it in force as the `baseline` source (the endpoint is configured to speculate),
    with a positive B*; it says so once in its log."""
    requests = [b.deltas.get("tpot_count", 0) for b in observed.plain]
    fits = [line for line in observed.spectax_log.splitlines() if "plain curve" in line]
    print(f"target: finished requests per plain window {requests}; spectax said {fits}")
    assert observed.fitted is not None, (
        f"no baseline after {len(observed.plain)} plain windows (a window counts from "
        f"{MIN_REQUESTS} finished requests); spectax said: {fits}"
    )
    ridge = observed.fitted.value("spectax_ridge_batch_requests", endpoint=TARGET)
    print(f"baseline B* {ridge} after {len(observed.plain)} plain windows")
    for block in observed.plain:
        row = row_of(observed.rows, block)
        print(
            f"  plain c={block.concurrency}: load {row['concurrency_requests']:.2f}, TPOT "
            f"{tpot(block.deltas) * 1e3:.2f} ms, machine load {block.machine_load:.1f}"
        )
    assert ridge is not None and ridge > 0
    sources = observed.fitted.labels_of("spectax_model_info", endpoint=TARGET)
    assert [s["source"] for s in sources] == ["baseline"], sources
    assert any(f"endpoint {TARGET}: plain curve fitted" in line for line in fits), fits


def test_after_the_switch_the_verdict_rests_on_the_baseline(observed: Observed) -> None:
    """Once the target speculates, every window it serves (live on /metrics and as
    stored) is assessed against the baseline: basis `calibrated`, source `baseline`. And
    its speculating windows add no points to the curve: B* stays what was fitted."""
    blocks = [pair.target for pair in require_speculating(observed)]
    assert observed.fitted is not None and observed.final is not None
    for block in blocks:
        m = block.read
        sources = [s["source"] for s in m.labels_of("spectax_model_info", endpoint=TARGET)]
        assert sources == ["baseline"], sources
        found = verdicts(m)
        assert [v["basis"] for v in found] == ["calibrated"], found
        row = row_of(observed.rows, block)
        assert row["ridge_batch_source"] == "baseline", row
        assert row["verdict_basis"] == "calibrated", row
    fitted = observed.fitted.value("spectax_ridge_batch_requests", endpoint=TARGET)
    final = observed.final.value("spectax_ridge_batch_requests", endpoint=TARGET, source="baseline")
    assert final == fitted, (final, fitted)


def test_the_baseline_verdict_is_the_one_the_control_measures_alongside(
    observed: Observed,
) -> None:
    """Over the speculating windows, spectax's speedup from the baseline calls what the
    control measures in the same run: a tax, in every pair's window and pooled (n-gram on
    random words proposes nothing: no window can have paid). The relative error against
    the measurement is printed beside the issue's 10% target, for bench/README.md. The
    measured speedup is, for each pair, the control's time per output
    token in its window over the target's in the adjacent one, the same concurrency and
    seeded requests, both from the endpoints' stored windows (the raw page deltas agree).
    Both are pooled alike: the mean of the pairs' speedups weighted by the target's time
    in them (sum of its times per output token), so a window is worth the requests it
    finished, as in a report."""
    pairs = require_speculating(observed)
    weights, baseline, measured = [], [], []
    for pair in pairs:
        ours, control = (
            row_of(observed.rows, pair.target),
            row_of(observed.control_rows, pair.control),
        )
        counts = (ours["time_per_output_token_count"], control["time_per_output_token_count"])
        assert min(counts) >= MIN_REQUESTS, counts
        ours_tpot = ours["time_per_output_token_sum"] / counts[0]
        control_tpot = control["time_per_output_token_sum"] / counts[1]
        raw = tpot(pair.control.deltas) / tpot(pair.target.deltas)
        assert ours["speedup_ratio"] is not None, ours
        print(
            f"c={pair.target.concurrency}: baseline {ours['speedup_ratio']:.4f} (band "
            f"{ours['speedup_low_ratio']:.3f}-{ours['speedup_high_ratio']:.3f}), measured "
            f"{control_tpot / ours_tpot:.4f} (raw page deltas {raw:.4f}); TPOT control "
            f"{control_tpot * 1e3:.2f} ms, target {ours_tpot * 1e3:.2f} ms, plain curve "
            f"{ours['speedup_ratio'] * ours_tpot * 1e3:.2f} ms (capped); loads "
            f"{control['concurrency_requests']:.2f} and {ours['concurrency_requests']:.2f}; "
            f"{counts[1]} and {counts[0]} requests; machine load "
            f"{pair.control.machine_load:.1f} and {pair.target.machine_load:.1f}"
        )
        weights.append(ours["time_per_output_token_sum"])
        baseline.append(ours["speedup_ratio"])
        measured.append(control_tpot / ours_tpot)
    pooled = [
        sum(w * s for w, s in zip(weights, x, strict=True)) / sum(weights)
        for x in (baseline, measured)
    ]
    error = pooled[0] / pooled[1] - 1
    print(
        f"over {len(pairs)} pairs: baseline {pooled[0]:.4f}, measured {pooled[1]:.4f}, "
        f"error {error:+.1%} (target {TARGET_ERROR:.0%}: "
        f"{'met' if abs(error) <= TARGET_ERROR else 'not met'}); per pair "
        f"{[f'{b / m - 1:+.1%}' for b, m in zip(baseline, measured, strict=True)]}"
    )
    assert all(b < 1.0 for b in baseline), baseline  # each window's: a tax, not a gain
    assert pooled[1] < 1.0, (pooled, measured)  # and so the control says, over the run


def drafted_next_to_nothing(output: float, accepted: float) -> bool:
    """Whether a window's accepted tokens are so few that no B*, c or h could make it pay:
    a step emits at most G / (G - A) tokens for 1 + h_min of a plain step's cost, below 1
    while A / G < h_min / (1 + h_min) (docs/economics.md, "The floor under h")."""
    return output > 0 and accepted / output < NEXT_TO_NOTHING


def test_every_window_that_drafted_next_to_nothing_without_a_control_is_a_tax(
    observed: Observed,
) -> None:
    """Random words at temperature 1 give n-gram (next to) nothing to draft: seen, 0 drafts
    in most blocks, 1 draft of 2 tokens in 4,104 output tokens in one. Such a window still
    paid the proposer on every step, so without a control it is `tax` (issue 29, "Done
    when"): every such stored window of the target, and the live verdict over each
    speculating block."""
    blocks = [pair.target for pair in require_speculating(observed)]
    for block in blocks:
        d = block.deltas
        assert drafted_next_to_nothing(d["output"], d.get("accepted", 0.0)), (
            "the premise: next to nothing drafted",
            d,
        )
        found = verdicts(block.read)
        assert [v["verdict"] for v in found] == ["tax"], (
            found,
            block.read.value("spectax_speedup_band_ratio", endpoint=TARGET, bound="high"),
        )
    nothing = [
        r
        for r in observed.rows
        if r["drafts"] is not None
        and drafted_next_to_nothing(r["output_tokens"], r["accepted_tokens"] or 0)
    ]
    assert len(nothing) >= len(blocks), [r["start"] for r in nothing]
    zero = sum(1 for r in nothing if r["drafts"] == 0)
    print(f"{len(nothing)} stored windows drafted next to nothing, {zero} of them nothing")
    wrong = [
        {
            k: r[k]
            for k in (
                "start",
                "verdict",
                "verdict_basis",
                "drafts",
                "accepted_tokens",
                "output_tokens",
                "speedup_ratio",
                "speedup_high_ratio",
                "time_per_output_token_count",
            )
        }
        for r in nothing
        if r["verdict"] != "tax"
    ]
    assert not wrong, wrong


def test_spectax_stopped_cleanly(observed: Observed) -> None:
    assert observed.spectax_exit == 0, observed.spectax_log[-3000:]
    assert "Traceback" not in observed.spectax_log, observed.spectax_log[-5000:]
