"""The simulated engine's state, shared by both ways of moving time and read by the page.

The exact path (:mod:`~spectax.simulate.exact`) and the fast path
(:mod:`~spectax.simulate.steady`) move the same clock, queue, counters and histograms
forward; the page (:mod:`~spectax.simulate.vllm_page`) only reads them. Counters follow
vLLM: drafts += requests that drafted, draft tokens += K each, accepted and
accepted-per-position as drawn, generation tokens += tokens actually emitted, prompt
tokens on admission, request_success_total{finished_reason} on finish.
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from spectax.simulate.sim_profiles import SimProfile

__all__ = ["REQUEST_HISTOGRAMS", "EngineState", "Histogram", "Request", "build_1_2_5_buckets"]


def build_1_2_5_buckets(max_value: int) -> list[float]:
    """vLLM's 1, 2, 5, 10, 20, 50, ... buckets up to max_value (inclusive)."""
    out: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exponent
            if value > max_value:
                return out
            out.append(float(value))
        exponent += 1


# fmt: off
_ITERATION_BUCKETS = [1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0,
                      4096.0, 8192.0, 16384.0]
_TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
_TOKEN_LATENCY_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                          1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
_REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                            40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
_PREEMPTION_BUCKETS = [1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0]
# fmt: on


class Histogram:
    """A histogram with non-cumulative (float) bucket counts; the last is +Inf.

    Float counts: the fast path adds expected observations spread over buckets.
    """

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = list(bounds)
        self.counts = [0.0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float, n: float = 1.0) -> None:
        self.counts[bisect_left(self.bounds, value)] += n
        self.sum += value * n

    def index(self, value: float) -> int:
        return bisect_left(self.bounds, value)

    def add(self, probs: Sequence[tuple[int, float]], n: float, mean: float) -> None:
        """Add n observations spread over buckets as (index, probability), with this mean."""
        counts = self.counts
        for i, p in probs:
            counts[i] += n * p
        self.sum += n * mean

    @property
    def count(self) -> float:
        return sum(self.counts)


# Names of the histograms that are observed once per finished request.
REQUEST_HISTOGRAMS = (
    "e2e",
    "queue",
    "inference",
    "prefill",
    "decode",
    "tpot",
    "gen_tokens",
    "max_gen",
    "max_tokens",
    "n",
    "preempt",
    "prompt",
    "kv_computed",
)


def make_histograms(p: SimProfile) -> dict[str, Histogram]:
    """vLLM's histograms with its buckets; token counts up to max_model_len, as vLLM sets them."""
    tok = build_1_2_5_buckets(p.max_model_len)
    return {
        "prompt": Histogram(tok),
        "gen_tokens": Histogram(tok),
        "iteration": Histogram(_ITERATION_BUCKETS),
        "max_gen": Histogram(tok),
        "n": Histogram(build_1_2_5_buckets(20)),
        "max_tokens": Histogram(tok),
        "ttft": Histogram(_TTFT_BUCKETS),
        "itl": Histogram(_TOKEN_LATENCY_BUCKETS),
        "tpot": Histogram(_TOKEN_LATENCY_BUCKETS),
        "e2e": Histogram(_REQUEST_LATENCY_BUCKETS),
        "queue": Histogram(_REQUEST_LATENCY_BUCKETS),
        "inference": Histogram(_REQUEST_LATENCY_BUCKETS),
        "prefill": Histogram(_REQUEST_LATENCY_BUCKETS),
        "decode": Histogram(_REQUEST_LATENCY_BUCKETS),
        "preempt": Histogram(_PREEMPTION_BUCKETS),
        "kv_computed": Histogram(tok),
    }


class Request:
    """One request of a closed-loop client, from arrival to its last token."""

    __slots__ = ("admitted", "arrival", "first", "generated", "prompt", "target")

    def __init__(self, arrival: float, prompt: int, target: int) -> None:
        self.arrival = arrival
        self.admitted = 0.0
        self.first = 0.0
        self.prompt = prompt
        self.target = target
        self.generated = 0


