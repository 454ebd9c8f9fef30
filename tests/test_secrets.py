"""Canaries in every credential field; nothing spectax produces may contain one.

Fields: bearer_token (inline, ${ENV}, _file), basic_auth.password (inline, _file),
storage_url's password (inline, and in storage_url_file), the web config's basic auth
password (and its bcrypt hash). Outputs: check-config (valid and invalid files), the
daemon's stdout and stderr at --log-level debug in both log formats, /metrics, the landing
page, the /-/reload answer, the store's files. The targets fail in every way: connection
refused, 401, an untrusted certificate, a timeout, and a hostile target that echoes the
Authorization header it received into a malformed page.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml
from aiohttp import web

from e2e import Spectax, free_port, value, write_config
from ops_helpers import Certs, Targets, make_certs
from spectax.cli.main import main
from spectax.credentials import basic_auth_header

pytestmark = pytest.mark.e2e
CANARY = "CANARY"  # every planted secret starts with it; no other text here does
WEB_PASSWORD = "CANARY-web-password"
WEB_HASH = bcrypt.hashpw(WEB_PASSWORD.encode(), bcrypt.gensalt(4)).decode()
ENV = {"SPECTAX_TEST_BEARER": "CANARY-bearer-env", "SPECTAX_TEST_DB": "CANARY-db-env"}


def assert_clean(where: str, data: str | bytes) -> None:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    assert CANARY.lower() not in text.lower(), f"a secret leaked into {where}"
    assert WEB_HASH not in text, f"the password hash leaked into {where}"
    # The base64 of basic auth credentials is as good as the password.
    for user, password in (("u1", "CANARY-basic-inline"), ("u2", "CANARY-basic-file")):
        encoded = basic_auth_header(user, password).removeprefix("Basic ")
        assert encoded not in text, f"encoded basic auth leaked into {where}"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def secret_files(tmp_path: Path) -> dict[str, Path]:
    files = {
        "bearer": tmp_path / "bearer-token",
        "basic": tmp_path / "basic-password",
        "db": tmp_path / "db-url",
    }
    files["bearer"].write_text("CANARY-bearer-file\n")
    files["basic"].write_text("CANARY-basic-file\n")
    files["db"].write_text(f"postgresql+asyncpg://spectax:CANARY-db-file@127.0.0.1:{free_port()}/x")
    return files


def endpoints(urls: dict[str, str], files: dict[str, Path], ca: Path) -> list[dict[str, Any]]:
    return [
        {"name": "refused", "url": urls["refused"], "bearer_token": "CANARY-bearer-inline"},
        {
            "name": "unauthorized",
            "url": urls["unauthorized"],
            "bearer_token_file": str(files["bearer"]),
        },
        {
            "name": "untrusted",
            "url": urls["untrusted"],
            "basic_auth": {"username": "u1", "password": "CANARY-basic-inline"},
            "tls": {"ca_file": str(ca)},
        },
        {
            "name": "slow",
            "url": urls["slow"],
            "basic_auth": {"username": "u2", "password_file": str(files["basic"])},
        },
        {"name": "echo", "url": urls["echo"], "bearer_token": "${SPECTAX_TEST_BEARER}"},
    ]


@pytest.fixture
def run_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., tuple[int, str, str]]]:
    """`spectax --log-level debug ARGS` in process (a subprocess costs ~2 s of imports)."""
    for key, val in ENV.items():
        monkeypatch.setenv(key, val)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level

    def run(*args: str) -> tuple[int, str, str]:
        code = main(["--log-level", "debug", *args])
        out, err = capsys.readouterr()
        return code, out, err

    yield run
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_check_config_never_shows_a_secret(
    tmp_path: Path, certs: Certs, run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    files = secret_files(tmp_path)
    names = ("refused", "unauthorized", "untrusted", "slow", "echo")
    urls = {n: f"http://127.0.0.1:1/{n}" for n in names}
    web = tmp_path / "web.yml"
    web.write_text(yaml.safe_dump({"basic_auth_users": {"prometheus": WEB_HASH}}))
    config: dict[str, Any] = {
        "storage_url": "postgresql+asyncpg://spectax:CANARY-db-inline@127.0.0.1:5432/spectax",
        "web_config_file": str(web),
        "endpoints": endpoints(urls, files, certs.ca),
    }
    path = tmp_path / "ok.yml"
    path.write_text(yaml.safe_dump(config))
    code, out, err = run_cli("check-config", str(path))
    assert code == 0, err
    assert "sends: bearer token (values not shown)" in out
    assert_clean("check-config output", out + err)

    # Invalid files: every problem listed, no value echoed. Schema problems first ...
    bad = dict(config)
    bad["endpoints"] = [
        {"name": "x", "url": "http://h:1", "bearer_token": ["CANARY-in-a-list"]},
        {
            "name": "y",
            "url": "http://h:2",
            "basic_auth": {"username": "u", "password": "CANARY-p", "extra": "CANARY-e"},
        },
    ]
    path.write_text(yaml.safe_dump(bad))
    code, out, err = run_cli("check-config", str(path))
    assert code == 2
    assert "endpoints[0].bearer_token: Input should be a valid string" in err
    assert "endpoints[1].basic_auth.extra: unknown key" in err
    assert_clean("check-config errors", out + err)
    # ... then the credentials that cannot be resolved.
    bad = dict(config)
    bad["storage_url"] = "${SPECTAX_TEST_DB}"
    bad["storage_url_file"] = str(files["db"])
    bad["endpoints"] = [
        {**endpoints(urls, files, certs.ca)[0], "bearer_token_file": str(files["bearer"])},
        {"name": "z", "url": "http://h:3", "bearer_token_file": "/nonexistent/token"},
    ]
    path.write_text(yaml.safe_dump(bad))
    code, out, err = run_cli("check-config", str(path))
    assert code == 2
    assert "endpoints[0].bearer_token_file: give the value or the _file" in err
    assert "endpoints[1].bearer_token_file: cannot read /nonexistent/token" in err
    assert "storage_url_file: give the value or the _file" in err
    assert_clean("check-config errors", out + err)

    path.write_text(yaml.safe_dump(config))
    web.write_text(yaml.safe_dump({"basic_auth_users": {"prometheus": "CANARY-not-a-hash"}}))
    code, out, err = run_cli("check-config", str(path))
    assert code == 2 and "not a bcrypt hash" in err
    assert_clean("check-config web config errors", out + err)


@pytest.mark.parametrize("log_format", ["json"])
async def test_daemon_never_shows_a_secret(tmp_path: Path, certs: Certs, log_format: str) -> None:
    files = secret_files(tmp_path)
    plain, tls = Targets(), Targets()
    authorized: list[str] = []

    async def unauthorized(request: web.Request) -> web.Response:
        authorized.append(request.headers.get("Authorization", ""))
        return web.Response(status=401, text=f"bad token {request.headers.get('Authorization')}")

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(3)  # past the 1 s scrape timeout
        return web.Response(text="")

    async def echo(request: web.Request) -> web.Response:
        received = request.headers.get("Authorization", "")
        return web.Response(text=f'vllm:generation_tokens_total{{model_name="m"}} {received}\n')

    async def fine(request: web.Request) -> web.Response:
        return web.Response(text="# nothing\n")

    plain.add("unauthorized", unauthorized)
    plain.add("slow", slow)
    plain.add("echo", echo)
    tls.add("untrusted", fine)
    import ssl

    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(certs.rogue_cert, certs.rogue_key)  # not for 127.0.0.1, other CA
    await plain.start()
    await tls.start(server)
    urls = {
        "refused": f"http://127.0.0.1:{free_port()}/metrics",
        "unauthorized": plain.url("unauthorized"),
        "untrusted": tls.url("untrusted", "https"),
        "slow": plain.url("slow"),
        "echo": plain.url("echo"),
    }
    web_config = tmp_path / "web.yml"
    web_config.write_text(yaml.safe_dump({"basic_auth_users": {"prometheus": WEB_HASH}}))
    port = free_port()
    config = write_config(tmp_path, port, endpoints(urls, files, certs.ca), window="2s")
    spectax = Spectax(
        config,
        port,
        global_args=("--log-level", "debug", "--log-format", log_format),
        run_args=("--web.config.file", str(web_config)),
        env=ENV,
    )
    await spectax.start()
    outputs: dict[str, str | bytes] = {}
    try:
        spectax.auth = basic_auth_header("prometheus", WEB_PASSWORD)
        await spectax.wait_for(
            lambda m: all(
                value(m, "spectax_scrape_failures_total", endpoint=e, reason=r)
                for e, r in (
                    ("refused", "connection"),
                    ("unauthorized", "http_status"),
                    ("untrusted", "connection"),
                    ("slow", "timeout"),
                    ("echo", "parse"),
                )
            )
        )
        assert authorized and authorized[-1] == "Bearer CANARY-bearer-file"  # it was sent
        _, outputs["/metrics"] = await spectax.get("/metrics")
        _, outputs["landing page"] = await spectax.get("/")
        assert "malformed /metrics page" in str(outputs["landing page"])
        # The runbook, rendered on its first read: Markdown logs at debug level as it loads,
        # which the check below relies on (spectax itself says little at debug)
        status, outputs["runbook"] = await spectax.get("/runbook")
        assert status == 200
        spectax.auth = basic_auth_header("prometheus", "CANARY-wrong-password")
        status, outputs["/metrics, wrong password"] = await spectax.get("/metrics")
        assert status == 401
        spectax.auth = basic_auth_header("prometheus", WEB_PASSWORD)
        config.write_text(config.read_text().replace("scrape_timeout", "scrape_timeoutt"))
        status, outputs["/-/reload answer"] = await spectax.post("/-/reload")
        assert status == 500
        await asyncio.sleep(1)
    finally:
        assert await spectax.stop() == 0
        await plain.stop()
        await tls.stop()
    outputs["stdout"] = spectax.stdout.read_bytes()
    outputs["stderr"] = spectax.stderr.read_bytes()
    assert b"endpoint echo: scrape failed (parse)" in outputs["stderr"]
    assert b"DEBUG" in outputs["stderr"] or b'"level": "debug"' in outputs["stderr"]
    for path in (tmp_path / "state").rglob("*"):
        if path.is_file():
            outputs[f"store file {path.name}"] = path.read_bytes()
    assert any(name.startswith("store file spectax.sqlite") for name in outputs)
    for where, data in outputs.items():
        assert_clean(where, data)


async def test_database_password_stays_out_of_the_log(tmp_path: Path) -> None:
    """An unreachable PostgreSQL, its URL with a password (inline or from a file)."""
    files = secret_files(tmp_path)
    for storage in ({"storage_url_file": str(files["db"])},):
        port = free_port()
        config = write_config(
            tmp_path, port, [{"name": "e", "url": "http://127.0.0.1:1/metrics"}], **storage
        )
        env = {
            **ENV,
            "SPECTAX_TEST_DB": f"postgresql+asyncpg://u:CANARY-db-env@127.0.0.1:{free_port()}/x",
        }
        spectax = Spectax(config, port, global_args=("--log-level", "debug"), env=env)
        await spectax.start()
        try:
            await spectax.wait_log("store:")
            _, page = await spectax.get("/metrics")
            assert_clean("/metrics", page)
        finally:
            assert await spectax.stop() == 0
        assert_clean("log", spectax.log + spectax.stdout.read_text())
        spectax.stderr.unlink()
