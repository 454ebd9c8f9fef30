"""Raw Prometheus samples to window intervals (spectax.sources.prometheus), on the cases
the live test cannot time: where a sample on a boundary goes, a reset between two
samples, a series with no sample before the window, a value Prometheus should not hold;
and the answers decoded a series at a time (spectax.sources.matrix) as json.loads would."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spectax.sources.config import PrometheusSource
from spectax.sources.matrix import MatrixDecoder, MatrixError
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


def decoded(
    answer: bytes, chunk: int
) -> tuple[Any, list[tuple[dict[str, str], list[float], list[str]]]]:
    decoder = MatrixDecoder()
    got = []
    for at in range(0, len(answer), chunk):
        got += decoder.feed(answer[at : at + chunk])
    body, rest, _ = decoder.finish()
    return body, got + rest


def as_json(body: dict[str, Any]) -> list[tuple[dict[str, str], list[float], list[str]]]:
    return [
        (s["metric"], [float(t) for t, _ in s["values"]], [v for _, v in s["values"]])
        for s in body["data"]["result"]
    ]


HOSTILE = {
    "status": "success",
    "data": {
        "resultType": "matrix",
        "result": [
            {
                "metric": {"__name__": GEN, "model_name": 'a]]},"values":[[1,"9"]]}', "pod": "é✓"},
                "values": [[1700000000.125, "1"], [1700000015, "NaN"], [1700000030, "+Inf"]],
            },
            {"metric": {"model_name": '{"metric":\\"x'}, "values": [[1700000000, "1e+21"]]},
            {"metric": {}, "values": []},
        ],
    },
    "warnings": ["some stores did not answer"],
}


def test_an_answer_is_decoded_as_json_would_whatever_its_chunks_and_labels() -> None:
    """Labels holding the encoding's own delimiters and multibyte characters, split at
    every byte: the same series as json.loads, and the envelope (warnings) kept."""
    answer = json.dumps(HOSTILE, separators=(",", ":"), ensure_ascii=False).encode()
    for chunk in (1, 2, 3, 7, 64, len(answer)):
        body, got = decoded(answer, chunk)
        assert got == as_json(HOSTILE), chunk
        assert body["warnings"] == HOSTILE["warnings"] and body["data"]["result"] == []


def test_another_layout_or_an_error_page_is_read_whole() -> None:
    pretty = json.dumps(HOSTILE, indent=1).encode()
    body, got = decoded(pretty, 5)
    assert got == as_json(HOSTILE) and body["warnings"]
    body, got = decoded(b"<html>502 Bad Gateway</html>", 4)
    assert body is None and got == []
    error = {"status": "error", "errorType": "bad_data", "error": "parse error"}
    body, got = decoded(json.dumps(error).encode(), 3)
    assert body == error and got == []


def test_an_answer_cut_short_is_an_error_not_a_short_window() -> None:
    answer = json.dumps(HOSTILE, separators=(",", ":")).encode()
    decoder = MatrixDecoder()
    decoder.feed(answer[: len(answer) // 2])
    with pytest.raises(MatrixError):
        decoder.finish()


def test_whole_and_fractional_counters_give_the_same_windows() -> None:
    """Whole, never-decreasing counters take a shortcut (last value less the one before):
    it gives what the sample-by-sample deltas give, on every boundary case."""
    samples = [(85, 3), (95, 10), (100, 15), (104, 15), (110, 30), (111, 31), (125, 40)]
    whole = [series("a", *samples)]
    fractional = [{**whole[0], "values": [[t, f"{v}.0"] for t, v in samples]}]
    for bounds in ([90, 100, 110, 120], [100, 110], [80, 130], [111, 112, 125]):
        assert tokens(whole, bounds) == tokens(fractional, bounds), bounds
    assert tokens(whole, [90, 100, 110, 120]) == [12, 15, 1]


def test_an_answer_of_another_shape_is_an_error_not_a_crash() -> None:
    for answer in (
        {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}}]}},
        {"status": "success", "data": {"resultType": "matrix", "result": [{"values": 3}]}},
    ):
        decoder = MatrixDecoder()
        decoder.feed(json.dumps(answer, indent=1).encode())
        with pytest.raises(MatrixError):
            decoder.finish()
    decoder = MatrixDecoder()
    decoder.feed(b'{"status": "success", "data": "matrix"}')
    assert decoder.finish()[0] == {"status": "success", "data": "matrix"}
