"""What an endpoint keeps between scrapes, packed: the intervals waiting to leave the sliding
window, the window's running total and the open history window (spectax.pipeline.windows),
and the last page's sample, the cursor the next interval starts from.

With 2,000 endpoints and 20 intervals each in the default 5-minute window, 40,000
intervals wait. A packed interval is one bytes object, which the garbage collector never
tracks (its full passes, a pause in scraping and in serving /metrics, skip them): the
interval's fields (times, flags, money as the Decimals' exact text, each model's counts)
marshalled and deflated at level 1 against a preset dictionary: the first interval this
process packed. Every interval has the same layout (the same type codes, model names, bound
numbers, mostly the same small whole numbers), so what is left to compress is what changed
since: a vLLM interval's ~1.5 KB of objects take ~0.1 KB, where compressed alone they took
~0.25 KB (bench/README "Direct mode's memory"), for ~10 µs of CPU in a scrape. The packed
bytes are meaningful only to this process, beside its dictionary; they are never stored.
The sliding window keeps each interval's start and end beside it, in arrays, to know when
it leaves without unpacking.

The layout of a model's counts follows the declared counters: one double per number (None
as NaN: counter deltas are finite), per histogram its sum, count, number of buckets, the
number of its bound list and each bucket's count, then the gauges, then the per-position
counter's values, of any length, at the end. Read in that order, field after field.

A histogram's bounds are a number in a table of the bound lists seen (every interval of
every endpoint repeats the same few), not copies: a vLLM interval's counts packed to
~1.6 KB with (bound, count) pairs, ~7 MB at 2,000 endpoints with 4 intervals each, half
of it bounds. Past the table's MAX_BOUND_LISTS (a page inventing bounds) they are inline.
"""

from __future__ import annotations

import marshal
import math
import operator
import zlib
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from decimal import Decimal
from operator import attrgetter
from typing import Any

from spectax.engines.base import COUNTERS, EngineSample, Histogram, ModelSample
from spectax.pipeline.counts import GAUGES, Counts, SpanKind
from spectax.pipeline.intervals import Interval

_NAN = math.nan
MAX_BOUND_LISTS = 1024
_BOUND_LISTS: list[tuple[float, ...]] = []  # the histograms' bounds, by number
_BOUND_NUMBERS: dict[tuple[float, ...], int] = {}


class Deflater:
    """Marshalled tuples of one layout, deflated against the first one it packed.

    Raw deflate (no zlib header and checksum: 6 bytes of ~100) at level 1, with that first
    tuple as the preset dictionary: every later one is mostly the same bytes. The
    dictionary is set once and never changed, so whatever this process packed it can
    unpack; the bytes mean nothing to another process, and are never stored."""

    def __init__(self) -> None:
        self._dictionary = b""

    def pack(self, fields: tuple[Any, ...]) -> bytes:
        raw = marshal.dumps(fields)
        if not self._dictionary:
            self._dictionary = raw
        # memLevel 4, not 8: a smaller hash table to set up for ~1 KB of input, 8.2 -> 5.5 us a
        # pack (four a scrape) for 2 % more bytes (101 not 99 a window, scale.py's; issue 31)
        deflate = zlib.compressobj(1, zlib.DEFLATED, -zlib.MAX_WBITS, 4, zdict=self._dictionary)
        return deflate.compress(raw) + deflate.flush()

    def unpack(self, packed: bytes) -> tuple[Any, ...]:
        inflate = zlib.decompressobj(-zlib.MAX_WBITS, zdict=self._dictionary)
        fields: tuple[Any, ...] = marshal.loads(inflate.decompress(packed) + inflate.flush())
        return fields


_INTERVALS = Deflater()

#: The marshalled tuple (start, end, restarted, busy, spend_usd, cold_start_usd,
#: draft_load_usd, ((model, packed counts), ...), unobserved_seconds), deflated; the money
#: as the Decimals' exact text.
PackedInterval = bytes


#: An interval's fields as `pack_interval` marshals them (the tuple above, not deflated).
IntervalFields = tuple[Any, ...]


def interval_fields(interval: Interval) -> IntervalFields:
    return (
        interval.start,
        interval.end,
        interval.restarted,
        interval.busy,
        str(interval.spend_usd),
        str(interval.cold_start_usd),
        str(interval.draft_load_usd),
        pack_models(interval.models),
        interval.unobserved_seconds,
    )


def pack_interval(interval: Interval) -> PackedInterval:
    return pack_interval_fields(interval_fields(interval))