@dataclass
class Counters:
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: list[int] = field(default_factory=list)
    generation_tokens: int = 0
    prompt_tokens: int = 0
    success_stop: int = 0
    success_length: int = 0
    steps: int = 0


class EngineState:
    """One simulated engine's clock, clients, queue, counters and histograms.

    ``clock`` is the observed simulated wall time; ``engine_t`` the end of the last engine
    step (or idle time). The process is reported as started ``cold_start_s`` before
    ``start_time``, when the engine is up.
    """

    # Clients that join (at start, after a restart, or as diurnal load rises) spread their
    # first requests over this many seconds, so a fresh server is not hit by one burst.
    RAMP_S = 5.0

    def __init__(self, profile: SimProfile, start_time: float) -> None:
        p = profile
        self.profile = profile
        self.rng = random.Random(p.seed)
        self.speculative_tokens = p.num_speculative_tokens
        self.acceptance = list(p.acceptance_per_position)  # P(position k accepted)
        self.prompt_lo, self.prompt_hi = p.prompt_range()
        self.prompt_mean = (self.prompt_lo + self.prompt_hi) / 2.0

        self.clock = start_time
        self.engine_t = start_time
        self.ready_at = start_time
        self.process_start = round(start_time - p.cold_start_s, 2)
        self.created = start_time
        self.cycle_origin = start_time if p.cycle_from_start else 0.0  # restarts keep it
        self.clients = 0
        self.seq = 0
        self.heap: list[tuple[float, int]] = []  # (arrival time, seq) of thinking clients
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.kv_used = 0
        self.gauge_running: float = 0.0
        self.gauge_waiting: float = 0.0
        self.gauge_kv: float = 0.0
        self.carry: dict[str, float] = {}  # the fast path's fractions carried between spans
        self.restarts = 0
        self.reset_counters()

    def reset_counters(self) -> None:
        k = self.speculative_tokens
        self.counters = Counters(per_pos=[0] * k)
        # How many decode request-steps accepted j drafts (j = 0..K), from the exact path.
        self.accepted_length_counts = [0] * (k + 1)
        self.hists = make_histograms(self.profile)

    def restart(self) -> None:
        """Kill and restart the process now: in-flight requests are lost, counters reset.

        Clients retry once the engine is up again, ``cold_start_s`` later.
        """
        self.restarts += 1
        now = self.clock
        self.process_start = round(now, 2)
        self.ready_at = now + self.profile.cold_start_s
        self.created = self.ready_at
        self.engine_t = max(self.engine_t, now)
        self.running = []
        self.waiting.clear()
        self.heap = []
        self.kv_used = 0
        self.gauge_running = self.gauge_waiting = self.gauge_kv = 0.0
        self.carry.clear()
        for _ in range(self.clients):
            z = self.think()
            self.push_arrival(
                self.ready_at + (z if z > 0.0 else self.rng.uniform(0.0, self.RAMP_S))
            )
        self.reset_counters()

    def accepted_per_position(self) -> list[int]:
        """Accepted drafts per position: the fast path's counts plus the exact path's lengths."""
        out = list(self.counters.per_pos)
        tail = 0
        for j in range(self.speculative_tokens, 0, -1):
            tail += self.accepted_length_counts[j]
            out[j - 1] += tail
        return out

    def think(self) -> float:
        z = self.profile.think_time_s
        return self.rng.expovariate(1.0 / z) if z > 0 else 0.0

    def push_arrival(self, t: float) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq))

    def target_clients(self, t: float) -> int:
        """The closed loop's clients at time t (the daily cycle, when the profile has one)."""
        p = self.profile
        if p.diurnal_amplitude == 0.0:
            return p.concurrency
        phase = 2.0 * math.pi * (((t - self.cycle_origin) % p.cycle_seconds) / p.cycle_seconds)
        return max(0, round(p.concurrency * (1.0 - p.diurnal_amplitude * math.cos(phase))))
