"""The cursor's codec: an engine sample as the JSON text the `cursors` table and the spool
keep, and back. Histogram and per-position fields are read as the declared counters say."""

from __future__ import annotations

import json
from dataclasses import asdict

from spectax.engines.base import COUNTERS, EngineSample, Histogram, ModelSample

_HISTOGRAMS = tuple(c.name for c in COUNTERS if c.kind == "histogram")
_PER_POSITION = tuple(c.name for c in COUNTERS if c.kind == "per_position")


def encode_sample(sample: EngineSample) -> str:
    data = asdict(sample)
    for name, model in sample.models.items():
        for key in _HISTOGRAMS:
            if (h := getattr(model, key)) is not None:  # as before histograms were packed
                data["models"][name][key] = {"sum": h.sum, "count": h.count, "buckets": h.buckets}
    return json.dumps(data)


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
