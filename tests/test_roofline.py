"""The roofline prior for B*: vLLM's FLOP and byte estimates (--enable-mfu-metrics) against
the GPU's datasheet peaks, used when nothing measured B* (ECONOMICS.md §3b)."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import pytest

from builders import queued
from recorded_pages import page
from spectax.config import validate
from spectax.economics import PlainCurve, Profile, roofline_ridge_batch
from spectax.endpoint import EndpointMonitor
from spectax.engines.base import Histogram
from spectax.gpus import gpu_spec, gpu_specs
from spectax.observed import Resume
from spectax.pipeline.counts import Counts
from spectax.pipeline.windows import Window
from spectax.store import Store
from spectax.store.rows import window_from_rows
from spectax.tariffs import pricing_of

DATA = Path(__file__).parent.parent / "exporter" / "spectax" / "data"
MID, AFTER = "spec_ngram_mfu_2_mid.txt", "spec_ngram_mfu_3_after.txt"
# The recorded pages' deltas (tests/fixtures/vllm-0.32.0/INDEX.txt): FLOPs, bytes read,
# and iteration_tokens_total's sum (tokens) and count (steps).
FLOPS = 6.539429888e09 - 3.414134784e09
READ = 1.61592704e09 - 8.79470592e08
TOKENS, STEPS = 5412.0 - 2708.0, 782.0 - 429.0
H100_SXM = (989.4e12, 3.35e12)


def test_the_roofline_ridge_batch_by_hand() -> None:
    """2e9 bytes over 1,000 steps at 2 TB/s: a = 1 us a step; 6e9 FLOPs over 5,000 tokens at
    1 PFLOP/s: b = 1.2 ns a token; B* = a / b = 833.3."""
    assert roofline_ridge_batch(6e9, 2e9, 5000, 1000, 1e15, 2e12) == pytest.approx(1e-6 / 1.2e-9)
    # twice the bandwidth halves the weight-read time, and so B*
    assert roofline_ridge_batch(6e9, 2e9, 5000, 1000, 1e15, 4e12) == pytest.approx(416.667, 1e-5)
    for missing in [(0, 2e9, 5000, 1000), (6e9, 2e9, 5000, 0), (6e9, 0, 5000, 1000)]:
        assert roofline_ridge_batch(*missing, 1e15, 2e12) is None


def test_every_gpu_spec_has_its_datasheet_and_prices_find_them() -> None:
    """The table's names are the price table's: an endpoint priced from a row finds its
    specs. The price table's GPUs without specs are buckets of several GPUs (RunPod) or
    parts without a public datasheet; a new price row must choose."""
    specs = gpu_specs()
    for spec in specs.values():
        assert spec.peak_flops_per_second > 1e13 and spec.memory_bytes_per_second > 1e11
        assert spec.source.startswith("https://") and spec.as_of
    priced = {row["gpu"] for row in csv.DictReader((DATA / "gpu_prices.csv").open())}
    assert {g for g in priced if g.lower() not in specs} == {
        "A10G",  # AWS's variant of the A10: NVIDIA publishes no datasheet
        "H100 80GB (H100 PRO)",  # RunPod: form factor not stated
        "A4000/A4500/RTX4000 16GB",
        "A6000/A40 48GB",
        "L4/A5000/3090 24GB",
        "L40/L40S/6000 Ada 48GB",
    }
    settings = validate(
        {
            "endpoints": [
                {
                    "name": "priced",
                    "url": "http://h:1",
                    "price": {"provider": "runpod", "product": "pods secure", "gpu": "H100 SXM"},
                },
                {
                    "name": "named",
                    "url": "http://h:2",
                    "gpu": "h100 sxm",
                    "price": {"usd_per_hour": 3},
                },
                {"name": "unknown", "url": "http://h:3", "gpu": "A10G"},
            ]
        }
    )
    gpus = {e.name: pricing_of(e, settings.prices).gpu for e in settings.config.endpoints}
    assert gpus == {"priced": gpu_spec("H100 SXM"), "named": gpu_spec("H100 SXM"), "unknown": None}


def monitor(gpu: str | None = "H100 SXM", **kwargs: object) -> EndpointMonitor:
    settings = validate(
        {
            "window": "1m",
            "endpoints": [
                {
                    "name": "e",
                    "url": "http://h:1",
                    "speculation": {"method": "ngram"},
                    **({"gpu": gpu} if gpu else {}),
                }
            ],
        }
    )
    config = settings.config.endpoints[0]
    gpu_found = pricing_of(config, settings.prices).gpu
    return EndpointMonitor(config, None, 60.0, gpu=gpu_found, **kwargs)  # type: ignore[arg-type]


def feed(m: EndpointMonitor) -> list[dict]:
    """The recorded pair as one closed window (0-60 s) and the next scrape: the rows written."""
    m.observe_page(0, page(MID), 0.01)
    m.observe_page(60, page(AFTER), 0.01)
    write = queued(m.observe_page(120, page(AFTER), 0.01))
    assert write is not None
    return [row for row in write.rows if row["output_tokens"]]


def test_an_endpoint_with_the_estimates_and_a_known_gpu_uses_the_roofline() -> None:
    m = monitor()
    (row,) = feed(m)
    expected = (READ / STEPS / H100_SXM[1]) / (FLOPS / TOKENS / H100_SXM[0])
    # 2.09 MB read a step over 1.16 MFLOP a token, times the H100's 295 FLOP per byte
    assert expected == pytest.approx(533.1, rel=1e-3)
    assert (row["ridge_batch_source"], row["verdict_basis"]) == ("roofline", "default")
    assert row["ridge_batch_requests"] == pytest.approx(expected)
    assert (row["estimated_flops"], row["estimated_read_bytes"]) == (FLOPS, READ)
    assert row["speedup_low_ratio"] <= row["speedup_ratio"] <= row["speedup_high_ratio"]
    # a prior, not a measurement: B* within x2 of it, where a configured one is within x4
    assert m.step_model().ridge_batch_range() == pytest.approx((expected / 2, expected * 2))
    configured = monitor(gpu=None)
    assert {r["ridge_batch_source"] for r in feed(configured)} == {"configured"}
    assert configured.step_model().ridge_batch_range() == (8.0, 128.0)
    # the scrape after the window saw no traffic: the last window's prior stays in force
    assert m.snapshot.step_model.source == "roofline"


def test_every_measured_source_wins_over_the_roofline() -> None:
    curve = PlainCurve(0.004, 0.0001, 10, (0.0, 0.0), (1.0, 10.0))
    profile = Profile("p", "control", "endpoint x", 50.0, 0.6)
    plain = [
        Window(
            start=i * 60,
            end=(i + 1) * 60,
            seconds=60,
            busy_seconds=60,
            models={
                "m": Counts(
                    generation_tokens=1000,
                    running_seconds=x * 60,
                    time_per_output_token=Histogram(sum=(0.016 + 0.0005 * x) * 20, count=20),
                )
            },
        )
        for i, x in enumerate([8, 12, 16, 24, 32, 48, 64, 96])
    ]
    for source, kwargs in [
        ("control", {"control_curve": lambda: curve}),
        ("baseline", {"resume": Resume(recent_windows=tuple(plain))}),
        ("profile", {"profile": lambda: profile}),
    ]:
        m = monitor(**kwargs)
        rows = feed(m)
        assert {r["ridge_batch_source"] for r in rows} == {source}
        assert m.step_model().source == source


def test_a_gpu_the_table_does_not_know_leaves_configured_and_is_said_once(caplog) -> None:
    caplog.set_level(logging.INFO, "spectax.monitor")
    m = monitor(gpu="A10G")
    assert {r["ridge_batch_source"] for r in feed(m)} == {"configured"}
    for t in (180, 240, 300):  # more windows, the same estimates: nothing more is said
        m.observe_page(t, page(AFTER), 0.01)
    said = [r.getMessage() for r in caplog.records if "estimates FLOPs" in r.getMessage()]
    assert said == [
        "endpoint e: vLLM estimates FLOPs and bytes, but GPU 'A10G' is not in spectax's GPU "
        "table: B* stays the configured one"
    ]


def test_pages_without_the_estimates_leave_configured_and_say_nothing(caplog) -> None:
    """vLLM without --enable-mfu-metrics exports the families at 0: no prior, no warning."""
    caplog.set_level(logging.INFO, "spectax.monitor")
    m = monitor(gpu="A10G")
    m.observe_page(0, page("spec_ngram_2_mid.txt"), 0.01)
    m.observe_page(30, page("spec_ngram_3_after.txt"), 0.01)
    assert m.step_model().source == "configured"
    assert not [r for r in caplog.records if "estimates FLOPs" in r.getMessage()]


@pytest.fixture
async def store(database_url: str):
    store = await Store.open(database_url)
    yield store
    await store.close()


async def test_estimates_past_a_database_integer_are_stored_and_rolled_up(store) -> None:
    """A day of FLOPs on one GPU passes BIGINT (2**63 = 9.2e18): the columns are floats."""
    m = monitor()
    scaled = {
        name: page(name)
        .replace("3.414134784e+09", "3.414134784e+19")
        .replace("6.539429888e+09", "6.539429888e+19")
        for name in (MID, AFTER)
    }
    m.observe_page(0, scaled[MID], 0.01)
    m.observe_page(60, scaled[AFTER], 0.01)
    write = queued(m.observe_page(120, scaled[AFTER], 0.01))
    assert write is not None
    await store.save(write.endpoint, write.rows, write.cursor)
    (row,) = [r for r in await store.window_rows("e") if r.output_tokens]
    assert row.estimated_flops == pytest.approx(FLOPS * 1e10) and row.estimated_flops > 2**63
    await store.rollup()
    window = window_from_rows([row])  # read back: a restart reads only what the calibration does
    assert window.models["tiny-llama"].estimated_flops == pytest.approx(FLOPS * 1e10)
