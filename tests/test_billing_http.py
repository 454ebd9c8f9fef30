"""RunPod and OpenCost against loopback aiohttp servers speaking their documented JSON.

RunPod: `GET /billing/pods` and `/billing/endpoints` (REST API v1) answer an array
of `{amount, time, podId | endpointId, timeBilledMs, diskSpaceBilledGb, gpuTypeId}`.
OpenCost: `GET /allocation` answers `{"code": 200, "data": [{name: allocation}]}`,
one set per step. Each server can be scripted to answer 429 with Retry-After,
500, nothing at all, malformed JSON or a body cut short.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from loopback import serve
from spectax.billing import ledger
from spectax.billing.retry import RetryPolicy
from spectax.billing.sources.opencost import OpenCostConfig, OpenCostSource
from spectax.billing.sources.runpod import RunpodConfig, RunpodSource
from spectax.billing.types import BillingError, MapRule
from spectax.cli.main import main
from spectax.store import Store
from spectax.units import floor_time

FIXTURES = Path(__file__).parent / "fixtures" / "billing"
FAST = RetryPolicy(attempts=3, base=0.01, cap=0.02)
T0 = datetime(2024, 3, 1, 10, tzinfo=UTC)  # long past: every bucket is final
HOUR = timedelta(hours=1)
KEY = "rpa_TESTKEY0123456789"


class Scripted:
    """A loopback server: each path answers from its queue, then from its default."""

    def __init__(self) -> None:
        self.queues: dict[str, list[tuple[str, Any]]] = {}
        self.defaults: dict[str, tuple[str, Any]] = {}
        self.requests: list[tuple[str, dict[str, str], dict[str, str], float]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    def answer(self, path: str, *behaviours: tuple[str, Any]) -> None:
        self.queues.setdefault(path, []).extend(behaviours)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        self.requests.append((path, dict(request.query), dict(request.headers), time.monotonic()))
        queue = self.queues.get(path) or []
        kind, value = queue.pop(0) if queue else self.defaults.get(path, ("status", 404))
        if kind == "json":
            return web.json_response(value)
        if kind == "status":
            code, headers = (value, {}) if isinstance(value, int) else value
            return web.Response(status=code, headers=headers, text="no")
        if kind == "hang":
            await asyncio.sleep(30)
            return web.Response(text="[]")
        if kind == "malformed":
            return web.Response(text='[{"amount": 1.5, "time": ', content_type="application/json")
        if kind == "truncated":  # a Content-Length promising more than is sent
            response = web.StreamResponse(headers={"Content-Length": "4096"})
            response.content_type = "application/json"
            await response.prepare(request)
            await response.write(json.dumps(value).encode()[:40])
            request.transport.close()  # type: ignore[union-attr]
            return response
        raise AssertionError(kind)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        self._runner, self.url = await serve(app, shutdown_timeout=0.2)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def server() -> AsyncIterator[Scripted]:
    s = Scripted()
    await s.start()
    yield s
    await s.close()


# ---------------------------------------------------------------- RunPod


def pod_records() -> list[dict[str, Any]]:
    return json.loads((FIXTURES / "runpod_billing_pods.json").read_text())


def endpoint_records() -> list[dict[str, Any]]:
    return json.loads((FIXTURES / "runpod_billing_endpoints.json").read_text())


def runpod(url: str, **settings: Any) -> RunpodSource:
    config = RunpodConfig(
        type="runpod",
        base_url=url,
        map=[
            MapRule(endpoint="chat", resource="jpnw0v75y3qoql"),
            MapRule(endpoint="code", resource="xedezhzb9la3ye"),
        ],
        **settings,
    )
    return RunpodSource(config, KEY, FAST)


async def test_runpod_pods_and_endpoints_by_the_hour(server: Scripted, database_url: str) -> None:
    server.answer("/billing/pods", ("json", pod_records()))
    server.answer("/billing/endpoints", ("json", endpoint_records()))
    source = runpod(server.url)
    try:
        fetched = await source.fetch(T0, T0 + 3 * HOUR)
    finally:
        await source.close()
    (pods, query, headers, _), (endpoints, equery, _, _) = server.requests
    assert (pods, endpoints) == ("/billing/pods", "/billing/endpoints")
    assert headers["Authorization"] == f"Bearer {KEY}"
    assert query == {
        "bucketSize": "hour",
        "startTime": "2024-03-01T10:00:00Z",
        "endTime": "2024-03-01T13:00:00Z",
        "grouping": "podId",
    }
    assert equery["grouping"] == "endpointId"
    by_key = {(line.resource, line.start): line for line in fetched.lines}
    code = by_key[("xedezhzb9la3ye", T0)]
    assert (code.amount, code.end, code.endpoint, code.final) == (
        Decimal("1.6940000000"),
        T0 + HOUR,
        "code",
        True,
    )
    assert code.tags["timeBilledMs"] == "3600000"
    chat = by_key[("jpnw0v75y3qoql", T0 + HOUR)]
    assert (chat.amount, chat.endpoint) == (Decimal("0.4125"), "chat")
    assert by_key[("otherpod12345a", T0)].endpoint is None
    assert [(p.start, p.final) for p in fetched.periods] == [
        (T0, True),
        (T0 + HOUR, True),
        (T0 + 2 * HOUR, True),
    ]
    store = await Store.open(database_url)
    try:
        stored = await store.save_billing(
            "runpod", fetched.lines, fetched.periods, source.mapper.endpoints
        )
        assert stored == len([line for line in fetched.lines if line.endpoint])
        # The serverless endpoint was idle in the third hour: billed nothing, and it is final.
        spend = await ledger.spend_by_basis(store, "chat", T0, T0 + 3 * HOUR)
        assert spend == (Decimal("0.2750") + Decimal("0.4125"), "billed")
    finally:
        await store.close()


async def test_runpod_current_bucket_is_not_final(server: Scripted) -> None:
    now = datetime.now(UTC)
    hour = floor_time(now, HOUR)
    record = {"amount": 0.5, "time": f"{hour:%Y-%m-%dT%H:%M:%SZ}", "podId": "xedezhzb9la3ye"}
    server.answer("/billing/pods", ("json", [record]))
    source = runpod(server.url, include=["pods"])
    try:
        fetched = await source.fetch(now - 2 * HOUR, now)
    finally:
        await source.close()
    [line] = fetched.lines
    assert not line.final and fetched.periods[-1].start == hour and not fetched.periods[-1].final


async def test_runpod_honours_retry_after_and_retries_5xx(server: Scripted) -> None:
    server.answer("/billing/pods", ("status", (429, {"Retry-After": "1"})), ("json", pod_records()))
    server.answer("/billing/endpoints", ("status", 500), ("json", endpoint_records()))
    source = runpod(server.url)
    try:
        fetched = await source.fetch(T0, T0 + 3 * HOUR)
    finally:
        await source.close()
    assert fetched.lines
    times = [t for path, _, _, t in server.requests if path == "/billing/pods"]
    assert len(times) == 2 and times[1] - times[0] >= 0.9  # waited as asked
    assert len([r for r in server.requests if r[0] == "/billing/endpoints"]) == 2


@pytest.mark.parametrize(
    ("behaviour", "message", "timeout"),
    [
        (("hang", None), "no complete answer", 0.3),
        (("malformed", None), "not valid JSON", 10.0),
        (("truncated", [{"amount": 1}]), "cut short", 10.0),
        (("status", 503), "HTTP 503", 10.0),
    ],
)
async def test_runpod_transient_failures_are_retried_then_reported(
    server: Scripted, behaviour: tuple[str, Any], message: str, timeout: float
) -> None:
    server.defaults["/billing/pods"] = behaviour
    source = runpod(server.url, include=["pods"], request_timeout=timeout)
    try:
        with pytest.raises(BillingError, match=message) as caught:
            await source.fetch(T0, T0 + HOUR)
    finally:
        await source.close()
    assert caught.value.retryable
    assert len(server.requests) == FAST.attempts
    assert KEY not in str(caught.value)


async def test_runpod_truncated_answer_then_a_whole_one(server: Scripted) -> None:
    server.answer("/billing/pods", ("truncated", pod_records()), ("json", pod_records()))
    source = runpod(server.url, include=["pods"])
    try:
        fetched = await source.fetch(T0, T0 + 3 * HOUR)
    finally:
        await source.close()
    assert len(fetched.lines) == len(pod_records()) and len(server.requests) == 2


async def test_runpod_wrong_key_is_not_retried(server: Scripted) -> None:
    server.answer("/billing/pods", ("status", 401))
    source = runpod(server.url, include=["pods"])
    try:
        with pytest.raises(BillingError, match="HTTP 401") as caught:
            await source.fetch(T0, T0 + HOUR)
    finally:
        await source.close()
    assert not caught.value.retryable and len(server.requests) == 1


async def test_runpod_record_without_an_id_fails_the_read(server: Scripted) -> None:
    server.answer("/billing/pods", ("json", [{"amount": 1.0, "time": "2024-03-01T10:00:00Z"}]))
    source = runpod(server.url, include=["pods"])
    try:
        with pytest.raises(BillingError, match=r"pods\[0\]: no podId"):
            await source.fetch(T0, T0 + HOUR)
    finally:
        await source.close()


# ---------------------------------------------------------------- OpenCost


def allocation_sets() -> dict[str, Any]:
    return json.loads((FIXTURES / "opencost_allocation.json").read_text())


def opencost(url: str, **settings: Any) -> OpenCostSource:
    config = OpenCostConfig(
        type="opencost",
        url=url,
        label="app",
        map=[MapRule(endpoint="chat", tags={"app": "vllm-chat"})],
        **settings,
    )
    return OpenCostSource(config, policy=FAST)


async def test_opencost_allocations_by_label_and_step(server: Scripted, database_url: str) -> None:
    server.answer("/allocation", ("json", allocation_sets()))
    source = opencost(server.url, bearer_token="oc-token-0123")
    try:
        fetched = await source.fetch(T0, T0 + 3 * HOUR)
    finally:
        await source.close()
    [(_, query, headers, _)] = server.requests
    assert query == {
        "window": "2024-03-01T10:00:00Z,2024-03-01T13:00:00Z",
        "aggregate": "label:app",
        "step": "1h",
        "accumulate": "false",
    }
    assert headers["Authorization"] == "Bearer oc-token-0123"
    chat = [line for line in fetched.lines if line.endpoint == "chat"]
    assert [(line.start, line.amount) for line in chat] == [
        (T0, Decimal("4.12")),
        (T0 + HOUR, Decimal("4.2")),
    ]
    idle = [line for line in fetched.lines if line.resource == "__idle__"]
    assert idle and all(line.endpoint is None and not line.tags for line in idle)
    # The answer holds two of the three steps: the third stays on the estimate.
    assert [(p.start, p.final) for p in fetched.periods] == [(T0, True), (T0 + HOUR, True)]
    store = await Store.open(database_url)
    try:
        await store.save_billing(
            "opencost", fetched.lines, fetched.periods, source.mapper.endpoints
        )
        assert await ledger.spend_by_basis(store, "chat", T0, T0 + 2 * HOUR) == (
            Decimal("8.32"),
            "billed",
        )
        assert (await ledger.spend_by_basis(store, "chat", T0, T0 + 3 * HOUR))[1] == "estimated"
    finally:
        await store.close()


async def test_opencost_gpu_cost_and_basic_auth(server: Scripted) -> None:
    server.answer("/allocation", ("json", allocation_sets()))
    source = opencost(
        server.url, cost="gpuCost", basic_auth={"username": "ops", "password": "pw-01234567"}
    )
    try:
        fetched = await source.fetch(T0, T0 + 3 * HOUR)
    finally:
        await source.close()
    assert server.requests[0][2]["Authorization"].startswith("Basic ")
    chat = [line.amount for line in fetched.lines if line.endpoint == "chat"]
    assert chat == [Decimal("3.9"), Decimal("3.9")]


async def test_opencost_errors(server: Scripted) -> None:
    server.answer(
        "/allocation",
        ("status", (503, {"Retry-After": "0"})),
        ("json", {"code": 400, "message": "error parsing window"}),
    )
    source = opencost(server.url)
    try:
        with pytest.raises(BillingError, match="code 400: error parsing window") as caught:
            await source.fetch(T0, T0 + HOUR)
    finally:
        await source.close()
    assert not caught.value.retryable and len(server.requests) == 2


async def test_opencost_step_in_progress_is_not_final(server: Scripted) -> None:
    now = datetime.now(UTC)
    hour = floor_time(now, HOUR)
    window = {"start": f"{hour:%Y-%m-%dT%H:%M:%SZ}", "end": f"{hour + HOUR:%Y-%m-%dT%H:%M:%SZ}"}
    answer = {
        "code": 200,
        "data": [
            {"vllm-chat": {"name": "vllm-chat", "window": window, "totalCost": 0.7, "gpuCost": 0.6}}
        ],
    }
    server.answer("/allocation", ("json", answer))
    source = opencost(server.url)
    try:
        fetched = await source.fetch(now - HOUR, now)
    finally:
        await source.close()
    [line] = fetched.lines
    assert not line.final and line.amount == Decimal("0.7")


def test_billing_fetch_of_an_unresolvable_host_names_source_host_attempts_and_what_to_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`.invalid` never resolves (RFC 6761); a 2 s timeout keeps the retries short."""
    canary = "CANARY-opencost-token-7f3a"
    config = tmp_path / "spectax.yml"
    config.write_text(
        "endpoints:\n"
        "  - {name: chat, url: 'http://127.0.0.1:9/metrics'}\n"
        "billing:\n"
        "  - type: opencost\n"
        "    name: cluster-costs\n"
        "    url: http://nonexistent.invalid:9003\n"
        "    label: app\n"
        "    timeout: 2s\n"
        f"    bearer_token: {canary}\n"
    )
    code = main(["billing", "fetch", "--config", str(config), "--source", "cluster-costs"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "Traceback" not in err and "ClientConnectorDNSError" not in err
    [line] = [ln for ln in err.splitlines() if "cluster-costs" in ln]
    assert "opencost" in line and "nonexistent.invalid" in line
    assert "cannot resolve" in line and "DNS" in line
    assert re.search(r"\d+ attempt\(s\) over \d+\.\d s", line), line
    assert "Check that nonexistent.invalid resolves" in line
    # Jittered waits end the retries by count or by the 2 s deadline; the advice follows.
    assert ("larger `timeout`" in line) == ("would pass the read's timeout" in line)
    assert canary not in out + err
