"""Fleet mode's raw read of one series name, without Prometheus: the CPU of decoding it.

In a steady fleet Prometheus sums each counter per endpoint and spectax reads one number
an endpoint (spectax.sources.prometheus); it reads raw samples only of odd series (a
reset, a new replica), of running requests, of a whole name when more than 500 of its
series are odd, and with `PrometheusReader(raw=True)`. This isolates that path's cost:
one name's raw answer for N series (labels as a vLLM replica scraped by Kubernetes has
them, --samples a series: 41 for a 5-minute window and lookback at 15 s scrapes), fed
through the reader's decoder and window sums in 64 KiB chunks, as it arrives.

    PYTHONPATH=exporter python bench/fleet_decode.py [--series 20000] [--samples 41]
        [--running]

--running reads running requests instead of a counter: the one name fleet mode reads raw
for the whole fleet at every window (a gauge: its trapezoids, not its growth).

It prints numbers, never fails on them. --profile prints cProfile's top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import time

from spectax.source_config import PrometheusSource
from spectax.sources.matrix import MatrixDecoder
from spectax.sources.prometheus import WindowSums
from spectax.sources.promql import RUNNING

COUNTER = "vllm:generation_tokens_total"
T0 = 1_800_000_000
CHUNK = 1 << 16


def labels(replica: int) -> dict[str, str]:
    return {
        "engine": "0",
        "instance": f"10.0.{replica // 250}.{replica % 250}:8000",
        "job": "vllm",
        "model_name": "meta-llama/Llama-3.1-8B-Instruct",
        "namespace": f"ns-{replica // 10:05d}",
        "pod": f"pod-{replica:05d}",
    }


def answer(name: str, series: int, samples: int) -> bytes:
    """The name's raw samples over the window and its lookback, as Prometheus sends them:
    a counter growing, or running requests coming and going."""
    matrix = []
    for r in range(series):
        named = json.dumps({"__name__": name, **labels(r)}, separators=(",", ":"))
        values = ",".join(
            f'[{T0 + 15 * i},"{(r + 7 * i) % 13 if name == RUNNING else 100000 + r + 37 * i}"]'
            for i in range(samples)
        )
        matrix.append(f'{{"metric":{named},"values":[{values}]}}')
    head = '{"status":"success","data":{"resultType":"matrix","result":['
    return (head + ",".join(matrix) + "]}}").encode()


def read(source: PrometheusSource, name: str, matrix: bytes, bounds: list[float]) -> int:
    """The reader's work on one name's raw answer; returns the endpoints found."""
    sums = WindowSums(source, bounds)
    decoder = MatrixDecoder()
    for at in range(0, len(matrix), CHUNK):
        for found, stamps, texts in decoder.feed(matrix[at : at + CHUNK]):
            sums.add(name, found, stamps, texts)
    decoder.finish()
    return len(sums.intervals()[bounds[-1]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--series", type=int, default=20000)
    parser.add_argument("--samples", type=int, default=41, help="a series: window and lookback")
    parser.add_argument("--running", action="store_true", help="running requests (a gauge)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    name = RUNNING if args.running else COUNTER
    source = PrometheusSource(url="http://prometheus:9090", endpoint_labels=["namespace"])
    matrix = answer(name, args.series, args.samples)
    end = float(T0 + 15 * (args.samples - 1))
    bounds = [end - 15 * (args.samples // 2), end]  # half the samples are the lookback
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        endpoints = read(source, name, matrix, bounds)
        best = min(best, time.process_time() - started)
    print(
        f"{name}: {args.series} series, {args.samples} samples each ({len(matrix) / 1e6:.1f} MB of "
        f"JSON), {endpoints} endpoints: {best:.3f} s of CPU "
        f"(best of 3), {best / args.series * 1e6:.1f} us a series"
    )
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(read, source, name, matrix, bounds)
        pstats.Stats(profile).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
