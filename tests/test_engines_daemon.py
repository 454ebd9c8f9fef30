"""The daemon's side of SGLang, TensorRT-LLM and TGI endpoints: what `/metrics` exports
and the status page shows for a figure an engine does not expose (nothing, and "not
exposed by <engine>"; never a 0 that looks real), and TensorRT-LLM's measured draft
overhead in place of the configured c."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from builders import monitors_of
from engine_pages import pages
from spectax.config import validate
from spectax.endpoint import EndpointMonitor
from spectax.engines import ENGINES
from spectax.exposition import SnapshotCollector, StoreStatus
from spectax.pipeline.intervals import interval_between
from spectax.pipeline.windows import sum_intervals
from spectax.status import StatusHistory, render_status_page
from status_cards import cards

SETS = {"sglang": "sglang-0.5.23", "trtllm": "trtllm-050f80d", "tgi": "tgi-3.3.6"}
MODEL = {"sglang": "tiny-llama", "trtllm": "tiny-llama", "tgi": "tgi"}


def fed() -> dict[str, EndpointMonitor]:
    """One endpoint per engine, each fed its start page then its traffic page (twice: the
    window closes), 60 s apart; speculation configured as eagle (c 0.05 by default)."""
    settings = validate(
        {
            "window": "5m",
            "endpoints": [
                {
                    "name": engine,
                    "url": f"http://h:{i}",
                    "engine": engine,
                    "price": {"usd_per_hour": 4},
                    "speculation": {"method": "eagle"},
                }
                for i, engine in enumerate(SETS, 1)
            ],
        }
    )
    monitors = monitors_of(settings)
    for engine, directory in SETS.items():
        texts = pages(directory)
        for at, name in ((0.0, "spec_0_start.txt"), (60.0, "spec_1_after.txt")):
            monitors[engine].observe_page(at, texts[name], 0.01)
    return monitors


def test_metrics_export_nothing_for_what_an_engine_does_not_expose() -> None:
    monitors = fed()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        SnapshotCollector(
            lambda: {n: m.snapshot for n, m in monitors.items()}, lambda: StoreStatus(0, 0)
        )
    )

    def get(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    for engine in SETS:
        labels = {"endpoint": engine, "model": MODEL[engine]}
        assert get("spectax_acceptance_length_tokens", **labels) == pytest.approx(1 + 1120 / 760)
        info = [
            s.labels
            for m in registry.collect()
            if m.name == "spectax_endpoint_info"
            for s in m.samples
            if s.labels["endpoint"] == engine
        ]
        assert [i["engine"] for i in info] == [engine]
    for engine in ("sglang", "tgi"):  # no drafted count: no ratio, no modelled speedup
        labels = {"endpoint": engine, "model": MODEL[engine]}
        assert get("spectax_acceptance_ratio", **labels) is None
        assert get("spectax_speedup_ratio", method="modeled", **labels) is None
        assert get("spectax_draft_tokens_total", **labels) is None
        assert get("spectax_accepted_tokens_total", **labels) == 1120
    trt = {"endpoint": "trtllm", "model": "tiny-llama"}
    assert get("spectax_acceptance_ratio", **trt) == pytest.approx(1120 / 2280)
    assert get("spectax_draft_tokens_total", **trt) == 2280


def test_tensorrt_llm_s_measured_draft_overhead_replaces_the_configured_c() -> None:
    """d 0.18 at 3 draft tokens a draft: c = 0.18 / (0.82 * 3), not eagle's configured 0.05;
    an engine that does not time its drafter keeps the configured c."""
    monitors = fed()
    for engine, c in (("trtllm", 0.18 / (0.82 * 3)), ("sglang", 0.05)):
        texts = pages(SETS[engine])
        parse = ENGINES[engine].parse
        before, after = parse(texts["spec_0_start.txt"]), parse(texts["spec_1_after.txt"])
        window = sum_intervals([interval_between(before, after, 0.0, 60.0)])
        assert monitors[engine].parameters(window).draft_cost_ratio == pytest.approx(c)
    assert monitors["trtllm"].parameters(None).draft_cost_ratio == pytest.approx(0.05)


def test_the_status_page_says_what_the_engine_does_not_count() -> None:
    monitors = fed()
    html = render_status_page(
        {n: m.snapshot for n, m in monitors.items()}, StatusHistory(step_seconds=60.0), 120.0
    )
    shown = cards(html)
    for engine in ("sglang", "tgi"):
        said = f"— ({engine} does not count drafted tokens; 2.47 tokens a step, derived)"
        assert said in shown[engine]
        assert f"estimated — ({engine} does not count drafted tokens)" in shown[engine]
    assert "does not count" not in shown["trtllm"]
    assert "0.491 of drafted tokens accepted; it pays above" in shown["trtllm"]
