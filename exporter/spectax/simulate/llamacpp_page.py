"""The /metrics page of a simulated llama.cpp `llama-server --metrics`, from the same state.

The shape is the recorded pages' (tests/fixtures/llamacpp-11434.0.0): `llamacpp:` families,
no labels but `position`, no model name, no `process_start_time_seconds` (a restart shows as
counters going back to 0), no finished-request counter, no histograms; values as C++ prints
doubles (6 significant digits), per-position counts as integers. The three speculative
counters are on every page, 0 without a draft model; the per-position family appears with
the first speculative step. As with SGLang, llama.cpp counts a request's tokens when it
finishes and the simulator as they are emitted: a window's difference is the requests in
flight.
"""

from __future__ import annotations

from spectax.simulate.pagetext import finished
from spectax.simulate.state import EngineState

__all__ = ["LlamacppPage"]

_COUNTERS = (  # (family, HELP): the first five, then n_decode and n_tokens_max
    ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens"),
    ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache"),
    ("prompt_seconds_total", "Total time spent processing prompts"),
    ("tokens_predicted_total", "Number of generation tokens processed"),
    ("tokens_predicted_seconds_total", "Total time spent generating tokens"),
    (
        "n_decode_total",
        "Total number of llama_decode() calls, excluding speculative decoding and multimodal "
        "decoding",
    ),
    ("n_tokens_max", "Largest observed sequence length (prompt + generation)"),
    ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated"),
    (
        "spec_decode_num_accepted_tokens_total",
        "Speculative: Total draft tokens accepted by the target model",
    ),
    ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps"),
)
_GAUGES = (
    ("prompt_tokens_seconds", "Average prompt throughput in tokens/s"),
    ("predicted_tokens_seconds", "Average generation throughput in tokens/s"),
    ("requests_processing", "Number of requests processing"),
    ("requests_deferred", "Number of requests deferred"),
    ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call"),
)
_PER_POSITION = "spec_decode_num_accepted_tokens_per_pos_total"


def _double(v: float) -> str:
    """A double as C++'s ostream prints it by default: 6 significant digits (%g)."""
    return format(float(v), "g")


class LlamacppPage:
    """One llama-server's page; build a new one when the engine restarts."""

    content_type = "text/plain; version=0.0.4"

    def __init__(self, state: EngineState) -> None:
        self.state = state

    def render(self) -> str:
        s = self.state
        c = s.counters
        h = s.hists
        p = s.profile
        longest = s.prompt_hi + p.max_tokens if finished(s) else 0
        counters = (
            c.prompt_tokens,
            0,
            h["prefill"].sum,
            c.generation_tokens,
            h["decode"].sum,
            c.steps,
            longest,
            c.draft_tokens,
            c.accepted,
            c.drafts,
        )
        running = round(s.gauge_running)
        steps = c.steps
        busy = s.gauge_running if steps else 0.0
        gauges = (0, 0, running, round(s.gauge_waiting), busy)
        out = []
        for (name, help_), v in zip(_COUNTERS, counters, strict=True):
            out.append(f"# HELP llamacpp:{name} {help_}\n# TYPE llamacpp:{name} counter\n")
            out.append(f"llamacpp:{name} {_double(v)}\n")
        for (name, help_), v in zip(_GAUGES, gauges, strict=True):
            out.append(f"# HELP llamacpp:{name} {help_}\n# TYPE llamacpp:{name} gauge\n")
            out.append(f"llamacpp:{name} {_double(v)}\n")
        if s.speculative_tokens and c.drafts:  # appears with the first speculative step
            out.append(
                f"# HELP llamacpp:{_PER_POSITION} Accepted tokens per draft position\n"
                f"# TYPE llamacpp:{_PER_POSITION} counter\n"
            )
            out += [
                f'llamacpp:{_PER_POSITION}{{position="{i}"}} {n}\n'
                for i, n in enumerate(s.accepted_per_position())
            ]
        return "".join(out)
