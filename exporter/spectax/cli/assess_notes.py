"""Why `spectax assess` shows "-" for a figure, or adjusted one: one note per reason.

A fresh clone gives both pages the same modification time, so the span is
unknown and every money figure is "-": without a note a user cannot tell
that `--seconds` is what is missing. Each note names the JSON keys it
explains, so the text output can mark each "-" with its note's number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spectax import economics
from spectax.engines import Capability
from spectax.pipeline.windows import Window

#: The assessment's own figures, in the order `assess` shows them.
ASSESSMENT_KEYS = (
    "model",
    "output_tokens",
    "prompt_tokens",
    "drafts",
    "draft_tokens",
    "accepted_tokens",
    "concurrency_requests",
    "restarted",
    "acceptance_ratio",
    "acceptance_length_tokens",
    "position_acceptance_ratio",
    "breakeven_acceptance_ratio",
    "no_acceptance_pays",
    "speedup_ratio",
    "speedup_measured_ratio",
    "speedup_low_ratio",
    "speedup_high_ratio",
    "verdict_basis",
    "model_source",
    "step_overhead_ratio",
    "crossover_concurrency_requests",
    "speculative_tokens",
    "recommended_speculative_tokens",
    "recommended_speedup_ratio",
    "breakeven_step_overhead_ratio",
    "breakeven_ridge_batch_requests",
    "draft_compute_share_ratio",
    "rejected_share_ratio",
    "spend_usd",
    "cost_per_million_output_tokens_usd",
    "cost_per_million_output_tokens_no_speculation_usd",
    "speculation_savings_usd",
    "verdict",
)
#: A JSON object: the figures, what an uncertain verdict turns on and what would settle it
#: (spectax.settle), the latency and KV-cache figures the daemon exports, the notes, and the
#: pages' load curve and the K schedule that follows (`assess_curve`; null: no speculation).
JSON_KEYS = (
    *ASSESSMENT_KEYS,
    "turns_on",
    "settle",
    "latency",
    "capacity",
    "notes",
    "load_curve",
    "k_schedule",
)
FIGURES = ASSESSMENT_KEYS[1:-1]  # the lines of the text output between the verdict and the notes
SPECULATION_KEYS = ("drafts", "draft_tokens", "accepted_tokens", "breakeven_acceptance_ratio")
DRAFTING_KEYS = (
    "acceptance_ratio",
    "position_acceptance_ratio",
    "acceptance_length_tokens",
    "speedup_ratio",
    "crossover_concurrency_requests",
    "speculative_tokens",
    "recommended_speculative_tokens",
    "recommended_speedup_ratio",
    "draft_compute_share_ratio",
    "rejected_share_ratio",
)
MONEY_KEYS = (
    "spend_usd",
    "cost_per_million_output_tokens_usd",
    "cost_per_million_output_tokens_no_speculation_usd",
    "speculation_savings_usd",
)
WHY_NOT_DRAFTING = {
    "no_speculation": "the pages show no speculative decoding",
    "no_traffic": "no output tokens were generated between the pages",
}
# The figures a quantity an engine does not expose leaves "-" (docs/engines.md).
ABSENT_KEYS = {
    "draft_tokens": (
        "draft_tokens",
        "acceptance_ratio",
        "breakeven_acceptance_ratio",
        "speedup_ratio",
        "speedup_low_ratio",
        "speedup_high_ratio",
        "verdict_basis",
        "step_overhead_ratio",
        "crossover_concurrency_requests",
        "speculative_tokens",
        "recommended_speculative_tokens",
        "recommended_speedup_ratio",
        "breakeven_step_overhead_ratio",
        "breakeven_ridge_batch_requests",
        "draft_compute_share_ratio",
        "rejected_share_ratio",
    ),
    "per_position": (
        "position_acceptance_ratio",
        "speculative_tokens",
        "recommended_speculative_tokens",
        "recommended_speedup_ratio",
    ),
}
VERDICT_KEYS = (
    "speedup_low_ratio",
    "speedup_high_ratio",
    "verdict_basis",
    "model_source",
    "breakeven_step_overhead_ratio",
    "breakeven_ridge_batch_requests",
)
# Speculation on, nothing proposed: no acceptance, yet a speedup, a verdict and savings (§3b).
NO_DRAFTS = (
    "speculation is on but proposed nothing between the pages: no acceptance (nor break-even"
    " or crossover), yet every step paid the proposer's per-step cost, priced as"
    " S = (r + 1)/(r(1 + h) + 1), below 1 for every h at or above the method's floor h_min:"
    " a tax (docs/economics.md, the floor under h)"
)
BETTER_BASIS = (
    "for a better basis give a control's pages (--control CBEFORE CAFTER, the same model"
    " without speculation over the same span: a measured verdict); --ridge-batch B* and"
    " --step-overhead-ratio H (say from `spectax model fit` on a benchmark sweep) move the"
    " estimate, not the band: two pages cannot tell where they came from (a daemon endpoint"
    " with a `control:` or a `profile:` is judged on a calibrated or profile basis)"
)


@dataclass(frozen=True)
class Note:
    """Why some figures are "-" or were adjusted: `keys` are the JSON keys it explains."""

    keys: tuple[str, ...]
    text: str


def finished_requests(
    window: Window, control: Window | None, model: str
) -> tuple[float, float | None] | None:
    """Requests finished on our side and the control's (None: no control given)."""
    if control is None:
        return None
    ours = window.models[model].time_per_output_token
    theirs = control.models.get(model) or next(iter(control.models.values()))
    other = theirs.time_per_output_token
    return (ours.count if ours else 0, other.count if other else None)


