"""The cursor's codec: an engine sample as the JSON text the `cursors` table and the spool
keep, and back. Histogram and per-position fields are read as the declared counters say."""

from __future__ import annotations

import dataclasses
import json
import math

from spectax.engines.base import COUNTERS, EngineSample, Histogram, ModelSample, PerBoundList

_HISTOGRAMS = tuple(c.name for c in COUNTERS if c.kind == "histogram")
_PER_POSITION = tuple(c.name for c in COUNTERS if c.kind == "per_position")
_MODEL_FIELDS = tuple((f.name, f.name in _HISTOGRAMS) for f in dataclasses.fields(ModelSample))


def encode_sample(sample: EngineSample) -> str:
    """The sample as JSON: its fields in declared order, a histogram as its sum, count and
    (bound, count) pairs, as before histograms were packed, byte for byte what
    `json.dumps` made of `dataclasses.asdict` (tested on every recorded page of every
    engine). Written here field by field: the cursor is written at every scrape, asdict was
    ~4 % of the daemon's CPU at 2,000 endpoints, and json.dumps of the fields ~6 % (most of
    it the ~200 numbers of the buckets, whose bounds are now one template per bound list)."""
    models = ", ".join(
        f"{json.dumps(name)}: {_model_text(model)}" for name, model in sample.models.items()
    )
    return (
        f'{{"engine": {json.dumps(sample.engine)}, "models": {{{models}}}, '
        f'"process_start_time_seconds": {_json(sample.process_start_time_seconds)}}}'
    )


def _model_text(model: ModelSample) -> str:
    parts = []
    for key, histogram in _MODEL_FIELDS:
        value = getattr(model, key)
        if histogram and value is not None:
            parts.append(f'"{key}": {_histogram_text(value)}')
        else:
            parts.append(f'"{key}": {_json(value)}')
    return ", ".join(parts).join("{}")


def _histogram_text(histogram: Histogram) -> str:
    counts = histogram.bucket_counts()
    # all finite (their sum is): each its repr, as the C encoder writes it
    texts = map(float.__repr__ if math.isfinite(sum(counts)) else _json, counts)
    buckets = _pairs_template(histogram.bounds) % tuple(texts)
    total, count = _json(histogram.sum), _json(histogram.count)
    return f'{{"sum": {total}, "count": {count}, "buckets": {buckets}}}'


#: A bound list's JSON pairs with a %s per count.
_pairs_template = PerBoundList(
    lambda bounds: ", ".join(f"[{json.dumps(le)}, %s]" for le in bounds).join("[]")
)


def _json(value: object) -> str:
    """A field's value as json.dumps writes it: a finite float is its repr, as in the C
    encoder; anything else (infinities, NaN, None, tuples) is left to json.dumps."""
    if type(value) is float and math.isfinite(value):
        return float.__repr__(value)
    return json.dumps(value)


def decode_sample(text: str) -> EngineSample:
    data = json.loads(text)
    models = {}
    for name, fields in data["models"].items():
        for key in _HISTOGRAMS:
            if fields.get(key) is not None:
                h = fields[key]
                buckets = tuple((float(le), float(n)) for le, n in h.get("buckets", ()))
                fields[key] = Histogram(h["sum"], h["count"], buckets)
        for key in _PER_POSITION:
            fields[key] = tuple(fields.get(key, ()))
        models[name] = ModelSample(**fields)
    return EngineSample(
        engine=data["engine"],
        models=models,
        process_start_time_seconds=data.get("process_start_time_seconds"),
    )
