"""Raw Prometheus samples to window intervals (spectax.sources.prometheus), on the cases
the live test cannot time: where a sample on a boundary goes, a reset between two
samples, a series with no sample before the window, a value Prometheus should not hold;
and the answers decoded a series at a time (spectax.sources.matrix) as json.loads would."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spectax.pipeline.intervals import Interval
from spectax.source_config import PrometheusSource
from spectax.sources.matrix import MatrixDecoder, MatrixError
from spectax.sources.prometheus import WindowSums
from spectax.sources.promql import SERIES

SOURCE = PrometheusSource(url="http://prometheus:9090", endpoint_labels=["model_name"])
GEN = SERIES["generation_tokens"]


def window_intervals(
    source: PrometheusSource, results: dict[str, list[dict[str, Any]]], bounds: list[float]
) -> dict[float, dict[str, Interval]]:
    """Per window end, per endpoint: its interval, from each name's raw samples as the
    reader decodes them (`data.result` of `samples_query`), through its window sums."""
    sums = WindowSums(source, bounds)
    for name, result in results.items():
        for found in result:
            values = found["values"]
            stamps, texts = [str(float(t)) for t, _ in values], [v for _, v in values]
            sums.add(name, found["metric"], stamps, texts)
    return sums.intervals()


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


Decoded = list[tuple[dict[str, str], list[float], list[str]]]


def decoded(answer: bytes, chunk: int) -> tuple[Any, Decoded]:
    """The answer fed in chunks of `chunk` bytes; timestamps as numbers (they come as sent)."""
    decoder = MatrixDecoder()
    got = []
    for at in range(0, len(answer), chunk):
        got += decoder.feed(answer[at : at + chunk])
    body, rest, _ = decoder.finish()
    return body, [(labels, list(map(float, t)), v) for labels, t, v in got + rest]


def as_json(body: dict[str, Any]) -> Decoded:
    out = []
    for s in body["data"]["result"]:
        values = s["values"]
        out.append((s["metric"], [float(t) for t, _ in values], [v for _, v in values]))
    return out


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
    wide = [{**whole[0], "values": [[t, str(v + 100)] for t, v in samples]}]  # one length
    # texts in order but numbers not, with as many characters as if all were of one length
    reset = [(95, 15), (101, 3), (105, 400), (108, 11), (109, 2), (110, 333), (111, 44)]
    resets = [series("a", *reset)]
    resets_fractional = [{**resets[0], "values": [[t, f"{v}.0"] for t, v in reset]}]
    for bounds in ([90, 100, 110, 120], [100, 110], [80, 130], [111, 112, 125]):
        assert tokens(whole, bounds) == tokens(fractional, bounds), bounds
        assert tokens(wide, bounds) == tokens(fractional, bounds), bounds
        assert tokens(resets, bounds) == tokens(resets_fractional, bounds), bounds
    assert tokens(resets, [100, 110]) == [3 + 397 + 11 + 2 + 331]
    assert tokens(whole, [90, 100, 110, 120]) == [12, 15, 1]


def test_an_answer_of_another_shape_is_an_error_not_a_crash() -> None:
    labels = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    labels["data"]["result"] = [{"metric": {"pod": ["x"]}, "values": [[1, "2"]]}]  # type: ignore[index]
    for chunk in (7, 4096):
        with pytest.raises(MatrixError):
            decoded(json.dumps(labels, separators=(",", ":")).encode(), chunk)
    with pytest.raises(MatrixError):
        decoded(json.dumps(labels, indent=1).encode(), 4096)
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


def test_samples_that_are_no_prometheus_answer_are_an_error() -> None:
    bad = ('[[1,"2"],[x,"3"]]', '[[1,"2,3"]]', '[[1,"2"],[-5,"3"]]', '[[1,"2",3],["4"]]')
    for values in (*bad, '[[1,"2"],[10.5.7,"3"]]', '[[1,"2"]],"metric":{"a":["x"]}'):
        head = '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":'
        answer = head + values + "}]}}"
        with pytest.raises(MatrixError):
            decoded(answer.encode(), 64)


def test_a_read_that_fails_unexpectedly_is_tried_again_not_the_end_of_the_source(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio

    import aiohttp

    from spectax.sources import fleet

    monkeypatch.setattr(fleet, "RETRY_SECONDS", 0.0)
    calls: list[float] = []

    async def read_due(now: float) -> bool:
        calls.append(now)
        if len(calls) == 1:
            raise KeyError("a bug")
        raise asyncio.CancelledError  # the daemon stopping: the end of the test

    async def main() -> None:
        async with aiohttp.ClientSession() as session:
            source = fleet.FleetSource(SOURCE, 10.0, session, None, lambda m, w: None)  # type: ignore[arg-type]
            source.next_end = 0.0  # due now
            monkeypatch.setattr(source, "read_due", read_due)
            with pytest.raises(asyncio.CancelledError):
                await source.run()

    asyncio.run(main())
    assert len(calls) == 2
    assert "read failed: KeyError('a bug')" in caplog.text