def pack_interval_fields(fields: IntervalFields) -> PackedInterval:
    return _INTERVALS.pack(fields)


def unpack_interval_fields(packed: PackedInterval) -> IntervalFields:
    return _INTERVALS.unpack(packed)


def unpack_interval(packed: PackedInterval) -> Interval:
    start, end, restarted, busy, spend_usd, cold_start_usd, draft_load_usd, models, unobserved = (
        unpack_interval_fields(packed)
    )
    return Interval(
        start=start,
        end=end,
        models=unpack_models(models),
        restarted=restarted,
        busy=busy,
        spend_usd=Decimal(spend_usd),
        cold_start_usd=Decimal(cold_start_usd),
        draft_load_usd=Decimal(draft_load_usd),
        unobserved_seconds=unobserved,
    )


_SAMPLES = Deflater()
_sample_fields = attrgetter(*(f.name for f in fields(ModelSample)))
#: Where the histograms are among a model sample's fields: packed as (sum, count, the
#: number of the bound list or the bounds, the counts' bytes).
_SAMPLE_HISTOGRAMS = tuple(
    i
    for i, f in enumerate(fields(ModelSample))
    if f.name in {c.name for c in COUNTERS if c.kind == "histogram"}
)


def pack_sample(sample: EngineSample) -> bytes:
    """A page's sample as one bytes object: ~0.2 KB, not ~2.2 KB of objects."""
    models = []
    for name, model in sample.models.items():
        values = list(_sample_fields(model))
        for i in _SAMPLE_HISTOGRAMS:
            if (h := values[i]) is not None:
                values[i] = (h.sum, h.count, _bound_list_ref(h.bounds), h.counts)
        models.append((name, tuple(values)))
    return _SAMPLES.pack((sample.engine, sample.process_start_time_seconds, tuple(models)))


def unpack_sample(packed: bytes) -> EngineSample:
    engine, process_start, models = _SAMPLES.unpack(packed)
    unpacked = {}
    for name, fields_packed in models:
        values = list(fields_packed)
        for i in _SAMPLE_HISTOGRAMS:
            if (h := values[i]) is not None:
                total, count, bounds, counts = h
                values[i] = Histogram.of(total, count, _bound_list(bounds), counts)
        unpacked[name] = ModelSample(*values)
    return EngineSample(engine, unpacked, process_start)


@dataclass(frozen=True, slots=True)
class Cursor:
    """The last page's time and sample, where the next interval starts: the sample packed
    (~0.2 KB, not ~2.2 KB of objects), its draft overhead (TensorRT-LLM's, read at every
    assessment) apart."""

    time: float
    packed: bytes
    draft_overhead: float | None

    @classmethod
    def of(cls, time: float, sample: EngineSample) -> Cursor:
        overheads = (m.draft_overhead for m in sample.models.values() if m.draft_overhead)
        return cls(time, pack_sample(sample), max(overheads, default=None))

    def unpacked(self) -> tuple[float, EngineSample]:
        return self.time, unpack_sample(self.packed)


#: A model's counts packed: (the number of their shape, or -1: none; their doubles).
PackedCounts = tuple[int, bytes]
#: Each model's packed counts, in the models' order: (model, shape, doubles).
PackedModels = tuple[tuple[str, int, bytes], ...]


def pack_models(models: dict[str, Counts]) -> PackedModels:
    return tuple((name, *packed_counts(counts)) for name, counts in models.items())


def unpack_models(packed: PackedModels) -> dict[str, Counts]:
    return {name: unpack_counts(counts) for name, _, counts in packed}


def pack_counts(counts: Counts) -> bytes:
    """The counts as packed doubles, about a fifth of the memory of the object and its
    floats. Bytes rather than an array: the garbage collector does not track bytes."""
    return packed_counts(counts)[1]


def packed_counts(counts: Counts) -> PackedCounts:
    """The counts as packed doubles, with the number of their shape (`add_packed`)."""
    chunks: list[bytes] = []
    numbers: list[float] = []
    shape: list[object] = []
    for put, value in zip(_PUTS, _in_layout_order(counts), strict=True):
        if put is _put_histogram:
            if value is None:
                shape.append(None)
                numbers += (_NAN, _NAN, 0.0)
                continue
            # its counts are doubles already: their bytes go in as they are, not as ~20
            # floats each made and packed again (15 -> 11 us a vLLM window, issue 31)
            head = _histogram_head(value)
            shape.append(head[2:4] if len(head) == 4 else _INLINE_BOUNDS)
            numbers.extend(head)
            chunks += (array("d", numbers).tobytes(), value.counts)
            numbers = []
        elif put is _put_number:
            numbers.append(value)
        elif put is _put_optional:
            # a NaN is packed as None is, and unpacks as None: its shape says so, so that
            # adding it to a number gives the number, as the objects' rule does with None
            shape.append(value is None or value != value)  # noqa: PLR0124 (NaN's test)
            numbers.append(_NAN if value is None else value)
        else:  # the per-position counter, last
            shape.append(len(value))
            numbers.extend(value)
    chunks.append(array("d", numbers).tobytes())
    return _shape_number(tuple(shape)), b"".join(chunks)


