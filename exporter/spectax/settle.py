"""An "uncertain" a person can act on: what the verdict turns on, and what would settle it.

An uncertain verdict is a speedup band that straddles 1 (docs/economics.md, "The verdict
and its band"). On its own that says "we don't know". This module says, from the one
window assessment every surface reads (`Assessment`):

- what it turns on: the value of the unknown at which speculation breaks even, such as
  "pays unless a speculative step's fixed cost is more than 2.7x a plain one's";
- what would settle it for this endpoint, cheapest first: a control (with the config
  lines), a sweep (with the exact `vllm bench serve` and `spectax model fit` commands),
  or the endpoint's own baseline from before speculation (with what it needs).

The status page, `spectax assess`, the report and the runbook all print these, so the
four say the same thing in the same words.
"""

from __future__ import annotations

from dataclasses import dataclass

from spectax.economics import Assessment
from spectax.economics.calibration import MIN_REQUESTS, MIN_SPREAD, MIN_WINDOWS

DOCS = "docs/economics.md#what-an-uncertain-verdict-turns-on"
#: The loads a sweep should cover: past the ridge batch of most GPUs (docs/economics.md).
SWEEP_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True, slots=True)
class Target:
    """What the advice needs to know of an endpoint: where it is and how it speculates."""

    name: str
    model: str
    url: str | None = None
    engine: str = "vllm"
    method: str | None = None
    has_control: bool = False


def turns_on(a: Assessment) -> str | None:
    """What an uncertain verdict turns on, in words; None for a verdict that is not uncertain.

    The unknowns are the step overhead h (what a speculative step costs beyond a plain
    one, beside its tokens) and the ridge batch B* (how memory-bound the GPU is): the
    sentence gives the value of each at which the speedup is exactly 1, holding the
    other at the value in force.
    """
    if a.verdict != "uncertain":
        return None
    if a.draft_tokens is None:
        return (
            "the engine does not count drafted tokens, so no model can price its drafts: "
            "only a measurement against plain decoding can tell"
        )
    if a.model_source in ("control", "baseline") and a.speedup_measured_ratio is None:
        low, high = a.speedup_low_ratio, a.speedup_high_ratio
        spread = f" ({low:.2f}x to {high:.2f}x)" if low is not None and high is not None else ""
        return (
            f"the plain curve's own spread{spread} straddles 1: the speedup is within its "
            "noise; a control measures it in the same window"
        )
    parts = []
    h_star = a.breakeven_step_overhead_ratio
    if h_star is not None and h_star > 0:
        parts.append(
            f"pays unless a speculative step's fixed cost is more than {1 + h_star:.2f}x a "
            f"plain one's (h above {h_star:.2f}"
            + (f"; assumed {a.step_overhead_ratio:.2f})" if a.step_overhead_ratio else ")")
        )
    b_star = a.breakeven_ridge_batch_requests
    if b_star is not None and b_star > 1.0:  # every GPU's ridge batch clears 1 request
        parts.append(f"pays only if the GPU's ridge batch B* is above {b_star:.0f} requests")
    if not parts:
        return "the band straddles 1 at every value the parameters could take"
    return "; and ".join(parts)


def settle_steps(target: Target, a: Assessment) -> tuple[str, ...]:
    """What would settle an uncertain verdict for this endpoint, cheapest first; () for a
    verdict that is settled already."""
    if a.verdict != "uncertain":
        return ()
    steps = []
    if not target.has_control:
        steps.append(
            "a control: serve the same model without speculation beside it, then add to "
            f"the config an endpoint `- name: {target.name}-control` with its `url:`, and "
            f"`control: {target.name}-control` under `{target.name}`: the next window with "
            f"{MIN_REQUESTS} finished requests each side is measured"
        )
    if target.engine == "vllm" and a.draft_tokens is not None:
        steps.append(sweep_commands(target))
    steps.append(
        f"a baseline: run {target.name} without speculation for {MIN_WINDOWS} windows "
        f"(each with {MIN_REQUESTS} finished requests, at loads at least {MIN_SPREAD:g}x "
        "apart), then turn speculation on: spectax fits its own plain curve and the "
        "verdict rests on it (basis calibrated)"
    )
    return tuple(steps)


def sweep_commands(target: Target) -> str:
    """The exact commands of a sweep: a speculative and a plain run at each load, fitted."""
    url = target.url.removesuffix("/metrics") if target.url else "http://HOST:PORT"
    levels = " ".join(map(str, SWEEP_CONCURRENCY))
    method = f" --method {target.method}" if target.method else ""
    return (
        f"a sweep: for n in {levels}; do vllm bench serve --base-url {url} "
        f"--model {target.model} --dataset-name random --max-concurrency $n "
        "--num-prompts 200 --save-result --result-filename spec-$n.json "
        "--metadata speculative=true; done, the same against a plain server into plain-$n.json, "
        f"then `spectax model fit spec-*.json plain-*.json{method} --save-profile NAME "
        f"--config CONFIG` and `profile: NAME` under `{target.name}` (basis profile)"
    )