def notes_for(
    a: economics.Assessment,
    seconds_known: bool,
    priced: bool,
    no_seconds_reason: str,
    concurrency: float,
    finished: tuple[float, float | None] | None,
    engine: tuple[str, Mapping[str, Capability]] = ("vllm", {}),
    step: economics.StepModel | None = None,
) -> tuple[Note, ...]:
    """One note per reason a figure is "-" or was adjusted, naming the keys it explains;
    `engine` is the engine's name and its capabilities (what it does not expose, what
    spectax derives rather than reads)."""
    data = json_object(a)
    notes: list[Note] = []
    name, capabilities = engine
    if a.verdict not in WHY_NOT_DRAFTING:
        for quantity, keys in ABSENT_KEYS.items():
            explained = {k for n in notes for k in n.keys}
            missing = tuple(k for k in keys if data[k] in (None, []) and k not in explained)
            capability = capabilities.get(quantity)
            if capability is not None and capability.support == "absent" and missing:
                notes.append(Note(missing, f"not exposed by {name}: {capability.why}"))
        length = capabilities.get("acceptance_length")
        if length is not None and length.support == "derived" and a.acceptance_length_tokens:
            notes.append(
                Note(("acceptance_length_tokens",), f"derived, not counted by {name}: {length.why}")
            )

    def why(keys: Sequence[str], text: str) -> None:
        """A note for those of `keys` that are "-" and not explained yet."""
        explained = {k for n in notes for k in n.keys}
        missing = tuple(k for k in keys if data[k] in (None, []) and k not in explained)
        if missing:
            notes.append(Note(missing, text))

    if concurrency < 1.0:
        notes.append(
            Note(
                ("concurrency_requests",),
                f"concurrency {concurrency:g} taken as 1: a step serves at least one request",
            )
        )
    notes.extend(_parameter_notes(a, step))
    schedule_note = _schedule_note(a)
    if schedule_note is not None:
        notes.append(schedule_note)
    not_drafting = WHY_NOT_DRAFTING.get(a.verdict)
    if not_drafting:
        why(
            (*SPECULATION_KEYS, *DRAFTING_KEYS, *VERDICT_KEYS, "speedup_measured_ratio"),
            not_drafting,
        )
        why(("step_overhead_ratio",), not_drafting)
    elif a.draft_tokens is not None and a.draft_tokens <= 0:
        why((*DRAFTING_KEYS, "breakeven_acceptance_ratio"), NO_DRAFTS)
    basis_note = _basis_note(a)
    if basis_note:
        notes.append(Note(("verdict_basis", "speedup_low_ratio", "speedup_high_ratio"), basis_note))
    why(
        ("breakeven_ridge_batch_requests",),
        "no ridge batch makes this window pay: what was accepted does not cover the drafts and"
        " the per-step overhead h, however memory-bound the GPU",
    )
    crossover = a.crossover_concurrency_requests
    why(
        ("crossover_concurrency_requests",),
        "this acceptance pays at no concurrency: what is accepted does not cover the drafts'"
        " cost c and the per-step overhead h (alpha - c - h*q <= 0)"
        if crossover is None
        else "acceptance pays at any concurrency (B_x infinite)",
    )
    if finished is None:
        why(
            ("speedup_measured_ratio",),
            "no control's pages: the first way to settle it, above"
            if a.verdict == "uncertain"
            else "give --control CBEFORE CAFTER for a measured speedup",
        )
    else:
        ours, theirs = finished
        why(
            ("speedup_measured_ratio",),
            f"measured speedup withheld: fewer than {economics.MIN_MEASURED_REQUESTS} requests"
            f" finished (ours {ours:g}, the control's {theirs or 0:g})",
        )
    no_price = "no price: pass --usd-per-hour X or --gpu G --provider P"
    if not seconds_known:
        why(
            MONEY_KEYS,
            f"no money figures: no time between the pages is known; {no_seconds_reason}"
            + ("" if priced else f"; and {no_price}"),
        )
    elif not priced:
        why(MONEY_KEYS, f"no money figures: {no_price}")
    elif a.output_tokens <= 0:
        why(MONEY_KEYS, "no cost per token: no output tokens were generated between the pages")
    elif not_drafting:
        why(MONEY_KEYS, f"no savings: {not_drafting}")
    return tuple(notes)


