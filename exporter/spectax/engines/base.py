"""What every engine module produces: one instant of an engine's counters.

An engine module turns the text of a `/metrics` page into an `EngineSample`.
Everything downstream (windows, economics, store) sees only these objects, so
adding an engine (SGLang, TensorRT-LLM) never touches the economics.

Counter values stay cumulative here; the window tracker turns them into
deltas. Values are floats because that is what the exposition format carries;
counters are integer-valued in practice.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class ParseError(ValueError):
    """A `/metrics` page that cannot be read. Names the offending line."""

    def __init__(self, message: str, line_number: int | None = None, line: str | None = None):
        self.line_number = line_number
        self.line = line
        where = f"line {line_number}: " if line_number is not None else ""
        shown = f" ({line[:120]!r})" if line is not None else ""
        super().__init__(f"{where}{message}{shown}")


@dataclass(frozen=True, slots=True)
class Histogram:
    """Sum and count of a Prometheus histogram (buckets are not needed)."""

    sum: float
    count: float


@dataclass(frozen=True, slots=True)
class ModelSample:
    """Cumulative counters and current gauges of one served model.

    Summed over the `engine` label (data-parallel ranks). Speculation fields
    are None when the page has no spec-decode families at all (speculation not
    configured), which is different from 0 (configured but idle).
    """

    generation_tokens: float = 0.0
    prompt_tokens: float = 0.0
    requests_finished: float = 0.0
    requests_running: float = 0.0
    requests_waiting: float = 0.0
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    accepted_per_position: tuple[float, ...] = ()
    iteration_tokens: Histogram | None = None
    inter_token_latency: Histogram | None = None
    time_per_output_token: Histogram | None = None
    # vLLM V0 only: gauges computed by the engine (its counters over-counted).
    legacy_acceptance_rate: float | None = None
    legacy_efficiency: float | None = None

    @property
    def speculating(self) -> bool:
        """True when the engine exposes speculative-decoding counters."""
        return self.draft_tokens is not None or self.legacy_acceptance_rate is not None


@dataclass(frozen=True, slots=True)
class EngineSample:
    """One scrape of one endpoint, at one instant."""

    engine: str
    models: dict[str, ModelSample] = field(default_factory=dict)
    process_start_time_seconds: float | None = None

    @property
    def has_engine_metrics(self) -> bool:
        """False for a page without engine families (vLLM `--disable-log-stats`)."""
        return bool(self.models)
