"""Benchmark: spectax's engine parsers vs prometheus_client's text parser.

For every fixture page of every engine (vLLM's and llama.cpp's recorded ones; SGLang,
TensorRT-LLM and TGI's written from their source), time the engine's `parse` against
`prometheus_client.parser.text_string_to_metric_families` plus the summing needed to get
the same numbers (tests/reference_parsers.py: the references the differential tests hold
each parser to), check that both give the same `EngineSample`, and print a table.

    PYTHONPATH=exporter python bench/parse.py [--repeat 7] [--min-time 0.2]

Each timing is the best of `--repeat` rounds; a round runs the parser enough
times to last about `--min-time` seconds (timeit's auto-range) and reports the
mean per call, in CPU time of this process: on a machine others load, the time spent
waiting for a core is not the parser's, and it made the wall-clock ratios of one page
swing from 40x to 80x between two runs. The overall ratio is total reference time over total spectax
time across all pages (each page once).

The floor column is what building the page's result alone costs, read from nothing: its
`EngineSample` and `ModelSample`s made again from the parsed values (the histograms and
tuples reused, so it is below what any parser pays). prom_client's time over it is the
best ratio a parser giving that result could reach in this interpreter: on a small page
(TGI's start page, 182 bytes) it is below the issue's 50x before a byte is read.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import platform
import sys
import time
import timeit
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from spectax.engines import llamacpp, sglang, tgi, trtllm, vllm
from spectax.engines.base import EngineSample, ModelSample

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))  # the references the differential tests hold the parsers to
from reference_parsers import REFERENCES  # noqa: E402


def best_seconds(fn: Callable[[], Any], repeat: int, min_time: float) -> float:
    """Best-of-`repeat` mean seconds per call, each round lasting about `min_time`."""
    timer = timeit.Timer(fn, timer=time.process_time)
    number, elapsed = 1, timer.timeit(1)
    while elapsed < min_time:  # like timeit's autorange, with a configurable duration
        number = max(number * 2, math.ceil(number * min_time / max(elapsed, 1e-9)))
        elapsed = timer.timeit(number)
    return min(timer.repeat(repeat=repeat, number=number)) / number


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--repeat", type=int, default=7, help="rounds per measurement (best kept)")
    ap.add_argument("--min-time", type=float, default=0.2, help="seconds per round")
    args = ap.parse_args(argv)

    print(f"machine: {platform.platform()}; {cpu_model()}")
    print(f"python:  {platform.python_implementation()} {sys.version.split()[0]}")
    print(f"timing:  best of {args.repeat} rounds of ~{args.min_time}s each, CPU time per call")
    mismatches = 0
    for name, directory, ours, ref in engine_sets():
        mismatches += bench_engine(name, directory, ours, ref, args.repeat, args.min_time)
    if mismatches:
        print(f"\n{mismatches} page(s) where the numbers disagree", file=sys.stderr)
        return 1
    print("\nall pages: same numbers from both parsers")
    return 0


Parser = Callable[[str], EngineSample]


def engine_sets() -> list[tuple[str, Path, Parser, Parser]]:
    """(engine, fixture directory, spectax's parser, the prometheus_client reference)."""
    fixtures = TESTS / "fixtures"
    return [
        ("vllm", fixtures / "vllm-0.32.0", vllm.parse, REFERENCES["vllm"]),
        ("sglang", fixtures / "sglang-0.5.23", sglang.parse, REFERENCES["sglang"]),
        ("trtllm", fixtures / "trtllm-050f80d", trtllm.parse, REFERENCES["trtllm"]),
        ("tgi", fixtures / "tgi-3.3.6", tgi.parse, REFERENCES["tgi"]),
        ("llamacpp", fixtures / "llamacpp-11434.0.0", llamacpp.parse, REFERENCES["llamacpp"]),
    ]


def bench_engine(
    name: str, directory: Path, ours_parse: Parser, ref_parse: Parser, repeat: int, min_time: float
) -> int:
    """Print one engine's table; the number of pages where the two parsers disagree."""
    pages = sorted(
        p for p in directory.glob("*.txt") if p.name != "INDEX.txt" and "headers" not in p.name
    )
    header = (
        f"{'page':42} {'bytes':>7} {'spectax µs':>11} {'prom_client µs':>15} {'ratio':>7}"
        f" {'floor µs':>9} {'at floor':>9}"
    )
    print(f"\n{name} ({directory.name})")
    print(header)
    print("-" * len(header))
    total_ours = total_ref = 0.0
    mismatches = 0
    for path in pages:
        text = path.read_text(encoding="utf-8")
        ok = ours_parse(text) == ref_parse(text)
        mismatches += not ok
        ours = best_seconds(partial(ours_parse, text), repeat, min_time)
        ref = best_seconds(partial(ref_parse, text), repeat, min_time)
        floor = best_seconds(partial(made_again, *parts_of(ours_parse(text))), repeat, min_time)
        total_ours += ours
        total_ref += ref
        flag = "" if ok else "  MISMATCH"
        print(
            f"{path.name:42} {len(text.encode()):7d} {ours * 1e6:11.1f} {ref * 1e6:15.1f}"
            f" {ref / ours:6.0f}x {floor * 1e6:9.2f} {ref / floor:8.0f}x{flag}"
        )
    print("-" * len(header))
    print(
        f"{'all pages (sum of per-page times)':42} {'':7} {total_ours * 1e6:11.1f}"
        f" {total_ref * 1e6:15.1f} {total_ref / total_ours:6.0f}x"
    )
    return mismatches


def parts_of(sample: EngineSample) -> tuple[str, list[tuple[str, dict[str, Any]]], Any]:
    """A sample's values, its models' as keyword arguments: what `made_again` builds from."""
    models = [
        (name, {f.name: getattr(model, f.name) for f in dataclasses.fields(model)})
        for name, model in sample.models.items()
    ]
    return sample.engine, models, sample.process_start_time_seconds


def made_again(engine: str, models: list[tuple[str, dict[str, Any]]], start: Any) -> EngineSample:
    """The result of a parse built again from its values: the floor under any parser."""
    return EngineSample(
        engine=engine,
        models={name: ModelSample(**values) for name, values in models},
        process_start_time_seconds=start,
    )


if __name__ == "__main__":
    sys.exit(main())
