"""Fleet mode's sums against a real Prometheus (the Debian package), on history written
with `promtool tsdb create-blocks-from openmetrics`: the windows Prometheus sums per
endpoint (CounterQueries.sums) plus the odd series read raw must be the windows the raw
samples of every series give (`PrometheusReader(raw=True)`), to the token, on each case
the simulator cannot time: a reset just after a window's start, one in the lookback
before it, a series new in a window, a sample exactly on a boundary, a replica that
vanishes, one gone with its last sample on a window's start, one back after a gap longer
than the lookback (it counts from its sample before the gap) and one back after more than
the horizon (it counts from its next sample), a NaN, fractional sums (dyadic, so that
any order of adding them is exact: Prometheus adds in its own), per-position counts,
label values full of regex syntax or outside Unicode's BMP; read one window at a time
(the live daemon) and as one span (backfill), with a lookback longer and one shorter
than the window.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest

from promstack import Prometheus, history_start, prometheus_holding
from spectax.engines.base import Histogram
from spectax.pipeline.intervals import Interval
from spectax.source_config import PrometheusSource
from spectax.sources import promql
from spectax.sources.prometheus import PrometheusReader
from spectax.sources.promql import RUNNING, SERIES

pytestmark = pytest.mark.e2e  # a real Prometheus, scraping for seconds

W = 10.0
GEN = SERIES["generation_tokens"]
TPOT = SERIES["time_per_output_token"]
POSITIONS = SERIES["accepted_per_position"]
ODD_POD = 'b.x+(1)|"é"'  # reset in window 1: named in the odd series' selector

# pod -> (namespace, samples at T + offset); T is a window boundary three hours ago.
TOKENS = {
    "a": ("ns1", [(-6, 10), (-2, 12), (2, 15), (6, 20), (10, 30), (14, 31), (22, 40), (28, 44)]),
    ODD_POD: ("ns1", [(-5, 50), (2, 4), (8, 9), (19, 12), (25, 20)]),  # reset after T
    "c": ("ns1", [(4, 500), (18, 520), (26, 521)]),  # new in window 1
    "d": ("ns1", [(-8, 7), (0, 8), (6, 11), (20, 20), (24, 21)]),  # on the boundaries
    "g": ("ns1", [(-4, 100), (3, 101)]),  # vanishes in window 1
    "f": ("ns2", [(-30, 5), (12, 9), (16, 10)]),  # back after more than the lookback
    "h": ("ns2", [(-3700, 70), (12, 80), (16, 81)]),  # back after more than the horizon
    "i": ("ns2", [(-12, 100), (-8, 3), (4, 9), (14, 10)]),  # reset in the lookback
    "\U0001f600": ("ns1", [(-5, 50), (3, 5), (16, 6)]),  # reset; outside the BMP
    "e": ("ns3", [(-5, 10), (10, 12)]),  # gone: its last sample on window 2's start
}
# Per window, per namespace: the tokens the raw samples give (by hand, from TOKENS).
EXPECTED = {
    1: {"ns1": 18 + (4 + 5) + 0 + 3 + 1 + 5, "ns2": 6, "ns3": 2},
    2: {"ns1": 1 + 3 + 20 + 9 + 1, "ns2": (4 + 1) + 1 + 1},
    3: {"ns1": 13 + 8 + 1 + 1},
}
# Prompt tokens of two pods, one of them NaN: raw skips the NaN; the sum would be NaN.
PROMPT = SERIES["prompt_tokens"]
NAN_PODS = {"n1": [(-5, 10), (5, math.nan)], "n2": [(-5, 100), (5, 110)]}
SECONDS = [(-2, 1.5), (6, 2.25), (14, 2.75), (28, 3.0)]  # pod a's TPOT sum: dyadic, exact
COUNTS = [(-2, 4), (6, 6), (14, 7), (28, 8)]
ACCEPTED = {"0": [(-2, 3), (6, 5), (16, 9)], "1": [(-2, 1), (6, 2), (16, 2)]}  # pod a
RUNNING_SAMPLES = [(-2, 1), (6, 1), (14, 2), (28, 0)]  # pod a


def openmetrics(t0: int) -> str:
    lines = []

    def add(name: str, labels: dict[str, str], samples: list[tuple[int, float]]) -> None:
        text = ",".join(f"{k}={_quoted(v)}" for k, v in labels.items())
        lines.extend(
            f"{name}{{{text}}} {'NaN' if math.isnan(v) else v} {t0 + t}" for t, v in samples
        )

    for pod, (namespace, samples) in TOKENS.items():
        add(GEN, {"namespace": namespace, "model_name": "m", "pod": pod}, samples)
    for pod, samples in NAN_PODS.items():
        add(PROMPT, {"namespace": "ns4", "model_name": "m", "pod": pod}, samples)
    a = {"namespace": "ns1", "model_name": "m", "pod": "a"}
    add(f"{TPOT}_sum", a, SECONDS)
    add(f"{TPOT}_count", a, COUNTS)
    for position, samples in ACCEPTED.items():
        add(POSITIONS, a | {"position": position}, samples)
    add(RUNNING, a, RUNNING_SAMPLES)
    return "\n".join([*lines, "# EOF", ""])


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@pytest.fixture
async def prometheus(tmp_path: Path):  # type: ignore[no-untyped-def]
    t0 = history_start()
    async with prometheus_holding(tmp_path, openmetrics(t0)) as server:
        yield server, float(t0)


async def read(
    url: str, bounds: list[float], raw: bool, lookback: float = 15.0
) -> dict[float, dict[str, Interval]]:
    source = PrometheusSource(url=url, endpoint_labels=["namespace"], lookback=lookback)
    async with aiohttp.ClientSession() as session:
        return await PrometheusReader(source, session, raw=raw).windows(bounds)


def tokens_of(windows: dict[float, dict[str, Interval]]) -> dict[tuple[float, str], object]:
    """Every window's counts but its running seconds."""
    return {
        (end, name): {m: replace(c, running_seconds=0.0) for m, c in interval.models.items()}
        for end, found in windows.items()
        for name, interval in found.items()
    }