def _parameter_notes(a: economics.Assessment, step: economics.StepModel | None) -> list[Note]:
    """What the h in force is, where it came from, and what follows for break-even and K:
    so a modelled speedup, an implied h and a break-even shown side by side never seem to
    contradict each other."""
    notes = []
    h = a.step_overhead_ratio
    if a.speedup_measured_ratio is not None and h is not None and step is not None:
        notes.append(
            Note(
                ("speedup_ratio", "step_overhead_ratio"),
                f"speedup_ratio is the model at the given B* = {step.ridge_batch:g} and"
                f" h = {step.step_overhead:g}; break-even, crossover, K and the money use"
                f" h = {h:.3g}, the h the measured speedup implies, held within physics"
                f" ({step.step_overhead_floor:g} to 20: beyond, c or B* are off, not the step)",
            )
        )
    if a.no_acceptance_pays:
        notes.append(
            Note(
                ("breakeven_acceptance_ratio",),
                "no acceptance pays here: at this load the per-step overhead"
                + (f" (h = {h:.3g})" if h is not None else "")
                + " alone outweighs even a draft that is always accepted",
            )
        )
    k, k_now = a.recommended_speculative_tokens, a.speculative_tokens
    if k is not None and k_now is not None:
        if k == 0:
            text = "K 0: turn speculation off: no K observed beats plain decoding"
        elif k == k_now:
            text = f"keep K {k}: no other K observed predicts a higher speedup"
        else:
            text = (
                f"K {k} predicts {a.recommended_speedup_ratio:.3f}x against the"
                f" {a.speedup_in_force or 0:.3f}x of the K {k_now} that ran"
            )
        notes.append(Note(("recommended_speculative_tokens",), text))
    return notes


def _schedule_note(a: economics.Assessment) -> Note | None:
    """Under `--schedule`: the K the span was assessed at, and whether it ran two of the
    schedule's K (then its figures mix them, as the status page says of a window)."""
    k = a.scheduled_speculative_tokens
    if k is None:
        return None
    text = (
        f"assessed at K = {k}, the K --schedule runs at {a.concurrency_requests:g} running requests"
    )
    if a.schedule_boundary:
        text += (
            "; the span ran two of its K (its mean load lies across a K change, or it drafted"
            " longer than K): its figures mix them"
        )
    return Note(("speculative_tokens",), text)


def _basis_note(a: economics.Assessment) -> str | None:
    """Why the verdict is uncertain or rests on defaults, and how to get a better basis."""
    low, high = a.speedup_low_ratio, a.speedup_high_ratio
    band = f"{low:.3f} to {high:.3f}" if low is not None and high is not None else ""
    # An uncertain verdict's ways out are its "to settle it" lines (`settle_steps`), the
    # first of them a control's pages: not repeated here.
    if a.verdict == "uncertain" and not band:
        return "uncertain: no drafted-token count, so no modelled speedup"
    if a.verdict == "uncertain":
        return (
            f"uncertain: the speedup's band ({band}) straddles 1, so these pages cannot tell"
            f" whether speculation pays (basis {a.verdict_basis}); --ridge-batch and"
            " --step-overhead-ratio move the estimate, not the band"
        )
    if a.verdict_basis == "default":
        return (
            f"basis default: B* and h are configured guesses (B* within x4, h from its"
            f" floor to 3), yet even so the band ({band}) is on one side of 1;"
            f" {BETTER_BASIS}"
        )
    return None


def json_object(a: economics.Assessment) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key in ASSESSMENT_KEYS:
        value = getattr(a, key)
        if isinstance(value, tuple):
            value = list(value)
        if isinstance(value, float) and not math.isfinite(value):
            value = None  # JSON has no infinity; B_x = inf means "never a tax"
        data[key] = value
    return data
