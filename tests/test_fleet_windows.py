"""Raw Prometheus samples to window intervals (spectax.sources.prometheus), on the cases
the live test cannot time: where a sample on a boundary goes, a reset between two
samples, a series with no sample before the window, a value Prometheus should not hold."""

from __future__ import annotations

from typing import Any

from spectax.sources.config import PrometheusSource
from spectax.sources.prometheus import SERIES, window_intervals

SOURCE = PrometheusSource(url="http://prometheus:9090", endpoint_labels=["model_name"])
GEN = SERIES["generation_tokens"]


def series(pod: str, *samples: tuple[float, float], model: str = "m") -> dict[str, Any]:
    return {
        "metric": {"__name__": GEN, "model_name": model, "pod": pod},
        "values": [[t, str(v)] for t, v in samples],
    }


def tokens(result: list[dict[str, Any]], bounds: list[float]) -> list[float | None]:
    windows = window_intervals(SOURCE, {GEN: result}, bounds)
    out: list[float | None] = []
    for end in bounds[1:]:
        interval = windows[end].get("m")
        out.append(interval.models["m"].generation_tokens if interval else None)
    return out


def test_a_sample_on_a_boundary_belongs_to_the_window_it_ends() -> None:
    result = [series("a", (95, 10), (100, 15), (105, 21), (110, 30))]
    assert tokens(result, [90, 100, 110]) == [5, 15]


def test_a_reset_counts_the_new_value_and_marks_a_restart() -> None:
    result = [series("a", (100, 50), (103, 60), (106, 4), (109, 9))]
    windows = window_intervals(SOURCE, {GEN: result}, [100, 110])
    interval = windows[110]["m"]
    assert interval.models["m"].generation_tokens == 10 + 4 + 5
    assert interval.restarted


def test_replicas_are_summed_after_their_own_deltas_so_one_leaving_is_no_reset() -> None:
    gone = series("b", (95, 1000), (102, 1010))  # its pod deleted at 103
    stays = series("a", (95, 10), (102, 12), (108, 20))
    windows = window_intervals(SOURCE, {GEN: [gone, stays]}, [100, 110, 120])
    assert windows[110]["m"].models["m"].generation_tokens == 10 + 10
    assert not windows[110]["m"].restarted
    assert windows[120] == {}  # nothing in it: no window, rather than one of zeros


def test_a_series_first_seen_in_a_window_counts_from_its_first_sample() -> None:
    result = [series("new", (104, 500), (108, 520))]
    assert tokens(result, [100, 110]) == [20]


def test_values_no_page_could_hold_are_skipped() -> None:
    result = [series("a", (95, 10), (101, float("nan")), (104, -3), (108, 14))]
    assert tokens(result, [100, 110]) == [4]


def test_a_model_name_holding_a_secret_is_left_out() -> None:
    from spectax import logs

    logs.register_secret("tok-4f9a2b7c")
    leaked = series("a", (95, 1), (105, 9), model="tok-4f9a2b7c")
    kept = series("a", (95, 1), (105, 3))
    windows = window_intervals(SOURCE, {GEN: [leaked, kept]}, [100, 110])
    assert list(windows[110]["m"].models) == ["m"]