async def test_the_sums_and_the_odd_series_give_the_windows_of_the_raw_samples(
    prometheus: tuple[Prometheus, float],
) -> None:
    server, t0 = prometheus
    bounds = [t0 + i * W for i in range(4)]
    raw = await read(server.url, bounds, raw=True)
    summed = await read(server.url, bounds, raw=False)
    assert summed == raw
    for lookback in (15.0, 3.0):  # longer and shorter than the window
        whole = await read(server.url, bounds, raw=True, lookback=lookback)
        assert await read(server.url, bounds, raw=False, lookback=lookback) == whole, lookback
        one_at_a_time = {}
        for i in range(3):
            one_at_a_time |= await read(server.url, bounds[i : i + 2], False, lookback)
        assert one_at_a_time == whole, lookback
        # The counters, whatever the lookback; running requests (read raw for the whole
        # fleet every window) are integrated from a sample within the lookback only.
        assert tokens_of(whole) == tokens_of(raw), lookback
    for i, end in enumerate(bounds[1:], start=1):
        got = {
            name: interval.models["m"].generation_tokens
            for name, interval in raw[end].items()
            if name != "ns4"
        }
        assert got == EXPECTED[i], i
    assert raw[bounds[1]]["ns4"].models["m"].prompt_tokens == 10
    first = raw[bounds[1]]
    assert first["ns1"].restarted and not first["ns2"].restarted
    assert not any(interval.restarted for interval in raw[bounds[2]].values())
    a = [raw[end]["ns1"].models["m"] for end in bounds[1:]]
    assert [m.time_per_output_token for m in a] == [
        Histogram(0.75, 2),
        Histogram(0.5, 1),
        Histogram(0.25, 1),
    ]
    assert [m.accepted_per_position for m in a] == [(2.0, 1.0), (4.0, 0.0), ()]


async def test_many_odd_series_are_read_with_the_whole_fleet_and_give_the_same_windows(
    prometheus: tuple[Prometheus, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, t0 = prometheus
    bounds = [t0 + i * W for i in range(4)]
    named = await read(server.url, bounds, raw=False)
    monkeypatch.setattr(promql, "MAX_NAMED_ODD", 0)
    whole = await read(server.url, bounds, raw=False)
    assert whole == named == await read(server.url, bounds, raw=True)
