"""The exact path: engine steps run one by one, as vLLM's continuous batching runs them.

A newly admitted request is prefilled in one step (up to ``max_num_batched_tokens`` of
prompt per step, while KV cache lasts) and emits its first token; every later step it
drafts K tokens, position k is accepted iff positions < k were and a
Bernoulli(p_k / p_(k-1)) succeeds, so P(position k accepted) = p_k -- drawn as one
uniform u, accepted length = #{k: u < p_k}, which has the same law -- and it emits
``1 + accepted`` tokens, cut at the request's end. A step over ``n`` tokens lasts
``a + b*n`` seconds, plus ``c * K * (a + b*B)`` of drafting for a decode batch of B.

inter_token_latency is observed once per request per decode step, iteration_tokens =
prompt + emitted tokens per step, request_time_per_output_token = decode time /
(output tokens - 1) on finish.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left

from spectax.simulate.state import EngineState, Request

__all__ = ["ExactStepper"]


class ExactStepper:
    """Moves an engine's state forward step by step: slow, and right to the token."""

    def __init__(self, state: EngineState) -> None:
        self.state = state
        p = state.profile
        # Decreasing negated p_k: bisect on -u counts the positions with u < p_k.
        self._neg_acceptance = [-x for x in state.acceptance]
        # Output lengths are geometric with mean output_len_mean (log of its ratio q).
        self._log_q = math.log(1.0 - 1.0 / p.output_len_mean) if p.output_len_mean > 1 else 0.0

    def advance(self, seconds: float) -> None:
        s = self.state
        s.clock += seconds
        clock = s.clock
        heap = s.heap
        in_progress = 0  # requests admitted by the step that is under way at `clock`
        while True:
            t = s.engine_t
            if t < s.ready_at:
                if s.ready_at > clock:
                    s.engine_t = clock
                    break
                s.engine_t = t = s.ready_at
            self._sync_clients(t)
            while heap and heap[0][0] <= t:
                at, _ = heapq.heappop(heap)
                s.waiting.append(
                    Request(at, s.rng.randint(s.prompt_lo, s.prompt_hi), self._sample_length())
                )
            plan = self._plan()
            if plan is None:
                nxt = heap[0][0] if heap else math.inf
                if nxt > clock:
                    s.engine_t = max(t, clock)
                    break
                s.engine_t = nxt
                continue
            n_adm, ptoks, step = plan
            if t + step > clock:
                # The step is under way: its outputs land later, but the scheduler
                # already counts its newly admitted requests as running.
                in_progress = n_adm
                break
            self._commit(n_adm, ptoks, step)
        s.gauge_running = float(len(s.running) + in_progress)
        s.gauge_waiting = float(len(s.waiting) - in_progress)
        s.gauge_kv = min(1.0, s.kv_used / s.profile.kv_cache_tokens)

    def _sample_length(self) -> int:
        if self._log_q == 0.0:
            return 1
        n = 1 + int(math.log(1.0 - self.state.rng.random()) / self._log_q)
        return min(n, self.state.profile.max_tokens)

    def _sync_clients(self, t: float) -> None:
        s = self.state
        target = s.target_clients(t)
        while s.clients < target:
            # A joining client sends its first request within RAMP_S (or after thinking).
            s.clients += 1
            z = s.think()
            s.push_arrival(t + (z if z > 0.0 else s.rng.uniform(0.0, s.RAMP_S)))

    def _plan(self) -> tuple[int, int, float] | None:
        """The next step: (requests admitted, their prompt tokens, its seconds); None: idle."""
        s = self.state
        p = s.profile
        free = p.max_num_seqs - len(s.running)
        n_adm = 0
        ptoks = 0
        kv = s.kv_used
        for r in s.waiting:
            if n_adm >= free:
                break
            if n_adm and ptoks + r.prompt > p.max_num_batched_tokens:
                break
            if kv + r.prompt > p.kv_cache_tokens and (n_adm or s.running):
                break
            n_adm += 1
            ptoks += r.prompt
            kv += r.prompt
        n_dec = len(s.running)
        if n_adm == 0 and n_dec == 0:
            return None
        k = s.speculative_tokens
        a, b = p.step_a, p.step_b
        step = a + b * (ptoks + n_dec * (k + 1))
        if k and n_dec:
            step += p.draft_cost_ratio * k * (a + b * n_dec)
        return n_adm, ptoks, step

    def _commit(self, n_adm: int, ptoks: int, step: float) -> None:
        """Run the planned step: decode the running requests, then admit and prefill."""
        s = self.state
        k = s.speculative_tokens
        t0 = s.engine_t
        t1 = t0 + step
        c = s.counters
        running = s.running
        n_dec = len(running)
        emitted_total = 0
        any_done = False
        if k and n_dec:
            rand = s.rng.random
            neg_p = self._neg_acceptance
            acc_hist = s.accepted_length_counts
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
            c.draft_tokens += k * n_dec
            c.accepted += acc_sum
        elif n_dec:
            for r in running:
                r.generated += 1
                if r.generated >= r.target:
                    any_done = True
            emitted_total = n_dec
        if n_dec:
            s.hists["itl"].observe(step, n_dec)
            s.kv_used += emitted_total
        h = s.hists
        finished: list[Request] = []
        if any_done:
            finished = [r for r in running if r.generated >= r.target]
            running = s.running = [r for r in running if r.generated < r.target]
        for _ in range(n_adm):
            r = s.waiting.popleft()
            r.admitted = t0
            r.first = t1
            r.generated = 1
            emitted_total += 1
            c.prompt_tokens += r.prompt
            s.kv_used += r.prompt + 1
            h["ttft"].observe(t1 - r.arrival)
            if r.target <= 1:
                finished.append(r)
            else:
                running.append(r)
        c.generation_tokens += emitted_total
        c.steps += 1
        h["iteration"].observe(ptoks + emitted_total)
        s.engine_t = t1
        for r in finished:
            self._finish(r, t1)

    def _finish(self, r: Request, t: float) -> None:
        s = self.state
        h = s.hists
        max_tokens = s.profile.max_tokens
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
        h["max_tokens"].observe(max_tokens)
        h["n"].observe(1)
        h["preempt"].observe(0)
        h["prompt"].observe(r.prompt)
        h["kv_computed"].observe(r.prompt)
        if gen >= max_tokens:
            s.counters.success_length += 1
        else:
            s.counters.success_stop += 1
        s.kv_used -= r.prompt + r.generated
        # The client thinks, then sends its next request (or leaves, if load is falling).
        if s.clients > s.target_clients(t):
            s.clients -= 1
            return
        z = s.think()
        if z == 0.0:
            s.waiting.append(
                Request(t, s.rng.randint(s.prompt_lo, s.prompt_hi), self._sample_length())
            )
        else:
            s.push_arrival(t + z)
