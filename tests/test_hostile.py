"""Hostile targets and pages: size caps, model caps, trickling bodies, fuzzed pages; and logs.

End to end through a real `spectax run --log-format json`: a page over max_body_bytes, a
page with one model more than the parser's cap (and one at the cap), a target that
trickles bytes, and one that fails then recovers (logged once each way, in JSON). Then the
parser alone: hypothesis mutates the recorded vLLM pages (no exception but ParseError, and
a bound on the time per input), and atheris, when installed, fuzzes it for a few seconds.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e2e import Spectax, free_port, value, write_config
from ops_helpers import Targets
from spectax.engines.base import EngineSample, ParseError
from spectax.engines.vllm import MAX_MODELS, parse
from spectax.scrape import ScrapeError, fetch, scrape_session

FIXTURES = sorted((Path(__file__).parent / "fixtures" / "vllm-0.32.0").glob("*.txt"))
PAGES = [p.read_text() for p in FIXTURES if p.name != "INDEX.txt"]
CAP = 200_000  # max_body_bytes in the e2e test; the recorded pages are ~55 kB


def models_page(count: int) -> str:
    return "".join(f'vllm:generation_tokens_total{{model_name="m{i}"}} {i}\n' for i in range(count))


async def trickle(request: web.Request) -> web.StreamResponse:
    """A valid start, then one byte every 0.1 s: never done within a scrape timeout."""
    response = web.StreamResponse()
    await response.prepare(request)
    await response.write(b"# HELP trickle\n")
    for _ in range(50):
        await asyncio.sleep(0.1)
        await response.write(b"#")
    return response


@pytest.mark.e2e
async def test_hostile_targets_end_to_end_with_json_logs(tmp_path: Path) -> None:
    targets = Targets()
    failing = {"on": True}
    big = ("# " + "x" * 1000 + "\n") * (CAP // 1000 + 10)

    async def flaky(request: web.Request) -> web.Response:
        if failing["on"]:
            return web.Response(status=503, text="busy")
        return web.Response(text=PAGES[0])

    async def serve(text: str) -> web.Response:
        return web.Response(text=text)

    targets.add("big", lambda r: serve(big))
    targets.add("many", lambda r: serve(models_page(MAX_MODELS + 1)))
    targets.add("most", lambda r: serve(models_page(MAX_MODELS)))
    targets.add("trickle", trickle)
    targets.add("flaky", flaky)
    await targets.start()
    port = free_port()
    names = ("big", "many", "most", "trickle", "flaky")
    config = write_config(
        tmp_path,
        port,
        [{"name": n, "url": targets.url(n)} for n in names],
        max_body_bytes=CAP,
    )
    spectax = Spectax(config, port, global_args=("--log-format", "json"))
    await spectax.start()
    try:

        def failed(m: dict, endpoint: str, reason: str) -> bool:
            return bool(value(m, "spectax_scrape_failures_total", endpoint=endpoint, reason=reason))

        m = await spectax.wait_for(
            lambda m: (
                failed(m, "big", "too_large")
                and failed(m, "many", "parse")
                and failed(m, "trickle", "timeout")
                and value(m, "spectax_endpoint_up", endpoint="most") == 1
                and (
                    value(
                        m, "spectax_scrape_failures_total", endpoint="flaky", reason="http_status"
                    )
                    or 0
                )
                >= 3
            )
        )
        assert value(m, "spectax_endpoint_up", endpoint="big") == 0
        assert value(m, "spectax_endpoint_up", endpoint="many") == 0
        # A trickling target cannot hold a scrape past its timeout (1 s).
        assert value(m, "spectax_scrape_duration_seconds", endpoint="trickle") < 1.5
        failing["on"] = False
        await spectax.wait_for(lambda m: value(m, "spectax_endpoint_up", endpoint="flaky") == 1)
        failing["on"] = True
        await spectax.wait_for(lambda m: value(m, "spectax_endpoint_up", endpoint="flaky") == 0)
    finally:
        assert await spectax.stop() == 0
        await targets.stop()

    entries = [json.loads(line) for line in spectax.log.splitlines() if line.strip()]
    assert entries, "no log"
    for entry in entries:
        assert {"time", "level", "logger", "message"} <= set(entry)
    flaky_lines = [e for e in entries if e.get("endpoint") == "flaky"]
    failures = [e for e in flaky_lines if "scrape failed" in e["message"]]
    recoveries = [e for e in flaky_lines if "scraping again" in e["message"]]
    # Failed 3+ times, recovered, failed again: two failure lines and one recovery, no more.
    assert len(failures) == 2 and len(recoveries) == 1, flaky_lines
    assert failures[0]["level"] == "warning" and recoveries[0]["level"] == "info"
    for name in ("big", "many", "trickle"):
        lines = [
            e for e in entries if e.get("endpoint") == name and "scrape failed" in e["message"]
        ]
        assert len(lines) == 1, lines
    assert "too many models" in next(e["message"] for e in entries if e.get("endpoint") == "many")


async def test_fetch_bounds_a_trickling_body() -> None:
    targets = Targets()
    targets.add("t", trickle)
    await targets.start()
    try:
        async with aiohttp.ClientSession() as session:
            began = time.monotonic()
            with pytest.raises(ScrapeError) as error:
                await fetch(session, targets.url("t"), 0.5, 1_000_000)
            assert error.value.reason == "timeout"
            assert time.monotonic() - began < 0.9
    finally:
        await targets.stop()


async def test_a_scrape_leaves_no_connection_open_to_its_target() -> None:
    """A target that would keep the connection alive for minutes still sees it closed once
    its page is read: the daemon holds no idle connection per target between scrapes."""
    targets = Targets()
    transports: list[asyncio.BaseTransport] = []

    async def serve(request: web.Request) -> web.Response:
        assert request.transport is not None
        transports.append(request.transport)
        return web.Response(text=PAGES[0])

    targets.add("t", serve)
    await targets.start()  # aiohttp's server keeps an idle connection for 75 s
    try:
        async with scrape_session() as session:
            for _ in range(2):
                assert await fetch(session, targets.url("t"), 5.0, 1_000_000) == PAGES[0]
                for _ in range(50):
                    if transports[-1].is_closing():
                        break
                    await asyncio.sleep(0.02)
                assert transports[-1].is_closing(), "the scrape's connection is still open"
        assert len(transports) == 2 and transports[0] is not transports[1]
    finally:
        await targets.stop()


def test_model_cap_is_exact() -> None:
    assert len(parse(models_page(MAX_MODELS)).models) == MAX_MODELS
    with pytest.raises(ParseError, match="too many models"):
        parse(models_page(MAX_MODELS + 1))


# ------------------------------------------------------------------ fuzzing the parser

NOISE = st.sampled_from(
    [
        "{",
        "}",
        '"',
        "\\",
        "\n",
        " ",
        "\t",
        "=",
        ",",
        "NaN",
        "+Inf",
        "-1",
        "1e400",
        "_",
        'model_name="',
        "vllm:generation_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{",
        'position="9999"',
        "\x00",
        "\u00e9",
        "\ud7ff",
        "#",
        "a" * 5000,
        "{" * 1000,
        '\\"' * 500,
    ]
)


@st.composite
def mutated_pages(draw: st.DrawFn) -> str | bytes:
    text = draw(st.sampled_from(PAGES))
    rng = random.Random(draw(st.integers(0, 2**32)))
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["insert", "delete", "swap", "dup", "flip", "truncate"]))
        at = rng.randrange(len(text) + 1)
        if kind == "insert":
            text = text[:at] + draw(NOISE) + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + rng.randrange(1, 200) :]
        elif kind == "swap":  # change one character of a relevant line
            line_at = text.find("vllm:", at)
            if line_at >= 0:
                pos = line_at + rng.randrange(0, 80)
                text = text[:pos] + draw(NOISE) + text[pos + 1 :]
        elif kind == "dup":
            end = text.find("\n", at)
            text = text[:at] + text[at : end + 1] * rng.randrange(2, 5) + text[end + 1 :]
        elif kind == "truncate":
            text = text[:at]
    if draw(st.booleans()):
        raw = bytearray(text.encode())
        for _ in range(draw(st.integers(0, 4))):
            if raw:
                raw[rng.randrange(len(raw))] = rng.randrange(256)
        return bytes(raw)
    return text


@settings(
    max_examples=600,
    deadline=1000,  # ms per input: a hang (catastrophic regex backtracking) fails the test
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)
@given(page=mutated_pages())
def test_mutated_real_pages_parse_or_fail_clearly(page: str | bytes) -> None:
    began = time.perf_counter()
    try:
        sample = parse(page)
    except ParseError as exc:
        assert str(exc)  # a clear message, naming the line where there is one
    else:
        assert isinstance(sample, EngineSample)
        assert len(sample.models) <= MAX_MODELS
    assert time.perf_counter() - began < 1.0


def test_pathological_lines_stay_linear() -> None:
    """Inputs built to make a backtracking regex explode, at 1 MB each."""
    for page in (
        "vllm:generation_tokens_total{" + 'a="' + "\\\\" * 300_000,
        "vllm:generation_tokens_total{" + 'a="b",' * 150_000,
        "vllm:generation_tokens_total" + " " * 1_000_000 + "x",
        "\nvllm:generation_tokens_total{" * 40_000,
    ):
        began = time.perf_counter()
        with pytest.raises(ParseError):
            parse(page)
        assert time.perf_counter() - began < 2.0


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris not installed")
@pytest.mark.e2e
def test_atheris_finds_no_crash(tmp_path: Path) -> None:
    seconds = int(os.environ.get("SPECTAX_ATHERIS_SECONDS", "5"))
    result = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).parent / "fuzz_vllm_atheris.py"),
            str(tmp_path / "corpus"),
            f"-max_total_time={seconds}",
            "-timeout=2",
            "-rss_limit_mb=1024",
            f"-artifact_prefix={tmp_path}/",
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Done" in result.stderr, result.stderr[-3000:]


@settings(
    max_examples=300,
    deadline=3000,  # ms for three reads of one input
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)
@given(page=mutated_pages())
def test_a_mutated_page_served_again_and_again_reads_the_same_every_time(
    page: str | bytes,
) -> None:
    """A target serves the same page at every scrape, a broken one too: from its second
    sighting the parser reads it through the layout it learnt (engines/vllm.py), which must
    give what the first read gave, the same sample or the same error, never another."""
    outcomes = []
    for _ in range(3):
        try:
            outcomes.append(parse(page))
        except ParseError as exc:
            outcomes.append(str(exc))
    assert outcomes[1] == outcomes[0]
    assert outcomes[2] == outcomes[0]
