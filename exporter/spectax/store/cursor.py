"""The cursor's codec: an engine sample as the JSON text the `cursors` table and the spool
keep, and back. Histogram and per-position fields are read as the declared counters say."""

from __future__ import annotations

import dataclasses
import json

from spectax.engines.base import COUNTERS, EngineSample, Histogram, ModelSample

_HISTOGRAMS = tuple(c.name for c in COUNTERS if c.kind == "histogram")
_PER_POSITION = tuple(c.name for c in COUNTERS if c.kind == "per_position")
_MODEL_FIELDS = tuple((f.name, f.name in _HISTOGRAMS) for f in dataclasses.fields(ModelSample))


def encode_sample(sample: EngineSample) -> str:
    """The sample as JSON: its fields in declared order, a histogram as its sum, count and
    (bound, count) pairs, as before histograms were packed. Written field by field, not by
    `dataclasses.asdict`, which copied every value deeply: the cursor is written at every
    scrape, and asdict was ~4% of the daemon's CPU at 2,000 endpoints (bench/README.md)."""
    models = {}
    for name, model in sample.models.items():
        encoded = {}
        for key, histogram in _MODEL_FIELDS:
            value = getattr(model, key)
            if histogram and value is not None:
                value = {"sum": value.sum, "count": value.count, "buckets": value.buckets}
            encoded[key] = value
        models[name] = encoded
    return json.dumps(
        {
            "engine": sample.engine,
            "models": models,
            "process_start_time_seconds": sample.process_start_time_seconds,
        }
    )


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
