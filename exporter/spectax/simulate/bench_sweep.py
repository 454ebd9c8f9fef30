"""A benchmark sweep of a simulated endpoint, and the step-time profile it teaches.

What `spectax model fit` learns from a real sweep (`vllm bench serve` at several
loads, with and without speculation), learned here from the simulator: the same
model served plain and speculating, closed-loop at each concurrency level, for a
minute of simulated time each (~0.3 s for five levels). The plain runs give the
plain curve (Theil-Sen through the runs' points, as the daemon's own calibration
fits them); the speculative runs, read against it, give the step overhead h each
level implies, and the profile keeps their median (as a profile learned against a
control does). `spectax demo` stores the profile before the daemon starts, so the
code assistant's verdict rests on it (basis profile) from its first window.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from spectax.economics import PlainCurve, Profile
from spectax.economics.calibration import MIN_SPREAD
from spectax.economics.formulas import implied_step_overhead
from spectax.economics.step_model import fit_or_refusal, plain_tokens_per_step
from spectax.simulate.sim_profiles import SimProfile
from spectax.simulate.vllm_engine import SimTotals, SimulatedVllm

__all__ = ["SWEEP_CONCURRENCY", "SweepRun", "simulated_profile", "simulated_sweep"]

#: The loads swept: both sides of the demo's ridge batch B* = 32 would need 64, but the
#: plain curve is a line, and five levels 16x apart pin it (its residuals stay under 3%).
SWEEP_CONCURRENCY = (1, 2, 4, 8, 16)
WARMUP_SECONDS = 10.0  # the first requests all start together: not a steady load yet
RUN_SECONDS = 60.0  # ~100 finished requests at one client, thousands at 16


@dataclass(frozen=True, slots=True)
class SweepRun:
    """One level of the sweep: what `vllm bench serve` would report, as counter deltas."""

    concurrency: int
    speculative: bool
    output_tokens: float
    prompt_tokens: float
    accepted_tokens: float
    draft_tokens: float
    time_per_output_token: float  # the mean, seconds

    @property
    def tokens_per_step(self) -> float:
        """The tokens a plain step carries at this load (the plain curve's abscissa)."""
        return plain_tokens_per_step(self.concurrency, self.output_tokens, self.prompt_tokens)


def simulated_sweep(profile: SimProfile) -> list[SweepRun]:
    """The profile's model, plain and as it speculates, at each level of the sweep."""
    runs = []
    for level in SWEEP_CONCURRENCY:
        for side in (profile.without_speculation(), profile):
            # A sweep holds each level steady: the endpoint's own load cycle is left out.
            steady = replace(side, concurrency=level, cold_start_s=0.0, diurnal_amplitude=0.0)
            sim = SimulatedVllm(steady, 0.0)
            sim.advance(WARMUP_SECONDS)
            before = sim.totals()
            sim.advance(RUN_SECONDS)
            runs.append(_run(level, side.speculative, before, sim.totals()))
    return runs


def _run(level: int, speculative: bool, before: SimTotals, after: SimTotals) -> SweepRun:
    finished = after.tpot_count - before.tpot_count
    return SweepRun(
        concurrency=level,
        speculative=speculative,
        output_tokens=after.generation_tokens - before.generation_tokens,
        prompt_tokens=after.prompt_tokens - before.prompt_tokens,
        accepted_tokens=after.accepted - before.accepted,
        draft_tokens=after.draft_tokens - before.draft_tokens,
        time_per_output_token=(after.tpot_sum - before.tpot_sum) / finished,
    )


def simulated_profile(name: str, endpoint: str, profile: SimProfile, method: str) -> Profile:
    """The profile a sweep of `endpoint`'s model teaches: its plain curve, B* and the median
    h its speculative runs imply; c is the simulator's (a sweep with a plain side pins h and
    B*, and the demo configures c). Raises ValueError when the plain runs fit no curve."""
    runs = simulated_sweep(profile)
    plain = [(r.tokens_per_step, r.time_per_output_token) for r in runs if not r.speculative]
    curve = fit_or_refusal(plain, len(plain), MIN_SPREAD)
    if not isinstance(curve, PlainCurve) or curve.ridge_batch is None:
        raise ValueError(f"the simulated sweep of {endpoint} fits no plain curve: {curve}")
    b_star = curve.ridge_batch
    implied = [
        implied_step_overhead(
            r.output_tokens,
            r.accepted_tokens,
            r.draft_tokens,
            r.concurrency,
            b_star,
            profile.draft_cost_ratio,
            curve.seconds_per_token(r.tokens_per_step) / r.time_per_output_token,
        )
        for r in runs
        if r.speculative
    ]
    levels = "-".join(str(level) for level in (SWEEP_CONCURRENCY[0], SWEEP_CONCURRENCY[-1]))
    return Profile(
        name=name,
        source="sweep",
        learned_from=f"a simulated benchmark sweep of {endpoint}'s model ({profile.model_name}, "
        f"plain and {method}, concurrency {levels}; spectax demo)",
        ridge_batch=b_star,
        step_overhead_ratio=statistics.median(h for h in implied if h is not None),
        draft_cost_ratio=profile.draft_cost_ratio,
        # A stored curve is read at any load: the one the sweep spanned goes with it.
        plain=replace(curve, tokens_range=None),
        points=len(runs),
        method=method,
    )
