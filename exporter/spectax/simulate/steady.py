"""The fast path: the steady-state flows of the exact path's step process, a whole span at once.

Expected request-steps, requests and tokens come from a renewal analysis of the same
step process (see `FastForward._compute`), with binomial noise on the accepted drafts
per position, so acceptance keeps its spread. A month of traffic takes milliseconds.
It agrees with the exact path to a few percent on counter rates, acceptance and latency
means (tested on the demo profiles; with think time the latency means can be ~10% off,
as it treats peers as independent).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from spectax.simulate.state import REQUEST_HISTOGRAMS, EngineState

__all__ = ["FastForward", "SteadyFlows", "binomial"]


def binomial(rng: random.Random, n: int, p: float) -> int:
    """A Binomial(n, p) draw (Python 3.11 has no random.binomialvariate)."""
    if n <= 0 or p <= 0.0:
        return 0
    if p >= 1.0:
        return n
    if p > 0.5:
        return n - binomial(rng, n, 1.0 - p)
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


@dataclass(frozen=True)
class SteadyFlows:
    """Steady-state flows of the step process at a given number of clients (all 0: idle)."""

    hist: dict[str, tuple[list[tuple[int, float]], float]]  # name -> (bucket probs, mean)
    running: float = 0.0
    waiting: float = 0.0
    rho_run: float = 0.0  # P(a given client has a running request) when uncapped
    capped: bool = False
    x: float = 0.0  # requests per second
    decode_rs_per_s: float = 0.0  # decode request-steps per second
    steps_per_s: float = 0.0
    t_pre: float = 0.0  # mean step time seen by a request in its prefill step
    t_dec: float = 0.0  # mean step time seen by a request in a decode step
    tokens_per_step: float = 0.0


class FastForward:
    """Moves an engine's state forward by the steady-state flows at its current load."""

    # With diurnal traffic the load is re-evaluated on this grid (seconds).
    FAST_CHUNK_S = 300.0

    def __init__(self, state: EngineState) -> None:
        self.state = state
        self._length_probs = self._output_length_distribution()
        # _decode_steps[m]: expected decode steps to emit at least m tokens.
        self._decode_steps = self._decode_steps_table()
        self.mean_output_len = sum(ln * pr for ln, pr in self._length_probs)
        self._mean_decode_steps = sum(
            pr * self._decode_steps[ln - 1] for ln, pr in self._length_probs
        )
        # P(a request stops at max_tokens): finished_reason="length".
        self._p_length = sum(pr for ln, pr in self._length_probs if ln >= state.profile.max_tokens)
        self._cache: dict[int, SteadyFlows] = {}

    def flows(self, clients: int) -> SteadyFlows:
        """The steady state at this many clients (cached: the diurnal cycle revisits loads)."""
        cached = self._cache.get(clients)
        if cached is None:
            cached = self._cache[clients] = self._compute(clients)
        return cached

    def _compute(self, m: int) -> SteadyFlows:
        """Renewal analysis of the exact path's step process at m clients.

        A running request spends one step in prefill and D decode steps (D from the
        DP over tokens emitted per step), so a random running request is prefilling
        with probability pi = 1/(1+D).  A tagged request sees the other running
        requests (independent, each prefilling with probability pi) in its step;
        that gives the mean step time it experiences in prefill (t_pre) and in
        decode (t_dec), its service time R = t_pre + D*t_dec and, by Little's law
        on the closed loop of m clients with think time Z, the throughput.
        """
        p = self.state.profile
        k = self.state.speculative_tokens
        a, b = p.step_a, p.step_b
        v = k + 1
        dk = p.draft_cost_ratio * k
        d = self._mean_decode_steps
        pi = 1.0 / (1.0 + d)
        pm = self.state.prompt_mean
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
            return self._idle()
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
        tokens_per_step = x * (pm + self.mean_output_len) / steps
        return SteadyFlows(
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

    def _idle(self) -> SteadyFlows:
        return SteadyFlows(hist=self._request_hist_probs(0.0, 0.0, 0.0))

    def _request_hist_probs(
        self, queue: float, t_pre: float, t_dec: float
    ) -> dict[str, tuple[list[tuple[int, float]], float]]:
        """Per-request histogram distributions implied by the output-length law."""
        h = self.state.hists
        p = self.state.profile
        f = self._decode_steps
        out: dict[str, tuple[list[tuple[int, float]], float]] = {}

        def sparse(probs: list[float]) -> list[tuple[int, float]]:
            return [(i, pr) for i, pr in enumerate(probs) if pr > 0.0]

        def by_length(name: str, fn: Callable[[int], float]) -> None:
            hist = h[name]
            probs = [0.0] * len(hist.counts)
            mean = 0.0
            for ln, pr in self._length_probs:
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
        lo, hi = self.state.prompt_lo, self.state.prompt_hi
        for name in ("prompt", "kv_computed"):
            hist = h[name]
            probs = [0.0] * len(hist.counts)
            w = 1.0 / (hi - lo + 1)
            for v in range(lo, hi + 1):
                probs[hist.index(v)] += w
            out[name] = (sparse(probs), self.state.prompt_mean)
        return out

    def _take(self, key: str, x: float) -> int:
        """Integer part of x plus the fraction carried from earlier spans."""
        total = self.state.carry.get(key, 0.0) + x
        n = max(0, math.floor(total))
        self.state.carry[key] = total - n
        return n

    def advance(self, seconds: float) -> None:
        s = self.state
        end = s.clock + seconds
        while end - s.clock > 1e-9:
            if s.clock < s.ready_at:
                s.clock = min(s.ready_at, end)
                s.engine_t = max(s.engine_t, s.clock)
                continue
            span = end - s.clock
            if s.profile.diurnal_amplitude:
                grid = self.FAST_CHUNK_S
                span = min(span, grid - (s.clock % grid))
            clients = s.target_clients(s.clock + span / 2.0)
            self._apply(self.flows(clients), span, clients)
            self._shift(span)
            s.clock += span

    def _apply(self, ss: SteadyFlows, span: float, clients: int) -> None:
        """Add a span's expected counts (binomial noise on acceptance) and set the gauges."""
        s = self.state
        c = s.counters
        h = s.hists
        k = s.speculative_tokens
        rs = self._take("rs", ss.decode_rs_per_s * span)
        accepted = 0
        expected_acc = 0.0
        if k and rs:
            prev_n, prev_p = rs, 1.0
            for j, pj in enumerate(s.acceptance):
                cond = pj / prev_p if prev_p > 0 else 0.0
                aj = binomial(s.rng, prev_n, cond)
                c.per_pos[j] += aj
                accepted += aj
                expected_acc += rs * pj
                prev_n, prev_p = aj, pj
            c.drafts += rs
            c.draft_tokens += k * rs
            c.accepted += accepted
        n_req = self._take("req", ss.x * span)
        gen = self._take("gen", ss.x * span * self.mean_output_len + (accepted - expected_acc))
        c.generation_tokens += gen
        c.prompt_tokens += self._take("prompt", ss.x * span * s.prompt_mean)
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
            for name in REQUEST_HISTOGRAMS:
                probs, mean = ss.hist[name]
                h[name].add(probs, n_req, mean)
        # Gauges at the end of the span.
        if ss.capped or s.profile.think_time_s == 0.0:
            running = ss.running
        else:
            running = float(binomial(s.rng, clients, ss.rho_run))
        s.gauge_running = running
        s.gauge_waiting = ss.waiting
        per_req = s.prompt_mean + self.mean_output_len / 2.0
        s.gauge_kv = min(1.0, running * per_req / s.profile.kv_cache_tokens)

    def _shift(self, span: float) -> None:
        """Carry the exact path's in-flight state across a fast span unchanged."""
        s = self.state
        for r in s.running:
            r.arrival += span
            r.admitted += span
            r.first += span
        for r in s.waiting:
            r.arrival += span
        s.heap = [(t + span, seq) for t, seq in s.heap]
        s.engine_t += span

    def _output_length_distribution(self) -> list[tuple[int, float]]:
        p = self.state.profile
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
        k = self.state.speculative_tokens
        probs = [1.0]
        if k:
            marg = [1.0, *self.state.acceptance, 0.0]
            probs = [marg[j] - marg[j + 1] for j in range(k + 1)]  # P(emit j+1 tokens)
        f = [0.0] * self.state.profile.max_tokens
        for m in range(1, len(f)):
            acc = 1.0
            for j, pj in enumerate(probs):
                rest = m - 1 - j
                if rest > 0:
                    acc += pj * f[rest]
            f[m] = acc
        return f
