"""Latency with against without speculation (spectax.economics.latency), on recorded pages:
the draft-model server against the plain one, both 40 requests of the same traffic."""

from __future__ import annotations

import pytest

from recorded_pages import page
from spectax.economics.latency import Latency, assess_latency, latency_verdict
from spectax.engines.vllm import parse
from spectax.pipeline.counts import Counts, delta
from spectax.pipeline.quantiles import latency_quantiles
from spectax.pipeline.windows import Window


def grown(before: str, after: str) -> Counts:
    a, b = (parse(page(name)).models["tiny-llama"] for name in (before, after))
    return delta(a, b, (1.0,))


DRAFT = grown("spec_draft_0_before_traffic.txt", "spec_draft_3_after.txt")
PLAIN = grown("nospec_0_before_traffic.txt", "nospec_3_after.txt")


def window(models: dict[str, Counts]) -> Window:
    return Window(start=0.0, end=60.0, seconds=60.0, busy_seconds=60.0, models=models)


def test_against_a_control_every_quantile_is_divided_by_the_controls() -> None:
    latency = assess_latency("tiny-llama", DRAFT, True, 2.0, window({"tiny-llama": PLAIN}))
    ours, theirs = latency_quantiles(DRAFT), latency_quantiles(PLAIN)
    assert latency.basis == "measured"
    for metric in ("tpot", "itl", "ttft", "e2e"):
        for label in ("p50", "p95", "p99"):
            expected = ours[metric].by_label()[label] / theirs[metric].by_label()[label]
            assert latency.ratios[(metric, label)] == pytest.approx(expected)
    # The modelled speedup (2.0) is not used when there is a measurement.
    assert latency.ratios[("tpot", "p99")] != pytest.approx(0.5)


def test_a_control_serving_the_model_under_another_name_counts_all_its_models() -> None:
    latency = assess_latency("tiny-llama", DRAFT, True, None, window({"plain-name": PLAIN}))
    same = assess_latency("tiny-llama", DRAFT, True, None, window({"tiny-llama": PLAIN}))
    assert latency.ratios == same.ratios and latency.basis == "measured"


def test_a_control_with_too_few_requests_falls_back_to_the_model() -> None:
    one = grown("spec_ngram_0_before_traffic.txt", "spec_ngram_1_after_first_request.txt")
    assert one.requests_finished < 10
    latency = assess_latency("tiny-llama", DRAFT, True, 1.25, window({"tiny-llama": one}))
    assert latency.basis == "modeled" and set(latency.ratios) == {
        ("tpot", label) for label in ("p50", "p95", "p99")
    }


def test_without_a_control_only_tpot_is_modelled_from_the_mean_speedup() -> None:
    latency = assess_latency("tiny-llama", DRAFT, True, 1.25)
    assert latency.basis == "modeled"
    assert latency.ratios == {
        ("tpot", label): pytest.approx(0.8) for label in ("p50", "p95", "p99")
    }
    said = latency_verdict(latency)
    assert said == (
        "speculation makes p99 TPOT 1.2x better here "
        "(modelled: 1 / the step model's mean speedup, not a measured tail)"
    )


def test_no_speculation_no_ratio_and_no_verdict() -> None:
    latency = assess_latency("tiny-llama", PLAIN, False, None, window({"tiny-llama": PLAIN}))
    assert latency.ratios == {} and latency.basis is None
    assert latency.seconds("tpot", "p99") == latency_quantiles(PLAIN)["tpot"].p99
    assert latency_verdict(latency) == ""


@pytest.mark.parametrize(
    ("ratio", "said"),
    [
        (1.4, "speculation makes p99 TPOT 1.4x worse here (measured against the control)"),
        (1.03, "speculation leaves p99 TPOT unchanged here (measured against the control)"),
        (0.5, "speculation makes p99 TPOT 2.0x better here (measured against the control)"),
    ],
)
def test_the_verdict_in_words(ratio: float, said: str) -> None:
    latency = Latency(latency_quantiles(DRAFT), {("tpot", "p99"): ratio}, "measured")
    assert latency_verdict(latency) == said
