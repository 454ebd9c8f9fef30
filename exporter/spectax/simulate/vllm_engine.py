"""A simulated vLLM V1 (0.32) engine whose /metrics page is generated from its state.

The speculative-decoding tax is not written into this package anywhere: it falls out
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

The rooms: the profile (:mod:`~spectax.simulate.sim_profiles`), the engine's state
(:mod:`~spectax.simulate.state`), two ways to move it forward -- step by step
(:mod:`~spectax.simulate.exact`) or by steady-state flows for a whole span
(:mod:`~spectax.simulate.steady`) -- and the page (:mod:`~spectax.simulate.vllm_page`).
This class puts them together.  Everything is pure and deterministic given the
profile's seed; no wall clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from spectax.simulate.exact import ExactStepper
from spectax.simulate.pages import page_for
from spectax.simulate.sim_profiles import SimProfile
from spectax.simulate.state import EngineState
from spectax.simulate.steady import FastForward

__all__ = ["SimTotals", "SimulatedVllm"]


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


class SimulatedVllm:
    """One simulated vLLM server (engine "0").  See the module docstring.

    ``start_time`` is the simulated wall-clock time (epoch seconds) at which the
    engine is up and serving; the process is reported as started ``cold_start_s``
    earlier.  ``now`` advances only through :meth:`advance`.
    """

    # Above this many expected decode request-steps, ``advance(fast=None)`` aggregates.
    AUTO_FAST_REQUEST_STEPS = 20_000

    def __init__(self, profile: SimProfile, start_time: float) -> None:
        self.profile = profile
        self._state = EngineState(profile, start_time)
        self._exact = ExactStepper(self._state)
        self._fast = FastForward(self._state)
        self._page = page_for(self._state)

    @property
    def now(self) -> float:
        """Simulated wall-clock time (epoch seconds)."""
        return self._state.clock

    @property
    def ready(self) -> bool:
        """False while the engine is loading after a restart (cold start)."""
        return self._state.clock >= self._state.ready_at

    @property
    def process_start_time(self) -> float:
        return self._state.process_start

    @property
    def restarts(self) -> int:
        return self._state.restarts

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
            flows = self._fast.flows(self._state.target_clients(self._state.clock))
            fast = seconds * flows.decode_rs_per_s > self.AUTO_FAST_REQUEST_STEPS
        if fast:
            self._fast.advance(seconds)
        else:
            self._exact.advance(seconds)

    def restart(self) -> None:
        """Kill and restart the process now: counters reset, new process start time.

        In-flight requests are lost; clients retry once the engine is up again,
        ``cold_start_s`` later.
        """
        self._state.restart()
        self._page = page_for(self._state)

    def render(self) -> str:
        """The /metrics page of the profile's `serving_engine` (vLLM 0.32's by default)."""
        return self._page.render()

    @property
    def content_type(self) -> str:
        """The Content-Type the engine sends its page with."""
        return self._page.content_type

    def totals(self) -> SimTotals:
        s = self._state
        c = s.counters
        return SimTotals(
            drafts=c.drafts,
            draft_tokens=c.draft_tokens,
            accepted=c.accepted,
            accepted_per_pos=tuple(s.accepted_per_position()),
            generation_tokens=c.generation_tokens,
            prompt_tokens=c.prompt_tokens,
            requests_finished=c.success_stop + c.success_length,
            engine_steps=c.steps,
            running=round(s.gauge_running),
            waiting=round(s.gauge_waiting),
            itl_sum=s.hists["itl"].sum,
            itl_count=s.hists["itl"].count,
            tpot_sum=s.hists["tpot"].sum,
            tpot_count=s.hists["tpot"].count,
        )

    def expected_flows(self) -> dict[str, float]:
        """The steady-state model at the current load (for docs and tests)."""
        ss = self._fast.flows(self._state.target_clients(self._state.clock))
        return {
            "running": ss.running,
            "waiting": ss.waiting,
            "requests_per_s": ss.x,
            "generation_tokens_per_s": ss.x * self._fast.mean_output_len,
            "decode_request_steps_per_s": ss.decode_rs_per_s,
            "steps_per_s": ss.steps_per_s,
            "inter_token_latency_s": ss.t_dec,
            "time_per_output_token_s": ss.hist["tpot"][1],
        }
