"""Coverage-guided fuzzing of the vLLM parser with atheris, seeded with the recorded pages.

    python tests/fuzz_vllm_atheris.py -max_total_time=60     # by hand, as long as you like
    (tests/test_hostile.py runs it for a few seconds when atheris is installed)

Only `ParseError` may come out of `parse`; anything else is a crash that atheris reports,
with the input saved as crash-*. libFuzzer's -timeout flags an input that takes too long.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from spectax.engines.base import ParseError
    from spectax.engines.vllm import parse

SEEDS = sorted((Path(__file__).parent / "fixtures" / "vllm-0.32.0").glob("*.txt"))


def one_input(data: bytes) -> None:
    with contextlib.suppress(ParseError):
        parse(data)


def main() -> None:
    corpus = Path(sys.argv[1]) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else None
    if corpus is not None:
        corpus.mkdir(parents=True, exist_ok=True)
        for seed in SEEDS:
            (corpus / seed.name).write_bytes(seed.read_bytes())
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
