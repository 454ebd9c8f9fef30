"""Billing inside the running daemon: its own jobs beside the scrapes, gauges, secrets.

In process, against simulated vLLM servers on loopback: a simulated FOCUS bill
(final, short charge periods) is reconciled within seconds, a billing API that
never answers only sets its own `spectax_billing_up` to 0 while the scrapes keep
their schedule, and a canary secret in every credential field never reaches a
log line, an error, `/metrics`, `billing fetch` or `check-config`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from e2e import free_port
from loopback import serve
from spectax.cli.main import main
from spectax.config import validate
from spectax.daemon import Daemon
from spectax.simulate import DEMO_PROFILES, start_simulated_servers
from spectax.simulate.demo_fleet import demo_endpoints
from spectax.simulate.focus_export import write_focus_export

PAYS = "code-assistant"


class Echo:
    """A billing API that never helps: it hangs, or answers an error quoting the request's
    credentials back (as some proxies do), so that a leak would show."""

    def __init__(self) -> None:
        self.url = ""
        self.hits = 0
        self._runner: web.AppRunner | None = None

    async def hang(self, request: web.Request) -> web.Response:
        self.hits += 1
        await asyncio.sleep(30)
        return web.json_response([])

    async def echo(self, request: web.Request) -> web.Response:
        self.hits += 1
        quoted = {k: v for k, v in request.headers.items() if k.lower().startswith(("auth", "x-"))}
        if request.method == "POST":  # AWS: a JSON error naming the caller's key
            return web.Response(
                status=403,
                content_type="application/x-amz-json-1.1",
                text=json.dumps(
                    {"__type": "UnrecognizedClientException", "message": f"bad token {quoted}"}
                ),
            )
        return web.Response(status=500, text=f"upstream said no to {quoted}")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/hang/{tail:.*}", self.hang)
        app.router.add_route("*", "/echo/{tail:.*}", self.echo)
        app.router.add_post("/echo", self.echo)
        self._runner, self.url = await serve(app, shutdown_timeout=0.2)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def echo() -> AsyncIterator[Echo]:
    server = Echo()
    await server.start()
    yield server
    await server.close()


async def metrics(daemon: Daemon) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with aiohttp.ClientSession() as session, session.get(f"{daemon.listen_url}/metrics") as r:
        text = await r.text()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(m: dict[Any, float], name: str, **labels: str) -> float | None:
    for (sample, sample_labels), v in m.items():
        if sample == name and all((k, x) in sample_labels for k, x in labels.items()):
            return v
    return None


@pytest.mark.e2e
async def test_billing_runs_beside_the_scrapes(tmp_path: Path, echo: Echo, caplog) -> None:
    caplog.set_level(logging.INFO)
    async with await start_simulated_servers({PAYS: DEMO_PROFILES[PAYS]}, speed=4.0) as fleet:
        raw: dict[str, Any] = {
            "listen": f"127.0.0.1:{free_port()}",
            "scrape_interval": "1s",
            "scrape_timeout": "1s",
            "window": "6s",
            "state_directory": str(tmp_path / "state"),
            "endpoints": demo_endpoints(dict(fleet.urls), DEMO_PROFILES),
        }
        price = validate(raw).usd_per_hour[PAYS]
        focus = write_focus_export(tmp_path / "focus", PAYS, price * Decimal("1.25"))
        hanging = {
            "type": "opencost",
            "name": "stuck-opencost",
            "url": f"{echo.url}/hang",
            "label": "app",
            "interval": "2s",
            "timeout": "1s",
        }
        daemon = Daemon(validate({**raw, "billing": [focus, hanging]}))
        await daemon.start()
        try:
            deadline = time.monotonic() + 40
            m: dict[Any, float] = {}
            while time.monotonic() < deadline:
                m = await metrics(daemon)
                if (
                    value(m, "spectax_billing_drift_ratio", source="simulated-focus") is not None
                    and value(m, "spectax_billing_up", source="stuck-opencost") == 0
                ):
                    break
                await asyncio.sleep(0.5)
            drift = value(m, "spectax_billing_drift_ratio", source="simulated-focus")
            assert drift is not None, sorted(k for k in m if "billing" in k[0])
            assert -0.6 < drift < 0.6  # billed 25% above the list price, give or take a scrape
            assert value(m, "spectax_billing_up", source="simulated-focus") == 1
            assert value(m, "spectax_billing_up", source="price_table") == 1
            assert value(m, "spectax_billing_up", source="stuck-opencost") == 0
            assert (
                value(m, "spectax_billing_last_success_timestamp_seconds", source="stuck-opencost")
                is None
            )
            assert value(m, "spectax_spend_usd_total", endpoint=PAYS, basis="billed") > 0
            assert value(m, "spectax_spend_usd_total", endpoint=PAYS, basis="estimated") > 0
            # The stuck source delays nothing: the scrapes keep their 1 s schedule.
            last = value(m, "spectax_last_scrape_success_timestamp_seconds", endpoint=PAYS)
            assert time.time() - last < 2.5
        finally:
            await daemon.stop()
    failures = [
        r.getMessage() for r in caplog.records if "stuck-opencost: read failed" in r.getMessage()
    ]
    assert len(failures) == 1  # logged once, not at every read


CANARY = "CANARY-s3cr3t-7f1c"


def canary(field: str) -> str:
    return f"{CANARY}-{field}"


@pytest.mark.e2e
async def test_no_credential_ever_shows(
    tmp_path: Path, echo: Echo, monkeypatch: pytest.MonkeyPatch, caplog, capsys
) -> None:
    """A canary in every credential field of every billing source, inline (as ${ENV}) and
    in *_file; every source fails against a server that quotes the credentials back."""
    caplog.set_level(logging.DEBUG)
    fields = {
        "RUNPOD_KEY": canary("runpod"),
        "OPENCOST_TOKEN": canary("opencost-token"),
        "OPENCOST_PASSWORD": canary("opencost-password"),
        "AWS_KEY_ID": canary("aws-key-id"),
        "AWS_SECRET": canary("aws-secret"),
        "AWS_TOKEN": canary("aws-session-token"),
    }
    for name, secret in fields.items():
        monkeypatch.setenv(f"SPECTAX_TEST_{name}", secret)
        (tmp_path / name).write_text(secret + "-file\n")
    secrets = [*fields.values(), *(f"{v}-file" for v in fields.values())]

    def env(name: str) -> str:
        return f"${{SPECTAX_TEST_{name}}}"

    def file(name: str) -> str:
        return str(tmp_path / name)

    common = {"interval": "1h", "timeout": "1s"}
    aws = {**common, "timeout": "8s"}  # 403 is not retried; loading boto3 takes a moment
    billing = [
        {
            "type": "runpod",
            "name": "rp-env",
            "base_url": f"{echo.url}/echo",
            "api_key": env("RUNPOD_KEY"),
            **common,
        },
        {
            "type": "runpod",
            "name": "rp-file",
            "base_url": f"{echo.url}/echo",
            "api_key_file": file("RUNPOD_KEY"),
            **common,
        },
        {
            "type": "opencost",
            "name": "oc-token",
            "url": f"{echo.url}/echo",
            "label": "app",
            "bearer_token": env("OPENCOST_TOKEN"),
            **common,
        },
        {
            "type": "opencost",
            "name": "oc-bearer-file",  # not "oc-token-file": 8 characters of its own secret
            "url": f"{echo.url}/echo",
            "label": "app",
            "bearer_token_file": file("OPENCOST_TOKEN"),
            **common,
        },
        {
            "type": "opencost",
            "name": "oc-basic",
            "url": f"{echo.url}/echo",
            "label": "app",
            "basic_auth": {"username": "ops", "password": env("OPENCOST_PASSWORD")},
            **common,
        },
        {
            "type": "opencost",
            "name": "oc-basic-file",
            "url": f"{echo.url}/echo",
            "label": "app",
            "basic_auth": {"username": "ops", "password_file": file("OPENCOST_PASSWORD")},
            **common,
        },
        {
            "type": "aws_cost_explorer",
            "name": "aws-env",
            "endpoint_url": f"{echo.url}/echo",
            "tag_key": "spectax-endpoint",
            "access_key_id": env("AWS_KEY_ID"),
            "secret_access_key": env("AWS_SECRET"),
            "session_token": env("AWS_TOKEN"),
            **aws,
        },
        {
            "type": "aws_cost_explorer",
            "name": "aws-file",
            "endpoint_url": f"{echo.url}/echo",
            "tag_key": "spectax-endpoint",
            "access_key_id_file": file("AWS_KEY_ID"),
            "secret_access_key_file": file("AWS_SECRET"),
            "session_token_file": file("AWS_TOKEN"),
            **aws,
        },
    ]
    raw = {
        "listen": f"127.0.0.1:{free_port()}",
        "state_directory": str(tmp_path / "state"),
        "endpoints": [{"name": "chat", "url": f"{echo.url}/echo/metrics"}],
        "billing": billing,
    }
    config_path = tmp_path / "spectax.yml"
    config_path.write_text(yaml.safe_dump(raw))
    settings = validate(raw)
    shown = [repr(settings.config), repr(settings.billing), settings.config.model_dump_json()]

    daemon = Daemon(settings)
    await daemon.start()
    try:
        deadline = time.monotonic() + 20
        m: dict[Any, float] = {}
        while time.monotonic() < deadline:
            m = await metrics(daemon)
            ups = [value(m, "spectax_billing_up", source=s["name"]) for s in billing]
            if all(up == 0 for up in ups):
                break
            await asyncio.sleep(0.3)
        assert all(value(m, "spectax_billing_up", source=s["name"]) == 0 for s in billing)
        async with aiohttp.ClientSession() as session:
            for path in ("/metrics", "/"):
                async with session.get(daemon.listen_url + path) as r:
                    shown.append(await r.text())
        shown += [s.last_error or "" for s in daemon.billing.snapshot.sources]
    finally:
        await daemon.stop()
    assert echo.hits >= len(billing)

    code = await asyncio.to_thread(main, ["billing", "fetch", "--config", str(config_path)])
    out = capsys.readouterr()
    assert code == 1 and "aws-file:" in out.err and "rp-env: HTTP 500" in out.err
    shown += [out.out, out.err]
    assert await asyncio.to_thread(main, ["check-config", str(config_path)]) == 0
    out = capsys.readouterr()
    shown += [out.out, out.err]
    shown += [r.getMessage() for r in caplog.records]
    shown += [str(r.exc_info) for r in caplog.records if r.exc_info]
    everything = "\n".join(shown)
    for secret in secrets:
        assert secret not in everything, f"{secret} leaked"
    assert CANARY not in everything
