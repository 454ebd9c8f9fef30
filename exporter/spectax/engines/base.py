"""What every engine module produces: one instant of an engine's counters.

An engine module turns the text of a `/metrics` page into an `EngineSample`.
Everything downstream (windows, economics, store) sees only these objects, so
adding an engine (SGLang, TensorRT-LLM) never touches the economics.

Counter values stay cumulative here; the window tracker turns them into
deltas. Values are floats because that is what the exposition format carries;
counters are integer-valued in practice.

`Counters` below is the one declared list of the counters spectax reads. The
deltas, restart check, packing and row codec of every other room are derived
from it, so adding a counter is one line there (plus its database column and
migration).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Generic, Literal, TypeVar

#: How a counter is subtracted, summed, packed and stored:
#: plain - a number, 0 when the page lacks it;
#: speculation - a number, None when the engine does not speculate (different from 0: idle);
#: histogram - a `Histogram` (sum, count, cumulative buckets), None when the page lacks it;
#: per_position - a tuple of numbers, one per draft position (at most one such counter).
T = TypeVar("T")
_Made = TypeVar("_Made")

CounterKind = Literal["plain", "speculation", "histogram", "per_position"]

_EMPTY: dict[CounterKind, object] = {
    "plain": 0.0,
    "speculation": None,
    "histogram": None,
    "per_position": (),
}


class ParseError(ValueError):
    """A `/metrics` page that cannot be read. Names the offending line."""

    def __init__(self, message: str, line_number: int | None = None, line: str | None = None):
        self.line_number = line_number
        self.line = line
        where = f"line {line_number}: " if line_number is not None else ""
        shown = f" ({line[:120]!r})" if line is not None else ""
        super().__init__(f"{where}{message}{shown}")


#: A histogram's cumulative buckets: (upper bound `le`, observations <= it), ascending, the
#: last bound +Inf. Empty when unknown (an engine that gives none, or a delta whose two ends
#: disagree on the bounds): quantiles need them, means do not.
Buckets = tuple[tuple[float, float], ...]


@dataclass(frozen=True, slots=True, init=False, repr=False)
class Histogram:
    """Sum, count and cumulative buckets of a Prometheus histogram.

    The buckets are what latency quantiles are computed from (spectax.pipeline.quantiles);
    the mean needs only sum and count, so a parser that reads no buckets leaves them empty.

    Kept compact, since every endpoint holds several (its last page's, its sliding window's
    sum, its open window's): the bounds as one tuple shared by every histogram with the same
    bounds, the counts as packed doubles. A (bound, count) pair per bucket cost ~88 bytes,
    ~30 MB at 2,000 endpoints with vLLM's ~80 buckets; now 8. `buckets` gives the pairs.
    """

    sum: float
    count: float
    bounds: tuple[float, ...]
    counts: bytes  # one double per bound, as `array("d").tobytes()`

    def __init__(self, sum: float, count: float, buckets: Iterable[tuple[float, float]] = ()):
        pairs = tuple(buckets)
        self._set(sum, count, tuple(bound for bound, _ in pairs), (n for _, n in pairs))

    @classmethod
    def of(
        cls, sum: float, count: float, bounds: tuple[float, ...], counts: Iterable[float] | bytes
    ) -> Histogram:
        """A histogram from its bounds and the cumulative count at each (or another
        histogram's packed `counts`), without pairs."""
        histogram = cls.__new__(cls)
        histogram._set(sum, count, bounds, counts)
        return histogram

    def _set(self, sum: float, count: float, bounds: tuple[float, ...], counts: Any) -> None:
        packed = counts if isinstance(counts, bytes) else array("d", counts).tobytes()
        if len(packed) != 8 * len(bounds):
            raise ValueError(f"{len(bounds)} bounds but {len(packed) // 8} counts")
        # Through the slots' descriptors: object.__setattr__ resolves each name on the type,
        # and histograms are built by the dozen a page and in every window's arithmetic.
        _set_sum(self, sum)
        _set_count(self, count)
        _set_bounds(self, shared_bounds(bounds))
        _set_counts(self, packed)

    @property
    def buckets(self) -> Buckets:
        """The (upper bound, cumulative count) pairs, ascending; () when unknown."""
        return tuple(zip(self.bounds, self.bucket_counts(), strict=True))

    def bucket_counts(self) -> Sequence[float]:
        """The cumulative count at each bound, without a copy."""
        return memoryview(self.counts).cast("d")

    def __repr__(self) -> str:
        return f"Histogram(sum={self.sum!r}, count={self.count!r}, buckets={self.buckets!r})"


_set_sum = vars(Histogram)["sum"].__set__
_set_count = vars(Histogram)["count"].__set__
_set_bounds = vars(Histogram)["bounds"].__set__
_set_counts = vars(Histogram)["counts"].__set__

_BOUNDS: dict[tuple[float, ...], tuple[float, ...]] = {}
_MAX_SHARED_BOUNDS = 1024  # distinct bound lists shared; a page inventing more is not cached
_SHARED_IDS: dict[int, tuple[float, ...]] = {}  # the shared tuples by identity


def shared_bounds(bounds: tuple[float, ...]) -> tuple[float, ...]:
    """The one tuple of these bounds: every page of a fleet repeats the same few lists."""
    if _SHARED_IDS.get(id(bounds)) is bounds:
        # Already the shared tuple (window arithmetic passes it on): a tuple does not cache
        # its hash, and hashing vLLM's ~80 bounds for every histogram built was a tenth of
        # a scrape's monitor time (issue 31).
        return bounds
    shared = _BOUNDS.get(bounds)
    if shared is not None:
        return shared
    if len(_BOUNDS) < _MAX_SHARED_BOUNDS:
        _BOUNDS[bounds] = bounds
        _SHARED_IDS[id(bounds)] = bounds  # held by _BOUNDS for good: its id stays its own
    return bounds


class PerBoundList(Generic[_Made]):
    """A value made once per bound list and found again by the list's identity: histograms
    share their bounds' tuple (`shared_bounds`), so what depends on the bounds alone (are
    they ascending, a JSON template of them) is made once, not at every scrape, and looked
    up without hashing ~80 floats. Each entry holds its tuple, so its id stays its own;
    past 1,024 lists (a page inventing bounds) the value is made each time."""

    def __init__(self, make: Callable[[tuple[float, ...]], _Made]):
        self._make = make
        self._by_id: dict[int, tuple[tuple[float, ...], _Made]] = {}

    def __call__(self, bounds: tuple[float, ...]) -> _Made:
        known = self._by_id.get(id(bounds))
        if known is not None and known[0] is bounds:
            return known[1]
        made = self._make(bounds)
        if len(self._by_id) < _MAX_SHARED_BOUNDS:
            self._by_id[id(bounds)] = (bounds, made)
        return made


def counter(kind: CounterKind, column: str | None = None) -> Any:
    """A declared counter: a dataclass field of `kind`, stored in `column` of the windows
    table (its name by default; a histogram in `<column>_sum` and `<column>_count`)."""
    return field(default=_EMPTY[kind], metadata={"kind": kind, "column": column})


class _Factory:
    """The default of a field left to its default_factory (shown as dataclasses shows it)."""

    def __repr__(self) -> str:
        return "<factory>"


_FROM_FACTORY: Any = _Factory()


def _set_through_slots(cls: type[T]) -> type[T]:
    """Give a frozen slotted dataclass an `__init__` that sets each field through its slot's
    descriptor: the same signature, defaults and result as the generated one, which sets
    them through `object.__setattr__` one at a time, resolving each name on the type (a
    ModelSample: 2.7 -> 1.4 us, a tenth of a small page's parse; issue 31). Still frozen:
    only `__init__` changes."""
    namespace: dict[str, Any] = {"_FROM_FACTORY": _FROM_FACTORY}
    params, lines = [], []
    for f in fields(cls):  # type: ignore[arg-type]
        namespace[f"_set_{f.name}"] = getattr(cls, f.name).__set__
        value = f.name
        if f.default is not MISSING:
            namespace[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_FROM_FACTORY")
            value = f"_factory_{f.name}() if {f.name} is _FROM_FACTORY else {f.name}"
        else:
            params.append(f.name)
        lines.append(f"    _set_{f.name}(self, {value})\n")
    exec(f"def __init__(self, {', '.join(params)}):\n{''.join(lines)}", namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


@dataclass(frozen=True, slots=True)
class Counters:
    """The engine counters spectax reads, declared once: one line a counter.

    Summed over the `engine` label (data-parallel ranks). Both an engine sample
    (cumulative values) and a span's deltas (`spectax.pipeline.counts.Counts`)
    are made of these fields.
    """

    generation_tokens: float = counter("plain", column="output_tokens")
    prompt_tokens: float = counter("plain")
    requests_finished: float = counter("plain")
    drafts: float | None = counter("speculation")
    draft_tokens: float | None = counter("speculation")
    accepted_tokens: float | None = counter("speculation")
    accepted_per_position: tuple[float, ...] = counter("per_position")
    iteration_tokens: Histogram | None = counter("histogram")
    inter_token_latency: Histogram | None = counter("histogram")
    time_per_output_token: Histogram | None = counter("histogram")
    time_to_first_token: Histogram | None = counter("histogram")
    e2e_request_latency: Histogram | None = counter("histogram")
    estimated_flops: float = counter("plain")  # per GPU; vLLM only with --enable-mfu-metrics
    estimated_read_bytes: float = counter("plain")  # per GPU, likewise
    preemptions: float = counter("plain")  # requests evicted from a full KV cache


@dataclass(frozen=True, slots=True)
class CounterSpec:
    """One declared counter as the other rooms read the declaration."""

    name: str
    kind: CounterKind
    column: str


#: The declared counters, in their declared order.
COUNTERS: tuple[CounterSpec, ...] = tuple(
    CounterSpec(f.name, f.metadata["kind"], f.metadata["column"] or f.name)
    for f in fields(Counters)
)


@_set_through_slots
@dataclass(frozen=True, slots=True)
class ModelSample(Counters):
    """Cumulative counters and current gauges of one served model.

    Speculation fields are None when the page has no spec-decode families at
    all (speculation not configured), which is different from 0 (configured
    but idle).
    """

    requests_running: float = 0.0
    requests_waiting: float = 0.0
    # The KV cache (issue 20: a draft's weights come out of it). Usage is a 0-1 fraction,
    # the ranks' mean; blocks and bytes (when the engine states them) are summed over ranks.
    kv_cache_usage: float | None = None
    kv_cache_blocks: float | None = None
    kv_block_size: float | None = None
    kv_cache_bytes: float | None = None
    # vLLM V0 only: gauges computed by the engine (its counters over-counted).
    legacy_acceptance_rate: float | None = None
    legacy_efficiency: float | None = None
    #: Draft time over step time as the engine measured it (TensorRT-LLM's
    #: `trtllm_spec_decode_draft_overhead`); None where the engine does not time the drafter.
    draft_overhead: float | None = None
    #: Seconds the finished requests spent in prefill (scheduled to first token), summed since
    #: the process started (vLLM's `request_prefill_time_seconds_sum`). With the inter-token
    #: latencies' sum (each request's decode time, as its tokens come out) it gives an
    #: interval's running requests (pipeline.intervals) instead of the running gauge read at
    #: two scrapes, which a server can answer only in the moments it shows none running
    #: (docs/economics.md, "Running requests"). None where the engine keeps no such sum.
    prefill_seconds: float | None = None

    @property
    def speculating(self) -> bool:
        """True when the engine exposes speculative-decoding counters (SGLang and TGI count
        verify steps but not drafted tokens: `drafts` alone says they speculate)."""
        return (
            self.draft_tokens is not None
            or self.drafts is not None
            or self.legacy_acceptance_rate is not None
        )


@_set_through_slots
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


#: How an engine gives a quantity spectax reports: exact - read from a counter the engine
#: keeps for it; derived - computed from other counters or window gauges (an approximation,
#: said so wherever it is shown); absent - the engine does not expose it, so spectax exports
#: nothing for it (never a 0 that looks real).
Support = Literal["exact", "derived", "absent"]

#: The quantities of the capability matrix (docs/engines.md), one row per engine.
QUANTITIES: tuple[str, ...] = (
    "output_tokens",
    "prompt_tokens",
    "requests_finished",
    "draft_tokens",  # so the acceptance rate, accepted / drafted
    "acceptance_length",  # 1 + accepted / drafts
    "per_position",
    "step_time",  # time per engine step, for the counterfactual's calibration
    "time_per_output_token",
    "requests_running",
    "draft_overhead",  # draft time / step time, measured by the engine
    "restart",  # process_start_time_seconds, or a counter reset
)


@dataclass(frozen=True, slots=True)
class Capability:
    """How one engine gives one quantity, and why (shown as "not exposed by <engine>")."""

    support: Support
    why: str = ""


@dataclass(frozen=True, slots=True)
class Engine:
    """One registered engine: its parser, how to recognise its page, what it exposes."""

    name: str
    parse: Callable[[str], EngineSample]
    #: Metric-name prefix that identifies the engine's page (`spectax assess` detection).
    prefix: str
    #: Quantity (from `QUANTITIES`) -> how the engine gives it; every quantity listed.
    capabilities: Mapping[str, Capability]
    #: Where the engine serves its page by default (TensorRT-LLM: /prometheus/metrics).
    metrics_path: str = "/metrics"
    #: Makes a parser for one server's pages, for each endpoint (vLLM's remembers which of
    #: its templates the server's last page matched); `parse` serves every one when None.
    reader: Callable[[], Callable[[str], EngineSample]] | None = None

    def new_reader(self) -> Callable[[str], EngineSample]:
        """A parser for one server's pages: `reader`'s, or `parse`."""
        return self.reader() if self.reader is not None else self.parse
