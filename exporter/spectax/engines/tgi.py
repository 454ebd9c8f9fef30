"""Text Generation Inference (TGI 3.x) `/metrics` page -> `EngineSample`.

Read from TGI's router source (`router/src/infer/mod.rs`, `backends/v3/src/backend.rs`,
`router/src/server.rs`; see /work/shared/ENGINES.md); TGI is Rust and renders through
`metrics-exporter-prometheus`: no labels, no `_total` suffix on counters, no
`process_start_time_seconds` (a restart shows as counters going down). A TGI server
serves one model and its page does not name it: the sample's one model is `MODEL`.

Tokens are histograms: `tgi_request_generated_tokens` (its `_sum` is the output
tokens), `tgi_request_input_length` (`_sum`: prompt tokens); `tgi_request_success`
counts finished requests. `tgi_request_skipped_tokens` records n - 1 for every
generation of n tokens, prefill included (which gives one): its `_sum` is the accepted
drafts and its `_count` less the finished requests the verify steps (derived: a request
still running has had its prefill counted). There is no drafted-token count (K is the
launcher's `--speculate`) and no per-position count. The histogram is recorded without
speculation too (all zeros): the page shows speculation when its buckets reach 1 (the
router sets them to 0..speculate) or when a token was ever skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from spectax.engines import scan
from spectax.engines.base import Capability, EngineSample, Histogram, ModelSample

__all__ = ["CAPABILITIES", "MODEL", "parse"]

ENGINE: Final = "tgi"
#: The name of the one model of a TGI page (the page carries none).
MODEL: Final = "tgi"

_GEN, _PROMPT, _FINISHED, _SKIP_SUM, _SKIP_COUNT, _TPOT_SUM, _TPOT_COUNT = range(7)
_RUNNING, _WAITING = range(7, 9)
_N_SLOTS: Final = 9
_FAMILIES: Final = {
    "tgi_request_generated_tokens_sum": _GEN,
    "tgi_request_input_length_sum": _PROMPT,
    "tgi_request_success": _FINISHED,
    "tgi_request_skipped_tokens_sum": _SKIP_SUM,
    "tgi_request_skipped_tokens_count": _SKIP_COUNT,
    "tgi_request_mean_time_per_token_duration_sum": _TPOT_SUM,
    "tgi_request_mean_time_per_token_duration_count": _TPOT_COUNT,
    "tgi_batch_current_size": _RUNNING,
    "tgi_queue_size": _WAITING,
}
_BUCKET: Final = "tgi_request_skipped_tokens_bucket"
_SCAN: Final = scan.scanner([*_FAMILIES, _BUCKET])
_LINES: Final = scan.line_scanner([*_FAMILIES, _BUCKET])
_BOUNDED: Final = frozenset([*_FAMILIES, _BUCKET])


def parse(text: str | bytes) -> EngineSample:
    """Parse a TGI page into an `EngineSample` (`models == {}` without TGI families).

    Raises `ParseError` naming the line for a malformed line it reads.
    """
    return scan.read(text, _LINES, _SCAN, _BOUNDED, _read)


def _read(rows: Iterable[scan.Row]) -> EngineSample:
    """The sample of the page's relevant lines (`scan.read` gives them, in bulk or line by
    line); `ParseError` for one the engine's rules refuse."""
    acc: list[float | None] = [None] * _N_SLOTS
    top_bucket = 0.0
    for name, labels, value, start, body in rows:
        if name == _BUCKET:
            try:
                le = float(labels.get("le", ""))
            except ValueError:
                raise scan.error(body, start, f"{name} has no numeric le label") from None
            if le != float("inf"):
                top_bucket = max(top_bucket, le)
            continue
        if labels:
            # TGI labels nothing it renders; a labelled series is another exporter's.
            raise scan.error(body, start, f"{name} carries labels TGI does not set")
        slot = _FAMILIES[name]
        if acc[slot] is not None:
            raise scan.error(body, start, f"duplicate series {name}")
        acc[slot] = value
    if all(v is None for v in acc):
        return EngineSample(engine=ENGINE)
    finished = acc[_FINISHED] or 0.0
    drafts = accepted = None
    steps = acc[_SKIP_COUNT]
    if steps is not None and (top_bucket >= 1 or (acc[_SKIP_SUM] or 0.0) > 0):
        drafts = max(0.0, steps - finished)
        accepted = acc[_SKIP_SUM] or 0.0
    tpot = None
    if acc[_TPOT_SUM] is not None or acc[_TPOT_COUNT] is not None:
        tpot = Histogram(sum=acc[_TPOT_SUM] or 0.0, count=acc[_TPOT_COUNT] or 0.0)
    sample = ModelSample(
        generation_tokens=acc[_GEN] or 0.0,
        prompt_tokens=acc[_PROMPT] or 0.0,
        requests_finished=finished,
        drafts=drafts,
        accepted_tokens=accepted,
        time_per_output_token=tpot,
        requests_running=acc[_RUNNING] or 0.0,
        requests_waiting=acc[_WAITING] or 0.0,
    )
    return EngineSample(engine=ENGINE, models={MODEL: sample})


#: TGI 3.x: histograms only, no drafted count, no process start time.
CAPABILITIES: Final = {
    "output_tokens": Capability("exact", "tgi_request_generated_tokens_sum"),
    "prompt_tokens": Capability("exact", "tgi_request_input_length_sum"),
    "requests_finished": Capability("exact", "tgi_request_success"),
    "draft_tokens": Capability("absent", "no drafted count: K is the launcher's --speculate"),
    "acceptance_length": Capability(
        "derived", "1 + skipped_tokens_sum / (skipped_tokens_count - requests finished)"
    ),
    "per_position": Capability("absent", "no per-position counter"),
    "step_time": Capability(
        "absent", "tgi_batch_forward_duration is per batch, not per request step"
    ),
    "time_per_output_token": Capability("exact", "tgi_request_mean_time_per_token_duration"),
    "requests_running": Capability("exact", "tgi_batch_current_size"),
    "draft_overhead": Capability("absent", "TGI does not time the drafter apart"),
    "restart": Capability("derived", "no process_start_time_seconds: counters going down"),
}
