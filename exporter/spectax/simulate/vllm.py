"""A simulated vLLM V1 (0.32) engine whose /metrics page is generated from its state.

The speculative-decoding tax is not written into this module anywhere: it falls out
of the step-time physics of ECONOMICS.md §3.  One engine step over ``n`` tokens costs
``a + b*n`` seconds (``a`` = weight reads, ``b`` = compute per token, ridge batch
``B* = a/b``).  With speculation every decoding request in the step verifies ``K + 1``
tokens instead of 1, and drafting costs ``c * K * (a + b*B)`` per step for a decode
batch of ``B`` (``c`` = draft cost ratio: each of the K draft forward passes costs
``c`` times a target forward pass at the same batch).  Below ``B*`` the extra verified
tokens are nearly free and the accepted drafts buy whole steps; above it every extra
token costs full compute and low acceptance turns speculation into a tax.

Prefill is part of the same physics: a newly admitted request's prompt tokens are
processed in one step (up to ``max_num_batched_tokens`` per step) and count in that
step's ``n``, so prefills lengthen the steps of the requests decoding beside them.

Traffic is a closed loop: ``concurrency`` clients each keep one request in flight,
think for ``think_time_s`` (exponential) after it finishes and send the next.  At
most ``max_num_seqs`` requests run at once; the rest wait, as in vLLM.

Two ways to move simulated time forward.  They agree to a few percent on counter
rates, acceptance and latency means (tested on the demo profiles; with think time
the fast path's latency means can be ~10% off, as it treats peers as independent):

- the exact path runs engine steps one by one (continuous batching: a newly admitted
  request is prefilled in one step and emits its first token; every later step it
  drafts K tokens, position k is accepted iff positions < k were and a
  Bernoulli(p_k / p_(k-1)) succeeds, so P(position k accepted) = p_k -- drawn as
  one uniform u, accepted length = #{k: u < p_k}, which has the same law -- and it
  emits ``1 + accepted`` tokens, cut at the request's end);
- the fast path (``advance(seconds, fast=True)``) applies the steady-state flows of
  the same model for a whole span at once: expected request-steps, requests and
  tokens from a renewal analysis of the same step process, with binomial noise on the
  accepted drafts per position.  A month of traffic takes milliseconds.

Counters follow vLLM: drafts += requests that drafted, draft tokens += K each,
accepted and accepted-per-position as drawn (vLLM also counts drafts accepted past the
end of the output), generation tokens += tokens actually emitted, prompt tokens on
admission, request_success_total{finished_reason} on finish, inter_token_latency once
per request per decode step, iteration_tokens = prompt + emitted tokens per step,
request_time_per_output_token = decode time / (output tokens - 1) on finish.

Everything here is pure and deterministic given the profile's seed; no wall clock.
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from itertools import accumulate

__all__ = [
    "DEMO_PROFILES",
    "SimProfile",
    "SimTotals",
    "SimulatedVllm",
    "build_1_2_5_buckets",
    "format_value",
]


# ---------------------------------------------------------------------------
# Profile
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SimProfile:
    """Everything that determines a simulated endpoint.

    Acceptance: ``p_k = acceptance_p0 * acceptance_decay**k`` is the marginal
    probability that the draft token at position k (0-based) is accepted.
    Step time: ``step_a + step_b * tokens`` seconds, plus drafting
    ``draft_cost_ratio * K * (step_a + step_b * decode_batch)`` when speculating.
    ``concurrency`` is the number of closed-loop clients; with ``think_time_s == 0``
    that is the mean number of running requests (capped at ``max_num_seqs``; the
    excess waits).  ``max_model_len`` sets the token-count histogram buckets exactly
    as vLLM does (1-2-5 series up to it); 1024 reproduces the recorded fixtures.
    """

    model_name: str
    num_speculative_tokens: int = 0
    acceptance_p0: float = 0.8
    acceptance_decay: float = 0.8
    draft_cost_ratio: float = 0.0
    step_a: float = 0.016
    step_b: float = 0.0005
    concurrency: int = 8
    max_num_seqs: int = 256
    think_time_s: float = 0.0
    prompt_len_mean: int = 256
    output_len_mean: int = 200
    max_tokens: int = 512
    max_model_len: int = 1024
    max_num_batched_tokens: int = 8192
    kv_cache_tokens: int = 131072
    block_size: int = 16
    diurnal_amplitude: float = 0.0
    cold_start_s: float = 30.0
    temperature: float = 0.7
    seed: int = 0
    engine: str = "0"
    description: str = ""

    def __post_init__(self) -> None:
        if self.num_speculative_tokens < 0:
            raise ValueError("num_speculative_tokens must be >= 0")
        if not 0.0 <= self.acceptance_p0 <= 1.0 or not 0.0 <= self.acceptance_decay <= 1.0:
            raise ValueError("acceptance_p0 and acceptance_decay must be in [0, 1]")
        if self.step_a <= 0.0 or self.step_b <= 0.0:
            raise ValueError("step_a and step_b must be > 0")
        if self.draft_cost_ratio < 0.0:
            raise ValueError("draft_cost_ratio must be >= 0")
        if self.concurrency < 0 or self.max_num_seqs < 1:
            raise ValueError("concurrency must be >= 0 and max_num_seqs >= 1")
        if self.think_time_s < 0.0 or self.cold_start_s < 0.0:
            raise ValueError("think_time_s and cold_start_s must be >= 0")
        if self.prompt_len_mean < 1 or self.output_len_mean < 1:
            raise ValueError("prompt_len_mean and output_len_mean must be >= 1")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if not 0.0 <= self.diurnal_amplitude <= 1.0:
            raise ValueError("diurnal_amplitude must be in [0, 1]")

    @property
    def speculative(self) -> bool:
        return self.num_speculative_tokens > 0

    @property
    def ridge_batch(self) -> float:
        """B* = a / b."""
        return self.step_a / self.step_b

    @property
    def acceptance_per_position(self) -> tuple[float, ...]:
        """Marginal P(position k accepted), k = 0 .. K-1 (non-increasing)."""
        p0, d = self.acceptance_p0, self.acceptance_decay
        return tuple(p0 * d**k for k in range(self.num_speculative_tokens))

    @property
    def expected_acceptance_ratio(self) -> float:
        """alpha = E[accepted] / K per draft (vLLM's "acceptance rate"); 0 without spec."""
        k = self.num_speculative_tokens
        return sum(self.acceptance_per_position) / k if k else 0.0

    @property
    def expected_acceptance_length(self) -> float:
        """tau = 1 + E[accepted per draft] (tokens emitted per decode request-step)."""
        return 1.0 + sum(self.acceptance_per_position)

    def prompt_range(self) -> tuple[int, int]:
        """Prompt lengths are uniform integers in this inclusive range."""
        lo = max(1, round(self.prompt_len_mean / 2))
        hi = max(lo, round(self.prompt_len_mean * 3 / 2))
        return lo, hi

    def without_speculation(self) -> SimProfile:
        """The same endpoint with speculation off (a control)."""
        return replace(self, num_speculative_tokens=0, draft_cost_ratio=0.0)


# ---------------------------------------------------------------------------
# Demo profiles: B* = 0.016 / 0.0005 = 32 for all three.
# ---------------------------------------------------------------------------

_A = 0.016
_B = 0.0005

DEMO_PROFILES: dict[str, SimProfile] = {
    "code-assistant": SimProfile(
        model_name="qwen2.5-coder-7b-instruct",
        num_speculative_tokens=4,
        acceptance_p0=0.9,
        acceptance_decay=0.85,
        draft_cost_ratio=0.02,
        step_a=_A,
        step_b=_B,
        concurrency=2,
        max_num_seqs=64,
        prompt_len_mean=400,
        output_len_mean=120,
        max_tokens=384,
        temperature=0.0,
        seed=11,
        description="EAGLE-style heads, greedy code completion, 2 concurrent users: "
        "memory-bound, high acceptance: speculation pays",
    ),
    "chat-creative": SimProfile(
        model_name="llama-3.1-8b-instruct",
        num_speculative_tokens=4,
        acceptance_p0=0.55,
        acceptance_decay=0.6,
        draft_cost_ratio=0.1,
        step_a=_A,
        step_b=_B,
        concurrency=104,
        max_num_seqs=96,
        prompt_len_mean=250,
        output_len_mean=300,
        max_tokens=512,
        temperature=1.0,
        seed=22,
        description="separate draft model, temperature 1.0 creative chat, saturated "
        "(96 running + waiting): compute-bound, low acceptance: speculation is a tax",
    ),
    "chat-control": SimProfile(
        model_name="llama-3.1-8b-instruct",
        num_speculative_tokens=0,
        acceptance_p0=0.55,
        acceptance_decay=0.6,
        draft_cost_ratio=0.0,
        step_a=_A,
        step_b=_B,
        concurrency=104,
        max_num_seqs=96,
        prompt_len_mean=250,
        output_len_mean=300,
        max_tokens=512,
        temperature=1.0,
        seed=33,
        description="chat-creative's model and traffic without speculation: the control",
    ),
}


# ---------------------------------------------------------------------------
# Formatting and buckets (as prometheus_client renders them)
# ---------------------------------------------------------------------------


def format_value(d: float) -> str:
    """Render a float the way prometheus_client does (Go-style exponents)."""
    if d == math.inf:
        return "+Inf"
    if d == -math.inf:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(float(d))
    dot = s.find(".")
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


@lru_cache(maxsize=8192)
def _fmt_int(n: int) -> str:
    """format_value(float(n)) for an integer, without going through repr."""
    if -1_000_000 < n < 1_000_000:
        return f"{n}.0"
    if n < 0 or n >= 1 << 53:
        return format_value(float(n))
    t = str(n)
    return f"{t[0]}.{t[1:]}".rstrip("0.") + f"e+{len(t) - 1:02d}"


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


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Hist:
    """A histogram with non-cumulative (float) bucket counts; the last is +Inf."""

    __slots__ = ("bounds", "counts", "le", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = list(bounds)
        self.le = [format_value(b) for b in self.bounds] + ["+Inf"]
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
_REQ_HISTS = (
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


def _make_hists(p: SimProfile) -> dict[str, _Hist]:
    tok = build_1_2_5_buckets(p.max_model_len)
    return {
        "prompt": _Hist(tok),
        "gen_tokens": _Hist(tok),
        "iteration": _Hist(_ITERATION_BUCKETS),
        "max_gen": _Hist(tok),
        "n": _Hist(build_1_2_5_buckets(20)),
        "max_tokens": _Hist(tok),
        "ttft": _Hist(_TTFT_BUCKETS),
        "itl": _Hist(_TOKEN_LATENCY_BUCKETS),
        "tpot": _Hist(_TOKEN_LATENCY_BUCKETS),
        "e2e": _Hist(_REQUEST_LATENCY_BUCKETS),
        "queue": _Hist(_REQUEST_LATENCY_BUCKETS),
        "inference": _Hist(_REQUEST_LATENCY_BUCKETS),
        "prefill": _Hist(_REQUEST_LATENCY_BUCKETS),
        "decode": _Hist(_REQUEST_LATENCY_BUCKETS),
        "preempt": _Hist(_PREEMPTION_BUCKETS),
        "kv_computed": _Hist(tok),
    }


# ---------------------------------------------------------------------------
# Random helpers (Python 3.11 has no random.binomialvariate)
# ---------------------------------------------------------------------------


def _binomial(rng: random.Random, n: int, p: float) -> int:
    if n <= 0 or p <= 0.0:
        return 0
    if p >= 1.0:
        return n
    if p > 0.5:
        return n - _binomial(rng, n, 1.0 - p)
    mean = n * p
    if mean < 40.0:
        # Exact: skip geometric gaps between successes (about n*p iterations).
        log_q = math.log1p(-p)
        k = 0
        pos = 0
        while True:
            gap = math.log(1.0 - rng.random()) / log_q  # failures before the next success
            if gap >= n:  # also catches inf when p is subnormal
                return k
            pos += int(gap) + 1
            if pos > n:
                return k
            k += 1
    x = round(rng.gauss(mean, math.sqrt(mean * (1.0 - p))))
    return min(n, max(0, x))


# ---------------------------------------------------------------------------
# Simulation state
# ---------------------------------------------------------------------------


class _Req:
    __slots__ = ("admitted", "arrival", "first", "generated", "prompt", "target")

    def __init__(self, arrival: float, prompt: int, target: int) -> None:
        self.arrival = arrival
        self.admitted = 0.0
        self.first = 0.0
        self.prompt = prompt
        self.target = target
        self.generated = 0


@dataclass
class _Counters:
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: list[int] = field(default_factory=list)
    generation_tokens: int = 0
    prompt_tokens: int = 0
    success_stop: int = 0
    success_length: int = 0
    steps: int = 0


@dataclass(frozen=True)
class SimTotals:
    """Counter totals since the last (re)start, straight from the simulator."""

    drafts: int
    draft_tokens: int
    accepted: int
    accepted_per_pos: tuple[int, ...]
    generation_tokens: int
    prompt_tokens: int
    requests_finished: int
    engine_steps: int
    running: int
    waiting: int
    itl_sum: float
    itl_count: float
    tpot_sum: float
    tpot_count: float


@dataclass(frozen=True)
class _Steady:
    """Steady-state flows of the step process at a given number of clients."""

    running: float
    waiting: float
    rho_run: float  # P(a given client has a running request) when uncapped
    capped: bool
    x: float  # requests per second
    decode_rs_per_s: float  # decode request-steps per second
    steps_per_s: float
    t_pre: float  # mean step time seen by a request in its prefill step
    t_dec: float  # mean step time seen by a request in a decode step
    tokens_per_step: float
    hist: dict[str, tuple[list[tuple[int, float]], float]]  # name -> (bucket probs, mean)


class SimulatedVllm:
    """One simulated vLLM server (engine "0").  See the module docstring.

    ``start_time`` is the simulated wall-clock time (epoch seconds) at which the
    engine is up and serving; the process is reported as started ``cold_start_s``
    earlier.  ``now`` advances only through :meth:`advance`.
    """

    # Above this many expected decode request-steps, ``advance(fast=None)`` aggregates.
    AUTO_FAST_REQUEST_STEPS = 20_000
    # Clients that join (at start, or as diurnal load rises) spread their first
    # requests over this many seconds.
    RAMP_S = 5.0
    # With diurnal traffic the fast path re-evaluates the load on this grid (seconds).
    FAST_CHUNK_S = 300.0

    def __init__(self, profile: SimProfile, start_time: float) -> None:
        self.profile = profile
        self._rng = random.Random(profile.seed)
        p = profile
        self._k = p.num_speculative_tokens
        self._p = list(p.acceptance_per_position)
        self._neg_p = [-x for x in self._p]
        self._prompt_lo, self._prompt_hi = p.prompt_range()
        self._prompt_mean = (self._prompt_lo + self._prompt_hi) / 2.0
        self._log_q = math.log(1.0 - 1.0 / p.output_len_mean) if p.output_len_mean > 1 else 0.0
        self._len_probs = self._output_length_distribution()
        self._f = self._decode_steps_table()
        self._l_mean = sum(ln * pr for ln, pr in self._len_probs)
        self._d_mean = sum(pr * self._f[ln - 1] for ln, pr in self._len_probs)
        self._p_length = sum(pr for ln, pr in self._len_probs if ln >= p.max_tokens)
        self._steady_cache: dict[int, _Steady] = {}
        self._eng_label = f'engine="{_escape(p.engine)}"'
        self._model_label = f'model_name="{_escape(p.model_name)}"'
        self._label = f"{self._eng_label},{self._model_label}"

        self._clock = start_time  # observed simulated wall time
        self._engine_t = start_time  # end of the last engine step (or idle time)
        self._ready_at = start_time
        self._process_start = round(start_time - p.cold_start_s, 2)
        self._created = start_time
        self._clients = 0
        self._seq = 0
        self._heap: list[tuple[float, int]] = []  # (arrival time, seq) of thinking clients
        self._waiting: deque[_Req] = deque()
        self._running: list[_Req] = []
        self._kv_used = 0
        self._gauge_running: float = 0.0
        self._gauge_waiting: float = 0.0
        self._gauge_kv: float = 0.0
        self._carry: dict[str, float] = {}
        self._restarts = 0
        self._reset_counters()

    # -- public API ---------------------------------------------------------

    @property
    def now(self) -> float:
        """Simulated wall-clock time (epoch seconds)."""
        return self._clock

    @property
    def ready(self) -> bool:
        """False while the engine is loading after a restart (cold start)."""
        return self._clock >= self._ready_at

    @property
    def process_start_time(self) -> float:
        return self._process_start

    @property
    def restarts(self) -> int:
        return self._restarts

    def advance(self, seconds: float, fast: bool | None = False) -> None:
        """Move simulated time forward.

        ``fast=False`` (default) runs every engine step; ``fast=True`` applies the
        steady-state flows for the span (use it for history: a month of 5-minute
        spans costs well under a second); ``None`` picks fast when the span would take
        more than ``AUTO_FAST_REQUEST_STEPS`` decode request-steps.
        """
        if seconds < 0:
            raise ValueError("cannot advance by a negative time")
        if seconds == 0:
            return
        if fast is None:
            ss = self._steady(self._target_clients(self._clock))
            fast = seconds * ss.decode_rs_per_s > self.AUTO_FAST_REQUEST_STEPS
        if fast:
            self._advance_fast(seconds)
        else:
            self._advance_exact(seconds)

    def restart(self) -> None:
        """Kill and restart the process now: counters reset, new process start time.

        In-flight requests are lost; clients retry once the engine is up again,
        ``cold_start_s`` later.
        """
        self._restarts += 1
        now = self._clock
        self._process_start = round(now, 2)
        self._ready_at = now + self.profile.cold_start_s
        self._created = self._ready_at
        self._engine_t = max(self._engine_t, now)
        self._running = []
        self._waiting.clear()
        self._heap = []
        self._kv_used = 0
        self._gauge_running = self._gauge_waiting = self._gauge_kv = 0.0
        self._carry.clear()
        for _ in range(self._clients):
            z = self._think()
            self._push_arrival(
                self._ready_at + (z if z > 0.0 else self._rng.uniform(0.0, self.RAMP_S))
            )
        self._reset_counters()

    def totals(self) -> SimTotals:
        c = self._c
        return SimTotals(
            drafts=c.drafts,
            draft_tokens=c.draft_tokens,
            accepted=c.accepted,
            accepted_per_pos=tuple(self._per_pos()),
            generation_tokens=c.generation_tokens,
            prompt_tokens=c.prompt_tokens,
            requests_finished=c.success_stop + c.success_length,
            engine_steps=c.steps,
            running=round(self._gauge_running),
            waiting=round(self._gauge_waiting),
            itl_sum=self._h["itl"].sum,
            itl_count=self._h["itl"].count,
            tpot_sum=self._h["tpot"].sum,
            tpot_count=self._h["tpot"].count,
        )

    def expected_flows(self) -> dict[str, float]:
        """The steady-state model at the current load (for docs and tests)."""
        ss = self._steady(self._target_clients(self._clock))
        return {
            "running": ss.running,
            "waiting": ss.waiting,
            "requests_per_s": ss.x,
            "generation_tokens_per_s": ss.x * self._l_mean,
            "decode_request_steps_per_s": ss.decode_rs_per_s,
            "steps_per_s": ss.steps_per_s,
            "inter_token_latency_s": ss.t_dec,
            "time_per_output_token_s": ss.hist["tpot"][1],
        }

    # -- helpers ------------------------------------------------------------

    def _reset_counters(self) -> None:
        self._c = _Counters(per_pos=[0] * self._k)
        self._acc_hist = [0] * (self._k + 1)
        self._h = _make_hists(self.profile)
        self._build_templates()

    def _per_pos(self) -> list[int]:
        out = list(self._c.per_pos)
        tail = 0
        for j in range(self._k, 0, -1):
            tail += self._acc_hist[j]
            out[j - 1] += tail
        return out

    def _think(self) -> float:
        z = self.profile.think_time_s
        return self._rng.expovariate(1.0 / z) if z > 0 else 0.0

    def _push_arrival(self, t: float) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq))

    def _target_clients(self, t: float) -> int:
        p = self.profile
        if p.diurnal_amplitude == 0.0:
            return p.concurrency
        phase = 2.0 * math.pi * ((t % 86400.0) / 86400.0)
        return max(0, round(p.concurrency * (1.0 - p.diurnal_amplitude * math.cos(phase))))

    def _sample_length(self) -> int:
        if self._log_q == 0.0:
            return 1
        n = 1 + int(math.log(1.0 - self._rng.random()) / self._log_q)
        return min(n, self.profile.max_tokens)

    def _output_length_distribution(self) -> list[tuple[int, float]]:
        p = self.profile
        mt = p.max_tokens
        if p.output_len_mean <= 1:
            return [(1, 1.0)]
        q = 1.0 - 1.0 / p.output_len_mean
        out: list[tuple[int, float]] = []
        pr = 1.0 - q
        for ln in range(1, mt):
            out.append((ln, pr))
            pr *= q
        out.append((mt, q ** (mt - 1)))
        return out

    def _decode_steps_table(self) -> list[float]:
        """f[m] = expected decode steps to emit at least m tokens (DP over 1+accepted)."""
        k = self._k
        probs = [1.0]
        if k:
            marg = [1.0, *self._p, 0.0]
            probs = [marg[j] - marg[j + 1] for j in range(k + 1)]  # P(emit j+1 tokens)
        f = [0.0] * self.profile.max_tokens
        for m in range(1, len(f)):
            acc = 1.0
            for j, pj in enumerate(probs):
                rest = m - 1 - j
                if rest > 0:
                    acc += pj * f[rest]
            f[m] = acc
        return f

    # -- exact path ---------------------------------------------------------

    def _sync_clients(self, t: float) -> None:
        target = self._target_clients(t)
        while self._clients < target:
            # A joining client sends its first request within RAMP_S (or after
            # thinking), so a fresh server is not hit by one synchronized burst.
            self._clients += 1
            z = self._think()
            self._push_arrival(t + (z if z > 0.0 else self._rng.uniform(0.0, self.RAMP_S)))

    def _advance_exact(self, seconds: float) -> None:
        self._clock += seconds
        clock = self._clock
        heap = self._heap
        in_progress = 0  # requests admitted by the step that is under way at `clock`
        while True:
            t = self._engine_t
            if t < self._ready_at:
                if self._ready_at > clock:
                    self._engine_t = clock
                    break
                self._engine_t = t = self._ready_at
            self._sync_clients(t)
            while heap and heap[0][0] <= t:
                at, _ = heapq.heappop(heap)
                self._waiting.append(
                    _Req(
                        at,
                        self._rng.randint(self._prompt_lo, self._prompt_hi),
                        self._sample_length(),
                    )
                )
            plan = self._plan()
            if plan is None:
                nxt = heap[0][0] if heap else math.inf
                if nxt > clock:
                    self._engine_t = max(t, clock)
                    break
                self._engine_t = nxt
                continue
            n_adm, ptoks, step = plan
            if t + step > clock:
                # The step is under way: its outputs land later, but the scheduler
                # already counts its newly admitted requests as running.
                in_progress = n_adm
                break
            self._commit(n_adm, ptoks, step)
        self._gauge_running = float(len(self._running) + in_progress)
        self._gauge_waiting = float(len(self._waiting) - in_progress)
        self._gauge_kv = min(1.0, self._kv_used / self.profile.kv_cache_tokens)

    def _plan(self) -> tuple[int, int, float] | None:
        p = self.profile
        free = p.max_num_seqs - len(self._running)
        n_adm = 0
        ptoks = 0
        kv = self._kv_used
        for r in self._waiting:
            if n_adm >= free:
                break
            if n_adm and ptoks + r.prompt > p.max_num_batched_tokens:
                break
            if kv + r.prompt > p.kv_cache_tokens and (n_adm or self._running):
                break
            n_adm += 1
            ptoks += r.prompt
            kv += r.prompt
        n_dec = len(self._running)
        if n_adm == 0 and n_dec == 0:
            return None
        k = self._k
        a, b = p.step_a, p.step_b
        step = a + b * (ptoks + n_dec * (k + 1))
        if k and n_dec:
            step += p.draft_cost_ratio * k * (a + b * n_dec)
        return n_adm, ptoks, step

    def _commit(self, n_adm: int, ptoks: int, step: float) -> None:
        t0 = self._engine_t
        t1 = t0 + step
        c = self._c
        running = self._running
        n_dec = len(running)
        emitted_total = 0
        any_done = False
        if self._k and n_dec:
            rand = self._rng.random
            neg_p = self._neg_p
            acc_hist = self._acc_hist
            acc_sum = 0
            for r in running:
                acc = bisect_left(neg_p, -rand())
                acc_hist[acc] += 1
                acc_sum += acc
                rem = r.target - r.generated
                e = acc + 1 if acc < rem else rem
                r.generated += e
                emitted_total += e
                if e == rem:
                    any_done = True
            c.drafts += n_dec
            c.draft_tokens += self._k * n_dec
            c.accepted += acc_sum
        elif n_dec:
            for r in running:
                r.generated += 1
                if r.generated >= r.target:
                    any_done = True
            emitted_total = n_dec
        if n_dec:
            self._h["itl"].observe(step, n_dec)
            self._kv_used += emitted_total
        h = self._h
        finished: list[_Req] = []
        if any_done:
            finished = [r for r in running if r.generated >= r.target]
            running = self._running = [r for r in running if r.generated < r.target]
        for _ in range(n_adm):
            r = self._waiting.popleft()
            r.admitted = t0
            r.first = t1
            r.generated = 1
            emitted_total += 1
            c.prompt_tokens += r.prompt
            self._kv_used += r.prompt + 1
            h["ttft"].observe(t1 - r.arrival)
            if r.target <= 1:
                finished.append(r)
            else:
                running.append(r)
        c.generation_tokens += emitted_total
        c.steps += 1
        h["iteration"].observe(ptoks + emitted_total)
        self._engine_t = t1
        for r in finished:
            self._finish(r, t1)

    def _finish(self, r: _Req, t: float) -> None:
        h = self._h
        gen = r.generated if r.generated < r.target else r.target
        decode = t - r.first
        h["e2e"].observe(t - r.arrival)
        h["queue"].observe(r.admitted - r.arrival)
        h["inference"].observe(t - r.admitted)
        h["prefill"].observe(r.first - r.admitted)
        h["decode"].observe(decode)
        h["tpot"].observe(decode / (gen - 1) if gen > 1 else 0.0)
        h["gen_tokens"].observe(gen)
        h["max_gen"].observe(gen)
        h["max_tokens"].observe(self.profile.max_tokens)
        h["n"].observe(1)
        h["preempt"].observe(0)
        h["prompt"].observe(r.prompt)
        h["kv_computed"].observe(r.prompt)
        if gen >= self.profile.max_tokens:
            self._c.success_length += 1
        else:
            self._c.success_stop += 1
        self._kv_used -= r.prompt + r.generated
        # The client thinks, then sends its next request (or leaves, if load is falling).
        if self._clients > self._target_clients(t):
            self._clients -= 1
            return
        z = self._think()
        if z == 0.0:
            self._waiting.append(
                _Req(t, self._rng.randint(self._prompt_lo, self._prompt_hi), self._sample_length())
            )
        else:
            self._push_arrival(t + z)

    # -- fast path ----------------------------------------------------------

    def _steady(self, clients: int) -> _Steady:
        cached = self._steady_cache.get(clients)
        if cached is None:
            cached = self._steady_cache[clients] = self._compute_steady(clients)
        return cached

    def _compute_steady(self, m: int) -> _Steady:
        """Renewal analysis of the exact path's step process at m clients.

        A running request spends one step in prefill and D decode steps (D from the
        DP over tokens emitted per step), so a random running request is prefilling
        with probability pi = 1/(1+D).  A tagged request sees the other running
        requests (independent, each prefilling with probability pi) in its step;
        that gives the mean step time it experiences in prefill (t_pre) and in
        decode (t_dec), its service time R = t_pre + D*t_dec and, by Little's law
        on the closed loop of m clients with think time Z, the throughput.
        """
        p = self.profile
        k = self._k
        a, b = p.step_a, p.step_b
        v = k + 1
        dk = p.draft_cost_ratio * k
        d = self._d_mean
        pi = 1.0 / (1.0 + d)
        pm = self._prompt_mean
        z = p.think_time_s
        cap = p.max_num_seqs

        def tagged(o_mean: float, q_no_dec: float) -> tuple[float, float]:
            """(t_pre, t_dec) given the others' mean count and P(no other decodes)."""
            o_pre, o_dec = o_mean * pi, o_mean * (1.0 - pi)
            t_pre = a + b * (pm + pm * o_pre + v * o_dec)
            t_dec = a + b * (v + pm * o_pre + v * o_dec)
            if k:
                t_pre += dk * (a * (1.0 - q_no_dec) + b * o_dec)
                t_dec += dk * (a + b * (1.0 + o_dec))
            return t_pre, t_dec

        def step_mean(n_mean: float, p_dec_pos: float) -> float:
            t = a + b * n_mean * (pi * pm + (1.0 - pi) * v)
            if k:
                t += dk * (a * p_dec_pos + b * n_mean * (1.0 - pi))
            return t

        if m <= 0:
            return self._idle_steady()
        capped = False
        rho = 1.0
        delay = 0.0
        if z == 0.0:
            n = min(m, cap)
            capped = m > cap
            t_pre, t_dec = tagged(n - 1, pi ** (n - 1))
            r_srv = t_pre + d * t_dec
            x = n / r_srv
            running, waiting = float(n), float(m - n)
            t_step = step_mean(n, 1.0 - pi**n)
            steps = 1.0 / t_step
        else:
            rho = 0.5
            for _ in range(200):
                o = (m - 1) * rho
                t_pre, t_dec = tagged(o, (1.0 - rho * (1.0 - pi)) ** (m - 1))
                r_srv = t_pre + d * t_dec
                busy = 1.0 - (1.0 - rho) ** m
                t_step = step_mean(m * rho / busy, (1.0 - (1.0 - rho * (1.0 - pi)) ** m) / busy)
                delay = busy * t_step / 2.0
                x = m / (z + delay + r_srv)
                new = x * r_srv / m
                if abs(new - rho) < 1e-12:
                    rho = new
                    break
                rho = 0.5 * rho + 0.5 * new
            if m * rho > cap:
                capped = True
                n = cap
                t_pre, t_dec = tagged(n - 1, pi ** (n - 1))
                r_srv = t_pre + d * t_dec
                x = n / r_srv
                running = float(n)
                waiting = max(0.0, m - x * z - n)
                t_step = step_mean(n, 1.0 - pi**n)
                steps = 1.0 / t_step
                delay = 0.0
            else:
                running = m * rho
                waiting = 0.0
                busy = 1.0 - (1.0 - rho) ** m
                t_step = step_mean(m * rho / busy, (1.0 - (1.0 - rho * (1.0 - pi)) ** m) / busy)
                steps = busy / t_step
        queue = waiting / x + delay
        tokens_per_step = x * (pm + self._l_mean) / steps
        return _Steady(
            running=running,
            waiting=waiting,
            rho_run=rho,
            capped=capped,
            x=x,
            decode_rs_per_s=x * d,
            steps_per_s=steps,
            t_pre=t_pre,
            t_dec=t_dec,
            tokens_per_step=tokens_per_step,
            hist=self._request_hist_probs(queue, t_pre, t_dec),
        )

    def _idle_steady(self) -> _Steady:
        return _Steady(
            running=0.0,
            waiting=0.0,
            rho_run=0.0,
            capped=False,
            x=0.0,
            decode_rs_per_s=0.0,
            steps_per_s=0.0,
            t_pre=0.0,
            t_dec=0.0,
            tokens_per_step=0.0,
            hist=self._request_hist_probs(0.0, 0.0, 0.0),
        )

    def _request_hist_probs(
        self, queue: float, t_pre: float, t_dec: float
    ) -> dict[str, tuple[list[tuple[int, float]], float]]:
        """Per-request histogram distributions implied by the output-length law."""
        h = self._h
        p = self.profile
        f = self._f
        out: dict[str, tuple[list[tuple[int, float]], float]] = {}

        def sparse(probs: list[float]) -> list[tuple[int, float]]:
            return [(i, pr) for i, pr in enumerate(probs) if pr > 0.0]

        def by_length(name: str, fn: Callable[[int], float]) -> None:
            hist = h[name]
            probs = [0.0] * len(hist.counts)
            mean = 0.0
            for ln, pr in self._len_probs:
                if pr < 1e-15:
                    continue
                val = fn(ln)
                probs[hist.index(val)] += pr
                mean += pr * val
            out[name] = (sparse(probs), mean)

        def point(name: str, val: float) -> None:
            hist = h[name]
            out[name] = ([(hist.index(val), 1.0)], val)

        ttft = queue + t_pre
        by_length("e2e", lambda ln: ttft + f[ln - 1] * t_dec)
        point("queue", queue)
        by_length("inference", lambda ln: t_pre + f[ln - 1] * t_dec)
        point("prefill", t_pre)
        by_length("decode", lambda ln: f[ln - 1] * t_dec)
        by_length("tpot", lambda ln: f[ln - 1] * t_dec / (ln - 1) if ln > 1 else 0.0)
        by_length("gen_tokens", float)
        by_length("max_gen", float)
        point("max_tokens", float(p.max_tokens))
        point("n", 1.0)
        point("preempt", 0.0)
        point("ttft", ttft)
        lo, hi = self._prompt_lo, self._prompt_hi
        for name in ("prompt", "kv_computed"):
            hist = h[name]
            probs = [0.0] * len(hist.counts)
            w = 1.0 / (hi - lo + 1)
            for v in range(lo, hi + 1):
                probs[hist.index(v)] += w
            out[name] = (sparse(probs), self._prompt_mean)
        return out

    def _take(self, key: str, x: float) -> int:
        """Integer part of x plus the fraction carried from earlier spans."""
        total = self._carry.get(key, 0.0) + x
        n = max(0, math.floor(total))
        self._carry[key] = total - n
        return n

    def _advance_fast(self, seconds: float) -> None:
        end = self._clock + seconds
        while end - self._clock > 1e-9:
            if self._clock < self._ready_at:
                self._clock = min(self._ready_at, end)
                self._engine_t = max(self._engine_t, self._clock)
                continue
            span = end - self._clock
            if self.profile.diurnal_amplitude:
                grid = self.FAST_CHUNK_S
                span = min(span, grid - (self._clock % grid))
            clients = self._target_clients(self._clock + span / 2.0)
            self._apply_steady(self._steady(clients), span, clients)
            self._shift(span)
            self._clock += span

    def _apply_steady(self, ss: _Steady, span: float, clients: int) -> None:
        c = self._c
        h = self._h
        k = self._k
        rs = self._take("rs", ss.decode_rs_per_s * span)
        accepted = 0
        expected_acc = 0.0
        if k and rs:
            prev_n, prev_p = rs, 1.0
            for j, pj in enumerate(self._p):
                cond = pj / prev_p if prev_p > 0 else 0.0
                aj = _binomial(self._rng, prev_n, cond)
                c.per_pos[j] += aj
                accepted += aj
                expected_acc += rs * pj
                prev_n, prev_p = aj, pj
            c.drafts += rs
            c.draft_tokens += k * rs
            c.accepted += accepted
        n_req = self._take("req", ss.x * span)
        gen = self._take("gen", ss.x * span * self._l_mean + (accepted - expected_acc))
        c.generation_tokens += gen
        c.prompt_tokens += self._take("prompt", ss.x * span * self._prompt_mean)
        n_len = self._take("len", n_req * self._p_length)
        n_len = min(n_len, n_req)
        c.success_length += n_len
        c.success_stop += n_req - n_len
        steps = self._take("steps", ss.steps_per_s * span)
        c.steps += steps
        if rs:
            h["itl"].observe(ss.t_dec, rs)
        if steps:
            h["iteration"].observe(ss.tokens_per_step, steps)
        if n_req:
            probs, mean = ss.hist["ttft"]
            h["ttft"].add(probs, n_req, mean)
            for name in _REQ_HISTS:
                probs, mean = ss.hist[name]
                h[name].add(probs, n_req, mean)
        # Gauges at the end of the span.
        if ss.capped or self.profile.think_time_s == 0.0:
            running = ss.running
        else:
            running = float(_binomial(self._rng, clients, ss.rho_run))
        self._gauge_running = running
        self._gauge_waiting = ss.waiting
        per_req = self._prompt_mean + self._l_mean / 2.0
        self._gauge_kv = min(1.0, running * per_req / self.profile.kv_cache_tokens)

    def _shift(self, span: float) -> None:
        """Carry the exact path's in-flight state across a fast span unchanged."""
        for r in self._running:
            r.arrival += span
            r.admitted += span
            r.first += span
        for r in self._waiting:
            r.arrival += span
        self._heap = [(t + span, s) for t, s in self._heap]
        self._engine_t += span

    # -- rendering ----------------------------------------------------------

    def _build_templates(self) -> None:
        """Precompute every static part of the page (rebuilt when _created changes)."""
        eng, model = self._eng_label, self._model_label
        lab = self._label
        segs: list[_Seg] = []
        created = self._created
        serial = [0]

        def created_val() -> str:
            serial[0] += 1
            return format_value(created + 1e-5 * serial[0])

        def counter(name: str, help_: str, labels: Sequence[str], key: str | None) -> None:
            head = f"# HELP {name}_total {help_}\n# TYPE {name}_total counter\n"
            prefixes = [f"{name}_total{{{lb}}} " for lb in labels]
            tail = f"# HELP {name}_created {help_}\n# TYPE {name}_created gauge\n" + "".join(
                f"{name}_created{{{lb}}} {created_val()}\n" for lb in labels
            )
            if key is None:
                segs.append(head + "".join(f"{pr}0.0\n" for pr in prefixes) + tail)
            else:
                segs.append(head)
                segs.append(("v", prefixes, key))
                segs.append(tail)

        def gauge(
            name: str,
            help_: str,
            labels: Sequence[str],
            key: str | None,
            static: Sequence[str] = (),
        ) -> None:
            head = f"# HELP {name} {help_}\n# TYPE {name} gauge\n"
            prefixes = [f"{name}{{{lb}}} " for lb in labels]
            if key is None:
                segs.append(
                    head + "".join(f"{pr}{v}\n" for pr, v in zip(prefixes, static, strict=True))
                )
            else:
                segs.append(head)
                segs.append(("v", prefixes, key))

        def histogram(name: str, help_: str, key: str) -> None:
            hist = self._h[key]
            segs.append(f"# HELP {name} {help_}\n# TYPE {name} histogram\n")
            prefixes = [f'{name}_bucket{{{eng},le="{le}",{model}}} ' for le in hist.le]
            prefixes += [f"{name}_count{{{lab}}} ", f"{name}_sum{{{lab}}} "]
            segs.append(("h", prefixes, key))
            segs.append(
                f"# HELP {name}_created {help_}\n# TYPE {name}_created gauge\n"
                f"{name}_created{{{lab}}} {created_val()}\n"
            )

        def plain(name: str, kind: str, help_: str, labels: Sequence[str], key: str) -> None:
            segs.append(f"# HELP {name} {help_}\n# TYPE {name} {kind}\n")
            segs.append(("v", [f"{name}{lb} " for lb in labels], key))

        gens = ['{generation="0"}', '{generation="1"}', '{generation="2"}']
        plain(
            "python_gc_objects_collected_total",
            "counter",
            "Objects collected during gc",
            gens,
            "gc_collected",
        )
        segs.append(
            "# HELP python_gc_objects_uncollectable_total Uncollectable objects found during GC\n"
            "# TYPE python_gc_objects_uncollectable_total counter\n"
            + "".join(f"python_gc_objects_uncollectable_total{g} 0.0\n" for g in gens)
        )
        plain(
            "python_gc_collections_total",
            "counter",
            "Number of times this generation was collected",
            gens,
            "gc_collections",
        )
        segs.append(
            "# HELP python_info Python platform information\n"
            "# TYPE python_info gauge\n"
            'python_info{implementation="CPython",major="3",minor="12",patchlevel="11",'
            'version="3.12.11"} 1.0\n'
            "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
            "# TYPE process_virtual_memory_bytes gauge\n"
            "process_virtual_memory_bytes 3.4359738368e+10\n"
        )
        plain(
            "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", [""], "rss"
        )
        segs.append(
            "# HELP process_start_time_seconds Start time of the process since unix epoch in "
            "seconds.\n# TYPE process_start_time_seconds gauge\n"
            f"process_start_time_seconds {format_value(self._process_start)}\n"
        )
        plain(
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            [""],
            "cpu",
        )
        plain("process_open_fds", "gauge", "Number of open file descriptors.", [""], "fds")
        segs.append(
            "# HELP process_max_fds Maximum number of open file descriptors.\n"
            "# TYPE process_max_fds gauge\nprocess_max_fds 1.048576e+06\n"
        )

        if self._k:
            counter(
                "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", [lab], "drafts"
            )
            counter(
                "vllm:spec_decode_num_draft_tokens",
                "Number of draft tokens.",
                [lab],
                "draft_tokens",
            )
            counter(
                "vllm:spec_decode_num_accepted_tokens",
                "Number of accepted tokens.",
                [lab],
                "accepted",
            )
            counter(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                [f'{lab},position="{i}"' for i in range(self._k)],
                "per_pos",
            )
        mfu = "(for Model Flops Utilization calculations)."
        counter(
            "vllm:estimated_flops_per_gpu",
            f"Estimated number of floating point operations per GPU {mfu}",
            [lab],
            None,
        )
        counter(
            "vllm:estimated_read_bytes_per_gpu",
            f"Estimated number of bytes read from memory per GPU {mfu}",
            [lab],
            None,
        )
        counter(
            "vllm:estimated_write_bytes_per_gpu",
            f"Estimated number of bytes written to memory per GPU {mfu}",
            [lab],
            None,
        )
        gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            [lab],
            "running",
        )
        gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            [lab],
            "waiting",
        )
        gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
            "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA "
            "budget, KV transfer, blocked status). Sum of all reasons equals "
            "vllm:num_requests_waiting.",
            [f'{lab},reason="capacity"', f'{lab},reason="deferred"'],
            "waiting_by_reason",
        )
        gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
            "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
            "sleep level 2.",
            [
                f'{lab},sleep_state="awake"',
                f'{lab},sleep_state="weights_offloaded"',
                f'{lab},sleep_state="discard_all"',
            ],
            None,
            ("1.0", "0.0", "0.0"),
        )
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", [lab], "kv")
        counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            [lab],
            "prompt",
        )
        counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            [lab],
            None,
        )
        kvc = "from KV connector cross-instance cache sharing, in terms of number of"
        counter(
            "vllm:external_prefix_cache_queries",
            f"External prefix cache queries {kvc} queried tokens.",
            [lab],
            None,
        )
        counter(
            "vllm:external_prefix_cache_hits",
            f"External prefix cache hits {kvc} cached tokens.",
            [lab],
            None,
        )
        counter(
            "vllm:mm_cache_queries",
            "Multi-modal cache queries, in terms of number of queried items.",
            [lab],
            None,
        )
        counter(
            "vllm:mm_cache_hits",
            "Multi-modal cache hits, in terms of number of cached items.",
            [lab],
            None,
        )
        counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", [lab], None
        )
        counter("vllm:prompt_tokens", "Number of prefill tokens processed.", [lab], "prompt")
        counter(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            [
                f'{lab},source="{s}"'
                for s in ("local_compute", "local_cache_hit", "external_kv_transfer")
            ],
            "prompt_by_source",
        )
        counter(
            "vllm:prompt_tokens_cached",
            "Number of cached prompt tokens (local + external).",
            [lab],
            None,
        )
        counter(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local "
            "HBM), host (offloaded to DRAM), disk, p2p (transferred from another vLLM "
            "instance) or external_unspecified. Counted at admission; sums to "
            "vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
            [
                f'{lab},source="{s}"'
                for s in ("device", "host", "p2p", "disk", "external_unspecified")
            ],
            None,
        )
        counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", [lab], "generation"
        )
        counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [
                f'{eng},finished_reason="{r}",{model}'
                for r in ("stop", "length", "abort", "error", "repetition")
            ],
            "success",
        )
        counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            [f'{model},reason="max_num_queued_reqs"', f'{model},reason="max_num_queued_tokens"'],
            None,
        )
        for name, help_, key in _HISTOGRAMS:
            histogram(name, help_, key)
        segs.append(self._cache_config_line())
        merged: list[_Seg] = []
        for seg in segs:  # join adjacent static text
            if isinstance(seg, str) and merged and isinstance(merged[-1], str):
                merged[-1] += seg
            else:
                merged.append(seg)
        self._segments = merged

    def render(self) -> str:
        """The /metrics page: vLLM 0.32's families, family order and label order."""
        c = self._c
        uptime = max(0.0, self._clock - self._process_start)
        gen0 = 15000 + int(uptime * 3.1)
        running = round(self._gauge_running)
        waiting = round(self._gauge_waiting)
        vals: dict[str, Sequence[float]] = {
            "gc_collected": (gen0, 2300 + int(uptime * 0.28), 600 + int(uptime * 0.02)),
            "gc_collections": (gen0 // 10, gen0 // 110, gen0 // 1500),
            "rss": (4294967296 + 4096 * (gen0 % 65536),),
            "cpu": (round(8.0 + 0.97 * uptime, 2),),
            "fds": (34 + running,),
            "drafts": (c.drafts,),
            "draft_tokens": (c.draft_tokens,),
            "accepted": (c.accepted,),
            "per_pos": self._per_pos(),
            "running": (running,),
            "waiting": (waiting,),
            "waiting_by_reason": (waiting, 0),
            "kv": (float(self._gauge_kv),),
            "prompt": (c.prompt_tokens,),
            "prompt_by_source": (c.prompt_tokens, 0, 0),
            "generation": (c.generation_tokens,),
            "success": (c.success_stop, c.success_length, 0, 0, 0),
        }
        out: list[str] = []
        w = out.append
        hists = self._h
        for seg in self._segments:
            if isinstance(seg, str):
                w(seg)
                continue
            kind, prefixes, key = seg
            if kind == "v":
                for pre, v in zip(prefixes, vals[key], strict=True):
                    w(f"{pre}{_fmt_int(v) if type(v) is int else format_value(v)}\n")
            else:
                hist = hists[key]
                cums = list(map(_fmt_int, map(round, accumulate(hist.counts))))
                cums.append(cums[-1])
                w("".join(map("{}{}\n".format, prefixes, cums)))
                w(f"{prefixes[-1]}{format_value(hist.sum)}\n")
        return "".join(out)

    def _cache_config_line(self) -> str:
        p = self.profile
        blocks = p.kv_cache_tokens // p.block_size
        max_conc = p.kv_cache_tokens / p.max_model_len
        # fmt: off
        labels = {
            "_block_size_resolved": "True", "block_size": str(p.block_size),
            "cache_dtype": "auto", "cache_hit_alignment_tokens": "None",
            "effective_attention_block_size": str(p.block_size),
            "enable_mamba_shared_prefix_checkpoint": "False", "enable_prefix_caching": "True",
            "engine": p.engine, "gpu_memory_utilization": "0.9", "hash_block_size": "None",
            "is_attention_free": "False", "kv_cache_dtype_skip_layers": "[]",
            "kv_cache_layout": "None", "kv_cache_max_concurrency": repr(max_conc),
            "kv_cache_memory_bytes": str(p.kv_cache_tokens * 131072),
            "kv_cache_size_tokens": str(p.kv_cache_tokens),
            "kv_offloading_backend": "native", "kv_offloading_size": "None",
            "kv_sharing_fast_prefill": "False", "mamba_block_size": "None",
            "mamba_cache_dtype": "auto", "mamba_cache_mode": "none",
            "mamba_page_size_padded": "None", "mamba_ssm_cache_dtype": "float32",
            "num_cpu_blocks": "None", "num_gpu_blocks": str(blocks),
            "num_gpu_blocks_override": "None", "prefix_cache_retention_interval": "0",
            "prefix_caching_hash_algo": "sha256", "prefix_match_unit": "None",
            "replayssm_buffer_len": "16", "skip_page_size_padded": "None",
            "sliding_window": "None", "swa_bounded_replay": "True",
            "use_kda_recoverssm": "False", "use_replayssm": "False",
            "user_specified_block_size": "False",
        }
        # fmt: on
        body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        return (
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
            "# TYPE vllm:cache_config_info gauge\n"
            f"vllm:cache_config_info{{{body}}} 1.0\n"
        )


# A page segment: static text, or ("v", sample prefixes, value key) / ("h", prefixes, hist).
_Seg = str | tuple[str, list[str], str]

_HISTOGRAMS: tuple[tuple[str, str, str], ...] = (
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "prompt"),
    ("vllm:request_generation_tokens", "Number of generation tokens processed.", "gen_tokens"),
    ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", "iteration"),
    (
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        "max_gen",
    ),
    ("vllm:request_params_n", "Histogram of the n request parameter.", "n"),
    (
        "vllm:request_params_max_tokens",
        "Histogram of the max_tokens request parameter.",
        "max_tokens",
    ),
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "ttft"),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "itl"),
    (
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        "tpot",
    ),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", "e2e"),
    (
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        "queue",
    ),
    (
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        "inference",
    ),
    (
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        "prefill",
    ),
    (
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        "decode",
    ),
    (
        "vllm:request_num_preemptions",
        "Histogram of the number of times a request was preempted.",
        "preempt",
    ),
    (
        "vllm:request_prefill_kv_computed_tokens",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        "kv_computed",
    ),
)