# ---------------------------------------------------------------- arithmetic, packed
#
# The windows add each scrape's interval to their sums and take the leaving one out
# (spectax.pipeline.windows). Done on the objects, each sum was unpacked into ~6 objects
# per model, added histogram by histogram, bucket by bucket, and packed again. Two counts
# of one shape (the same fields None, each histogram's bounds, as many positions) lie in
# the same places of their doubles, and each rule of `spectax.pipeline.counts` is then
# the doubles' own: plain, optional (both None: NaN and NaN) and histograms (same bounds:
# sum, count, bucket by bucket) add and subtract as numbers; only a histogram's number of
# buckets and of its bound list stay as they are, and a setting is the later span's
# (adding) or the sum's own (taking out). So one `map` over the doubles gives, double for
# double, what the objects' arithmetic gives (tests/test_windows.py holds them equal).
# Counts of different shapes go through the objects.

MAX_SHAPES = 1024  # a page inventing bounds or models' layouts: past this, the objects
_INLINE_BOUNDS = "inline"  # a histogram whose bounds are inline has no shape of its own
_SHAPES: dict[tuple[object, ...], int] = {}


@dataclass(frozen=True, slots=True)
class _Plan:
    """Where, among a shape's doubles, the arithmetic is not the numbers' own."""

    heads: tuple[int, ...]  # each histogram's number of buckets and of its bound list
    settings: tuple[int, ...]  # the engine's settings (counts.GAUGES' "setting")


_PLANS: list[_Plan] = []


def _shape_number(shape: tuple[object, ...]) -> int:
    number = _SHAPES.get(shape)
    if number is not None:
        return number
    if len(_SHAPES) >= MAX_SHAPES or _INLINE_BOUNDS in shape:
        return -1
    number = _SHAPES[shape] = len(_PLANS)
    _PLANS.append(_plan(shape))
    return number


def _plan(shape: tuple[object, ...]) -> _Plan:
    """Walk the layout as `packed_counts` wrote it, noting the offsets of heads and settings."""
    heads: list[int] = []
    settings: list[int] = []
    at = 0
    described = iter(shape)
    for put, kind in zip(_PUTS, _KINDS, strict=True):
        if put is _put_histogram:
            head = next(described)
            if head is None:
                at += 3
            else:
                buckets = int(head[0])  # type: ignore[index]
                heads += (at + 2, at + 3)
                at += 4 + buckets
        elif put is _put_number:
            at += 1
        elif put is _put_optional:
            next(described)
            if kind == "setting":
                settings.append(at)
            at += 1
        else:
            at += int(next(described))  # type: ignore[call-overload]
    return _Plan(tuple(heads), tuple(settings))


def add_packed(a: PackedCounts, b: PackedCounts) -> PackedCounts:
    """`a + b` (Counts.__add__), packed: b is the later span."""
    shape = a[0]
    if shape < 0 or shape != b[0]:
        return packed_counts(unpack_counts(a[1]) + unpack_counts(b[1]))
    x, y = memoryview(a[1]).cast("d"), memoryview(b[1]).cast("d")
    out = array("d", map(operator.add, x, y))
    plan = _PLANS[shape]
    for i in plan.heads:
        out[i] = x[i]
    for i in plan.settings:
        out[i] = y[i]
    return shape, out.tobytes()


def subtract_packed(a: PackedCounts, b: PackedCounts) -> PackedCounts:
    """`a - b` (Counts.__sub__: b a part of the sum a), packed."""
    shape = a[0]
    if shape < 0 or shape != b[0]:
        return packed_counts(unpack_counts(a[1]) - unpack_counts(b[1]))
    x, y = memoryview(a[1]).cast("d"), memoryview(b[1]).cast("d")
    out = array("d", map(operator.sub, x, y))
    for i in _PLANS[shape].heads + _PLANS[shape].settings:
        out[i] = x[i]
    return shape, out.tobytes()


