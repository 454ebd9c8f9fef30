"""AWS Cost Explorer against moto's server mode, over real HTTP (../shared/NOTES.md).

moto answers GetCostAndUsage from results seeded with
`POST /moto-api/static/ce/cost-and-usage-results`, each taken by the next request
with a new body: page two (which carries NextPageToken) gets the second result.
A loopback proxy in front of moto records the request bodies and answers
LimitExceededException when a test asks it to throttle.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from e2e import free_port
from loopback import serve
from spectax.billing import ledger
from spectax.billing.retry import RetryPolicy
from spectax.billing.sources.aws_cost_explorer import AwsCostExplorerConfig, AwsCostExplorerSource
from spectax.billing.types import BillingError, MapRule
from spectax.cli.main import main
from spectax.store import Store

TAG = "spectax-endpoint"
D1, D2, D3 = (datetime(2026, 1, d, tzinfo=UTC) for d in (1, 2, 3))
FAST = RetryPolicy(attempts=4, base=0.01, cap=0.02)


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    moto_server = pytest.importorskip("moto.server")  # here, not at collection: 0.3 s
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


class Proxy:
    """Forwards to moto; records each request body; throttles the next `throttle` requests."""

    def __init__(self, upstream: str):
        self.upstream = upstream
        self.bodies: list[dict[str, Any]] = []
        self.throttle = 0
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.bodies.append(json.loads(body))
        if self.throttle > 0:
            self.throttle -= 1
            return web.Response(
                status=400,
                content_type="application/x-amz-json-1.1",
                text=json.dumps(
                    {
                        "__type": "com.amazonaws.ce#LimitExceededException",
                        "message": "Rate exceeded",
                    }
                ),
            )
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
        async with self._session.post(self.upstream + "/", data=body, headers=headers) as answer:
            text = await answer.read()
            return web.Response(
                status=answer.status,
                body=text,
                headers={"Content-Type": answer.headers.get("Content-Type", "")},
            )

    async def start(self) -> None:
        self._session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_post("/", self.handle)
        self._runner, self.url = await serve(app)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()


@pytest.fixture
async def proxy(moto_url: str) -> AsyncIterator[Proxy]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{moto_url}/moto-api/reset") as r,
    ):
        assert r.status == 200
    p = Proxy(moto_url)
    await p.start()
    yield p
    await p.close()


async def seed(moto_url: str, *results: dict[str, Any]) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{moto_url}/moto-api/static/ce/cost-and-usage-results",
            json={"results": list(results)},
        ) as r,
    ):
        assert r.status == 201


def result(
    periods: list[tuple[datetime, datetime, dict[str, str], bool]], token: str | None = None
) -> dict[str, Any]:
    """A GetCostAndUsage answer as AWS documents it: groups keyed `tag$value`."""
    answer: dict[str, Any] = {
        "GroupDefinitions": [{"Type": "TAG", "Key": TAG}],
        "ResultsByTime": [
            {
                "TimePeriod": {"Start": f"{s:%Y-%m-%d}", "End": f"{e:%Y-%m-%d}"},
                "Total": {},
                "Groups": [
                    {
                        "Keys": [f"{TAG}${value}"],
                        "Metrics": {"UnblendedCost": {"Amount": amount, "Unit": "USD"}},
                    }
                    for value, amount in groups.items()
                ],
                "Estimated": estimated,
            }
            for s, e, groups, estimated in periods
        ],
        "DimensionValueAttributes": [],
    }
    if token:
        answer["NextPageToken"] = token
    return answer


def source(url: str, **settings: Any) -> AwsCostExplorerSource:
    config = AwsCostExplorerConfig(
        type="aws_cost_explorer",
        name="aws",
        tag_key=TAG,
        endpoint_url=url,
        map=[
            MapRule(endpoint="chat", tags={TAG: "chat"}),
            MapRule(endpoint="code", tags={TAG: "code"}),
        ],
        **settings,
    )
    secrets = {"access_key_id": "testing", "secret_access_key": "testing", "session_token": None}
    return AwsCostExplorerSource(config, secrets, FAST)


async def test_pages_are_followed_and_estimated_days_are_not_final(
    moto_url: str, proxy: Proxy
) -> None:
    await seed(
        moto_url,
        result([(D1, D2, {"chat": "10.5000000001"}, False)], token="page-2"),
        result([(D1, D2, {"code": "3.25"}, False), (D2, D3, {"chat": "11", "": "0.4"}, True)]),
    )
    aws = source(proxy.url)
    try:
        fetched = await aws.fetch(D1, D3)
    finally:
        await aws.close()
    lines = {(line.resource, line.start): line for line in fetched.lines}
    assert set(lines) == {
        (f"{TAG}$chat", D1),
        (f"{TAG}$code", D1),
        (f"{TAG}$chat", D2),
        (f"{TAG}$", D2),
    }
    assert lines[(f"{TAG}$chat", D1)].amount == Decimal("10.5000000001")
    assert lines[(f"{TAG}$chat", D1)].final and lines[(f"{TAG}$code", D1)].final
    assert not lines[(f"{TAG}$chat", D2)].final  # Estimated: AWS may still revise it
    assert lines[(f"{TAG}$chat", D2)].endpoint == "chat"
    assert lines[(f"{TAG}$code", D1)].endpoint == "code"
    assert lines[(f"{TAG}$", D2)].endpoint is None  # untagged spend maps to no endpoint
    assert [(p.start, p.final) for p in fetched.periods] == [(D1, True), (D2, False)]
    # What was asked: grouped and filtered by the tag, the second page by its token.
    first, second = proxy.bodies
    assert first["GroupBy"] == [{"Type": "TAG", "Key": TAG}]
    assert first["Filter"] == {
        "Tags": {"Key": TAG, "Values": ["chat", "code"], "MatchOptions": ["EQUALS"]}
    }
    assert first["TimePeriod"] == {"Start": "2026-01-01", "End": "2026-01-03"}
    assert first["Granularity"] == "DAILY" and first["Metrics"] == ["UnblendedCost"]
    assert "NextPageToken" not in first and second["NextPageToken"] == "page-2"
    assert aws.requests == 2


async def test_hourly_granularity_asks_for_hours(moto_url: str, proxy: Proxy) -> None:
    h0, h1 = datetime(2026, 1, 1, 10, tzinfo=UTC), datetime(2026, 1, 1, 11, tzinfo=UTC)
    answer = result([])
    answer["ResultsByTime"] = [
        {
            "TimePeriod": {"Start": "2026-01-01T10:00:00Z", "End": "2026-01-01T11:00:00Z"},
            "Total": {},
            "Groups": [
                {
                    "Keys": [f"{TAG}$chat"],
                    "Metrics": {"UnblendedCost": {"Amount": "2.5", "Unit": "USD"}},
                }
            ],
            "Estimated": True,
        }
    ]
    await seed(moto_url, answer)
    aws = source(proxy.url, granularity="HOURLY")
    try:
        fetched = await aws.fetch(datetime(2026, 1, 1, 10, 20, tzinfo=UTC), h1)
    finally:
        await aws.close()
    assert proxy.bodies[0]["TimePeriod"] == {
        "Start": "2026-01-01T10:00:00Z",
        "End": "2026-01-01T11:00:00Z",
    }
    [line] = fetched.lines
    assert (line.start, line.end, line.amount, line.final) == (h0, h1, Decimal("2.5"), False)


async def test_throttling_is_retried_with_backoff(moto_url: str, proxy: Proxy) -> None:
    await seed(moto_url, result([(D1, D2, {"chat": "7"}, False)]))
    proxy.throttle = 2
    aws = source(proxy.url)
    try:
        fetched = await aws.fetch(D1, D2)
    finally:
        await aws.close()
    assert [line.amount for line in fetched.lines] == [Decimal(7)]
    assert len(proxy.bodies) == 3 and aws.requests == 3  # every paid request is counted

    proxy.throttle = 10
    aws = source(proxy.url)
    try:
        with pytest.raises(BillingError, match="LimitExceededException") as caught:
            await aws.fetch(D1, D2)
    finally:
        await aws.close()
    assert caught.value.retryable and aws.requests == FAST.attempts


async def test_a_revised_bill_replaces_the_estimate(
    moto_url: str, proxy: Proxy, database_url: str
) -> None:
    store = await Store.open(database_url)
    try:
        await seed(moto_url, result([(D1, D2, {"chat": "10"}, True)]))
        aws = source(proxy.url)
        fetched = await aws.fetch(D1, D2)
        await store.save_billing("aws", fetched.lines, fetched.periods, aws.mapper.endpoints)
        assert await ledger.spend_by_basis(store, "chat", D1, D2) == (Decimal(0), "estimated")

        async with aiohttp.ClientSession() as session:  # AWS revises the day and closes it
            await (await session.post(f"{moto_url}/moto-api/reset")).release()
        await seed(moto_url, result([(D1, D2, {"chat": "12.5"}, False)]))
        fetched = await aws.fetch(D1, D2)
        await aws.close()
        await store.save_billing("aws", fetched.lines, fetched.periods, aws.mapper.endpoints)
        [line] = await store.billing_lines("chat")
        assert (line.amount, line.final) == (Decimal("12.5"), True)
        assert await ledger.spend_by_basis(store, "chat", D1, D2) == (Decimal("12.5"), "billed")
        assert (await ledger.billed_totals(store))["chat"] == ("aws", Decimal("12.5"))
    finally:
        await store.close()


async def test_billing_fetch_prints_the_lines_from_moto(
    moto_url: str, proxy: Proxy, tmp_path, monkeypatch, capsys
) -> None:
    await seed(
        moto_url,
        result([(D1, D2, {"chat": "1.5"}, False)], token="t2"),
        result([(D2, D3, {"chat": "2.25", "other": "9"}, True)]),
    )
    monkeypatch.setenv("SPECTAX_TEST_AWS_KEY", "AKIA-moto-4f1d")
    (tmp_path / "secret").write_text("moto-secret-9c2e\n")
    config = {
        "state_directory": str(tmp_path / "state"),
        "endpoints": [{"name": "chat", "url": "http://127.0.0.1:1"}],
        "billing": [
            {
                "type": "aws_cost_explorer",
                "name": "aws",
                "tag_key": TAG,
                "endpoint_url": proxy.url,
                "access_key_id": "${SPECTAX_TEST_AWS_KEY}",
                "secret_access_key_file": str(tmp_path / "secret"),
                "map": [{"endpoint": "chat", "tags": {TAG: "chat"}}],
            }
        ],
    }
    path = tmp_path / "spectax.yml"
    path.write_text(yaml.safe_dump(config))
    argv = ["billing", "fetch", "--config", str(path), "--since", "2026-01-01"]
    code = await asyncio.to_thread(main, [*argv, "--until", "2026-01-03", "--source", "aws"])
    out = capsys.readouterr()
    assert code == 0, out.err
    lines = json.loads(out.out)
    assert [(r["resource"], r["amount"], r["final"], r["endpoint"]) for r in lines] == [
        (f"{TAG}$chat", "1.5", True, "chat"),
        (f"{TAG}$chat", "2.25", False, "chat"),
        (f"{TAG}$other", "9", False, None),
    ]
    assert lines[0]["start"] == "2026-01-01T00:00:00+00:00" and lines[0]["tags"] == {TAG: "chat"}
    assert "aws: 3 line(s), 2 mapped" in out.err

    code = await asyncio.to_thread(
        main, [*argv, "--until", "2026-01-03", "--source", "aws", "--format", "csv"]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    header, *rows = out.out.splitlines()
    assert header.split(",")[:6] == ["source", "resource", "endpoint", "start", "end", "amount"]
    assert len(rows) == 3 and rows[0].startswith(f"aws,{TAG}$chat,chat,2026-01-01")