def unpack_counts(data: bytes) -> Counts:
    packed = array("d")
    packed.frombytes(data)
    values: list[Any] = [None] * len(_TAKES)
    at = 0
    for take, index in _TAKES:
        values[index], at = take(packed, at)
    return Counts(*values)


# ---------------------------------------------------------------- per kind: put and take

Put = Callable[[Any], Sequence[float]]
#: Reads one field at an offset: (its value, the offset of the next field).
Take = Callable[["array[float]", int], tuple[Any, int]]


def _put_number(value: float) -> tuple[float]:
    return (value,)


def _put_optional(value: float | None) -> tuple[float]:
    return (_NAN if value is None else value,)


def _bound_list_ref(bounds: tuple[float, ...]) -> int | tuple[float, ...]:
    """The number of a bound list in the table, or the bounds themselves once it is full."""
    number = _BOUND_NUMBERS.get(bounds)
    if number is None and len(_BOUND_LISTS) < MAX_BOUND_LISTS:
        number = _BOUND_NUMBERS[bounds] = len(_BOUND_LISTS)
        _BOUND_LISTS.append(bounds)
    return bounds if number is None else number


def _bound_list(ref: int | tuple[float, ...]) -> tuple[float, ...]:
    return _BOUND_LISTS[ref] if isinstance(ref, int) else ref


def _put_histogram(value: Histogram | None) -> Sequence[float]:
    """Sum, count, the number of buckets, the number of the bound list (-1: the bounds
    follow), then each bucket's count."""
    if value is None:
        return (_NAN, _NAN, 0.0)
    return (*_histogram_head(value), *value.bucket_counts())


def _histogram_head(value: Histogram) -> tuple[float, ...]:
    """What precedes a histogram's bucket counts: sum, count, the number of buckets, the
    number of the bound list (-1: the bounds follow, and do)."""
    head = (value.sum, value.count, float(len(value.bounds)))
    ref = _bound_list_ref(value.bounds)
    if isinstance(ref, tuple):
        return (*head, -1.0, *ref)
    return (*head, float(ref))


def _put_positions(value: tuple[float, ...]) -> tuple[float, ...]:
    return value


def _take_number(packed: array[float], at: int) -> tuple[float, int]:
    return packed[at], at + 1


def _take_optional(packed: array[float], at: int) -> tuple[float | None, int]:
    value = packed[at]
    return (None if math.isnan(value) else value), at + 1


def _take_histogram(packed: array[float], at: int) -> tuple[Histogram | None, int]:
    if math.isnan(packed[at]):
        return None, at + 3
    n, number, start = int(packed[at + 2]), int(packed[at + 3]), at + 4
    if number < 0:
        bounds, start = tuple(packed[start : start + n]), start + n
    else:
        bounds = _BOUND_LISTS[number]
    counts = packed[start : start + n].tobytes()
    return Histogram.of(packed[at], packed[at + 1], bounds, counts), start + n


def _take_positions(packed: array[float], at: int) -> tuple[tuple[float, ...], int]:
    return tuple(packed[at:]), len(packed)


#: (put, take, last: takes all that is left) of each kind.
_LAYOUT: dict[SpanKind, tuple[Put, Take, bool]] = {
    "plain": (_put_number, _take_number, False),
    "speculation": (_put_optional, _take_optional, False),
    "histogram": (_put_histogram, _take_histogram, False),
    "per_position": (_put_positions, _take_positions, True),
    "setting": (_put_optional, _take_optional, False),
}


def _layout() -> tuple[list[str], list[Put], list[tuple[Take, int]], list[SpanKind]]:
    """The fields in layout order with their puts and their (take, index among Counts'
    fields): the per-position counter, which takes all that is left, last."""
    fields: list[tuple[str, SpanKind]] = [(c.name, c.kind) for c in COUNTERS]
    fields.extend(GAUGES)
    tail = [(name, kind) for name, kind in fields if _LAYOUT[kind][2]]
    assert len(tail) <= 1, "the packed layout has room for one per-position counter"
    in_layout = [(name, kind) for name, kind in fields if not _LAYOUT[kind][2]] + tail
    index = {name: i for i, (name, _) in enumerate(fields)}
    puts = [_LAYOUT[kind][0] for _, kind in in_layout]
    takes = [(_LAYOUT[kind][1], index[name]) for name, kind in in_layout]
    return [name for name, _ in in_layout], puts, takes, [kind for _, kind in in_layout]


_ORDER, _PUTS, _TAKES, _KINDS = _layout()
_in_layout_order = attrgetter(*_ORDER)
