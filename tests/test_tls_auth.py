"""TLS and basic auth: spectax's own server (`--web.config.file`) and scrapes of protected targets.

Real servers and clients on loopback, with certificates generated here: TLS, mutual TLS
(required and optional), allowed client SANs, the minimum version, and right, wrong,
missing and unknown-user passwords. The web config file is the exporter-toolkit format.
"""

from __future__ import annotations

import asyncio
import signal
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import bcrypt
import pytest
import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry

from e2e import Spectax, free_port, run_spectax, value, wait_until, write_config
from ops_helpers import Certs, Targets, client_context, make_certs
from spectax import web as server
from spectax import webserver
from spectax.config import ConfigError, load_config
from spectax.credentials import basic_auth_header
from spectax.scrape import ScrapeError, fetch
from spectax.web import WebGuard, make_app
from spectax.webconfig import WebConfigError, load_web_config

PASSWORD = "correct horse battery staple"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": basic_auth_header(user, password)}


def web_config(tmp_path: Path, content: dict[str, Any], name: str = "web.yml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(content))
    return path


def tls(certs: Certs, **extra: Any) -> dict[str, Any]:
    return {"cert_file": str(certs.server_cert), "key_file": str(certs.server_key), **extra}


# ------------------------------------------------------------------ the file format


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ({"tls_server_config": {"cert_file": "x"}, "basic_auth": {}}, "basic_auth: unknown key"),
        ({"tls_server_config": {"cert_fil": "x"}}, "tls_server_config.cert_fil: unknown key"),
        ({"http_server_config": {"http3": True}}, "http_server_config.http3: unknown key"),
        ({"tls_server_config": {"cert_file": "{crt}"}}, "key_file: missing"),
        ({"tls_server_config": {"key_file": "{key}"}}, "cert_file: missing"),
        (
            {
                "tls_server_config": {
                    "cert_file": "{crt}",
                    "key_file": "{key}",
                    "client_ca_file": "{ca}",
                }
            },
            "client_ca_file: given without a client_auth_type",
        ),
        (
            {
                "tls_server_config": {
                    "cert_file": "{crt}",
                    "key_file": "{key}",
                    "client_auth_type": "RequireAndVerifyClientCert",
                }
            },
            "needs the CA of the client certificates",
        ),
        (
            {
                "tls_server_config": {
                    "cert_file": "{crt}",
                    "key_file": "{key}",
                    "client_auth_type": "RequestClientCert",
                    "client_ca_file": "{ca}",
                }
            },
            "is not supported by spectax",
        ),
        (
            {
                "tls_server_config": {
                    "cert_file": "{crt}",
                    "key_file": "{key}",
                    "min_version": "TLS14",
                }
            },
            "min_version",
        ),
        (
            {
                "tls_server_config": {
                    "cert_file": "{crt}",
                    "key_file": "{key}",
                    "cipher_suites": ["TLS_RSA_WITH_RC4_128_SHA"],
                }
            },
            "unknown suite",
        ),
        (
            {"tls_server_config": {"cert_file": "{crt}", "key_file": "{ca}"}},
            "cannot load the certificate and key",
        ),
        (
            {"tls_server_config": {"cert_file": "/nonexistent.crt", "key_file": "{key}"}},
            "cannot load",
        ),
        ({"basic_auth_users": {"alice": "plaintext-password"}}, "alice: not a bcrypt hash"),
        ({"http_server_config": {"headers": {"Server": "x"}}}, "a header spectax may not set"),
    ],
)
def test_bad_web_configs_are_refused_with_the_reason(
    tmp_path: Path, certs: Certs, content: dict[str, Any], problem: str
) -> None:
    text = yaml.safe_dump(content)
    for key, path in (
        ("{crt}", certs.server_cert),
        ("{key}", certs.server_key),
        ("{ca}", certs.ca),
    ):
        text = text.replace(key, str(path))
    path = tmp_path / "web.yml"
    path.write_text(text)
    with pytest.raises(WebConfigError) as error:
        load_web_config(path)
    assert problem in str(error.value)
    assert "plaintext-password" not in str(error.value)


def test_an_empty_tls_section_means_plain_http(tmp_path: Path) -> None:
    config = load_web_config(web_config(tmp_path, {"tls_server_config": {}}))
    assert config.ssl is None and config.users == {}


# ------------------------------------------------------------------ in-process servers


@pytest.fixture
async def serve() -> AsyncIterator[Any]:
    servers: list[webserver.WebServer] = []

    async def start(config_path: Path, **limits: Any) -> tuple[str, WebGuard]:
        """`limits` go to `start_server` (max_connections, header_timeout)."""
        guard = WebGuard(load_web_config(config_path))
        app = make_app(
            CollectorRegistry(), lambda: True, lambda: [], middlewares=[guard.middleware]
        )
        running = await webserver.start_server(
            app, "127.0.0.1", 0, guard.server_ssl, shutdown_timeout=0.2, **limits
        )
        servers.append(running)
        port = running.address[1]
        return f"{'https' if guard.tls else 'http'}://127.0.0.1:{port}", guard

    yield start
    for running in servers:
        await running.close()


async def get(url: str, source: str = "127.0.0.1", **kwargs: Any) -> int:
    """GET /-/healthy from the loopback address `source` (127.0.0.2 is another client)."""
    async with (
        aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=5),
            connector=aiohttp.TCPConnector(local_addr=(source, 0)),
        ) as session,
        session.get(f"{url}/-/healthy", **kwargs) as response,
    ):
        await response.read()
        return response.status


async def refused(url: str, **kwargs: Any) -> bool:
    try:
        await get(url, **kwargs)
    except (aiohttp.ClientError, ssl.SSLError, ConnectionError):
        return True
    return False


async def test_tls_server(tmp_path: Path, certs: Certs, serve: Any) -> None:
    url, _ = await serve(web_config(tmp_path, {"tls_server_config": tls(certs)}))
    assert await get(url, ssl=client_context(certs.ca)) == 200
    assert await refused(url, ssl=client_context(certs.other_ca))  # unknown issuer
    assert await refused(url.replace("https", "http"))  # plain HTTP on the TLS port


async def test_min_version(tmp_path: Path, certs: Certs, serve: Any) -> None:
    url, _ = await serve(
        web_config(tmp_path, {"tls_server_config": tls(certs, min_version="TLS13")})
    )
    old = client_context(certs.ca)
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    assert await refused(url, ssl=old)
    assert await get(url, ssl=client_context(certs.ca)) == 200


async def test_mutual_tls_required(tmp_path: Path, certs: Certs, serve: Any) -> None:
    config = tls(certs, client_auth_type="RequireAndVerifyClientCert", client_ca_file=str(certs.ca))
    url, _ = await serve(web_config(tmp_path, {"tls_server_config": config}))
    good = client_context(certs.ca, certs.client_cert, certs.client_key)
    assert await get(url, ssl=good) == 200
    assert await refused(url, ssl=client_context(certs.ca))  # no client certificate
    rogue = client_context(certs.ca, certs.rogue_cert, certs.rogue_key)
    assert await refused(url, ssl=rogue)  # a certificate from another CA


async def test_mutual_tls_optional_and_allowed_sans(
    tmp_path: Path, certs: Certs, serve: Any
) -> None:
    optional = tls(certs, client_auth_type="VerifyClientCertIfGiven", client_ca_file=str(certs.ca))
    url, _ = await serve(web_config(tmp_path, {"tls_server_config": optional}, "optional.yml"))
    assert await get(url, ssl=client_context(certs.ca)) == 200
    rogue = client_context(certs.ca, certs.rogue_cert, certs.rogue_key)
    assert await refused(url, ssl=rogue)

    good = client_context(certs.ca, certs.client_cert, certs.client_key)
    for allowed, status in ((["prometheus.test"], 200), (["someone.else"], 403)):
        config = tls(
            certs,
            client_auth_type="RequireAndVerifyClientCert",
            client_ca_file=str(certs.ca),
            client_allowed_sans=allowed,
        )
        url, _ = await serve(web_config(tmp_path, {"tls_server_config": config}, "sans.yml"))
        assert await get(url, ssl=good) == status


async def test_basic_auth_right_wrong_missing_unknown(
    tmp_path: Path, serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks: list[bytes] = []
    real = server._checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        checks.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(server, "_checkpw", counting)
    url, _ = await serve(web_config(tmp_path, {"basic_auth_users": {"prometheus": HASH}}))
    assert await get(url, headers=basic("prometheus", PASSWORD)) == 200
    assert await get(url, headers=basic("prometheus", PASSWORD)) == 200
    assert len(checks) == 1  # the second request was answered from the cache
    assert await get(url, headers=basic("prometheus", "wrong")) == 401
    assert await get(url) == 401
    assert await get(url, headers=basic("mallory", PASSWORD)) == 401
    assert checks[-1] == server._FAKE_HASH  # unknown users cost a bcrypt check too
    assert await get(url, headers=basic("prometheus", "x" * 100)) == 401
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{url}/metrics", headers={"Authorization": "Basic !!notbase64"}) as r,
    ):
        assert r.status == 401
        assert r.headers["WWW-Authenticate"] == "Basic"


async def test_bcrypt_does_not_block_the_event_loop(tmp_path: Path, serve: Any) -> None:
    """A costly hash is checked in a thread: /-/healthy of another server stays responsive."""
    slow = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(12)).decode()
    url, _ = await serve(web_config(tmp_path, {"basic_auth_users": {"p": slow}}))
    free, _ = await serve(web_config(tmp_path, {}, "empty.yml"))
    login = asyncio.create_task(get(url, headers=basic("p", PASSWORD)))
    await asyncio.sleep(0.02)
    started = asyncio.get_running_loop().time()
    assert await get(free) == 200
    assert asyncio.get_running_loop().time() - started < 0.15
    assert await login == 200


# ------------------------------------------------------------------ the real process


@pytest.mark.e2e
async def test_spectax_run_with_web_config_mtls_and_basic_auth(
    tmp_path: Path, certs: Certs
) -> None:
    targets = Targets()
    targets.add_pages("vllm")
    await targets.start()
    port = free_port()
    web = web_config(
        tmp_path,
        {
            "tls_server_config": tls(
                certs, client_auth_type="RequireAndVerifyClientCert", client_ca_file=str(certs.ca)
            ),
            "basic_auth_users": {"prometheus": HASH},
        },
    )
    config = write_config(tmp_path, port, [{"name": "vllm", "url": targets.url("vllm")}])
    spectax = Spectax(config, port, run_args=("--web.config.file", str(web)), scheme="https")
    spectax.ssl = client_context(certs.ca, certs.client_cert, certs.client_key)
    await spectax.start()
    try:
        spectax.auth = basic_auth_header("prometheus", PASSWORD)
        m = await spectax.wait_for(lambda m: value(m, "spectax_endpoint_up", endpoint="vllm"))
        assert value(m, "spectax_config_last_reload_successful") == 1
        spectax.auth = basic_auth_header("prometheus", "wrong")
        assert (await spectax.get())[0] == 401
        spectax.auth = None
        assert (await spectax.get("/"))[0] == 401
        spectax.auth = basic_auth_header("prometheus", PASSWORD)
        with pytest.raises((aiohttp.ClientError, ssl.SSLError)):
            await spectax.get(ssl=client_context(certs.ca))  # no client certificate
    finally:
        assert await spectax.stop() == 0
        await targets.stop()
    assert "Traceback" not in spectax.log


# ------------------------------------------------------------------ toward targets


def endpoint_settings(tmp_path: Path, **endpoint: Any) -> Any:
    config = {"endpoints": [{"name": "t", "url": "https://127.0.0.1:1/metrics", **endpoint}]}
    path = tmp_path / "c.yml"
    path.write_text(yaml.safe_dump(config))
    return load_config(path)


async def test_scrapes_send_bearer_token_basic_auth_and_trust_the_ca(
    tmp_path: Path, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(certs.server_cert, certs.server_key)
    server_context.load_verify_locations(certs.ca)
    server_context.verify_mode = ssl.CERT_OPTIONAL
    targets = Targets()
    expected: dict[str, str] = {}

    async def protected(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != expected["auth"]:
            return web.Response(status=401)
        return web.Response(text="# ok\n")

    targets.add("p", protected)
    await targets.start(server_context)
    url = targets.url("p", "https")
    token_file = tmp_path / "token"
    token_file.write_text("file-token\n")
    password_file = tmp_path / "password"
    password_file.write_text("pw-from-file")
    monkeypatch.setenv("SPECTAX_TEST_TOKEN", "env-token")
    monkeypatch.setenv("CREDS", str(tmp_path))
    trust = {"ca_file": str(certs.ca)}
    cases = [
        ({"bearer_token": "inline-token"}, "Bearer inline-token"),
        ({"bearer_token": "${SPECTAX_TEST_TOKEN}"}, "Bearer env-token"),
        ({"bearer_token_file": "${CREDS}/token"}, "Bearer file-token"),
        (
            {"basic_auth": {"username": "u", "password_file": str(password_file)}},
            basic_auth_header("u", "pw-from-file"),
        ),
    ]
    try:
        async with aiohttp.ClientSession() as session:
            for endpoint, header in cases:
                settings = endpoint_settings(tmp_path, **endpoint, tls=trust)
                expected["auth"] = header
                auth = settings.target_auth["t"]
                assert await fetch(session, url, 2, 10_000, auth) == "# ok\n"
                expected["auth"] = "something else"
                with pytest.raises(ScrapeError) as error:
                    await fetch(session, url, 2, 10_000, auth)
                assert error.value.reason == "http_status"
            # Without the CA the certificate is not trusted; with skip-verify it is accepted.
            with pytest.raises(ScrapeError) as error:
                await fetch(session, url, 2, 10_000)
            assert error.value.reason == "connection"
            insecure = endpoint_settings(tmp_path, tls={"insecure_skip_verify": True})
            expected["auth"] = ""
            with pytest.raises(ScrapeError):  # no Authorization: 401, but TLS went through
                await fetch(session, url, 2, 10_000, insecure.target_auth["t"])
            client = endpoint_settings(
                tmp_path,
                tls={
                    **trust,
                    "cert_file": str(certs.client_cert),
                    "key_file": str(certs.client_key),
                },
            )
            with pytest.raises(ScrapeError) as error:
                await fetch(session, url, 2, 10_000, client.target_auth["t"])
            assert error.value.reason == "http_status"
    finally:
        await targets.stop()


@pytest.mark.parametrize(
    ("endpoint", "problem"),
    [
        ({"bearer_token": "a", "bearer_token_file": "/x"}, "bearer_token_file: give the value"),
        ({"bearer_token_file": "/nonexistent/token"}, "cannot read /nonexistent/token"),
        ({"bearer_token": "${SPECTAX_SURELY_UNSET}"}, "SPECTAX_SURELY_UNSET is not set"),
        ({"bearer_token_file": "${SPECTAX_SURELY_UNSET}/t"}, "SPECTAX_SURELY_UNSET is not set"),
        ({"bearer_token": "t", "basic_auth": {"username": "u", "password": "p"}}, "not both"),
        ({"basic_auth": {"username": "u", "pasword": "p"}}, "basic_auth.pasword: unknown key"),
        ({"tls": {"ca_file": "/nonexistent.pem"}}, "tls.ca_file: cannot load"),
        ({"tls": {"cert_file": "/x.pem"}}, "cert_file and key_file go together"),
        ({"tls": {"insecure_skip_verify": "maybe"}}, "tls.insecure_skip_verify"),
    ],
)
def test_bad_credentials_are_config_errors(
    tmp_path: Path, endpoint: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ConfigError) as error:
        endpoint_settings(tmp_path, **endpoint)
    assert problem in str(error.value)


def test_empty_secret_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError) as error:
        endpoint_settings(tmp_path, bearer_token_file=str(tmp_path / "empty"))
    assert "is empty" in str(error.value)


async def test_reload_swaps_users_and_certificates(
    tmp_path: Path, certs: Certs, serve: Any
) -> None:
    """What a reload does to the web config: new users at once, new certificate for new
    connections; switching TLS off is refused (it needs a restart)."""
    path = web_config(tmp_path, {"tls_server_config": tls(certs), "basic_auth_users": {"a": HASH}})
    url, guard = await serve(path)
    trust_old = client_context(certs.ca)
    assert await get(url, ssl=trust_old, headers=basic("a", PASSWORD)) == 200

    (tmp_path / "rotated").mkdir()
    rotated = make_certs(tmp_path / "rotated")
    guard.replace(
        load_web_config(
            web_config(
                tmp_path,
                {
                    "tls_server_config": {
                        "cert_file": str(rotated.server_cert),
                        "key_file": str(rotated.server_key),
                    },
                    "basic_auth_users": {"b": HASH},
                },
                "new.yml",
            )
        )
    )
    trust_new = client_context(rotated.ca)
    assert await get(url, ssl=trust_new, headers=basic("b", PASSWORD)) == 200
    assert await get(url, ssl=trust_new, headers=basic("a", PASSWORD)) == 401
    assert await refused(url, ssl=trust_old)  # the old certificate is no longer served
    with pytest.raises(WebConfigError, match="takes a restart"):
        guard.replace(load_web_config(web_config(tmp_path, {}, "plain.yml")))


# ------------------------------------------------------------------ a server held open

PARTIAL_HEADER = b"GET /metrics HTTP/1.1\r\nHost: spectax\r\nX-Padding: " + b"a" * 7000


Held = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def hold(
    port: int,
    context: ssl.SSLContext | None,
    data: bytes = PARTIAL_HEADER,
    source: str = "127.0.0.1",
) -> Held:
    """A connection from `source` that sends `data` (by default an unfinished header) and
    never more; the writer is kept, since a collected StreamWriter closes its connection."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, local_addr=(source, 0)
    )
    writer.write(data)
    await writer.drain()
    return reader, writer


async def closed_by_server(connection: Held) -> bool:
    """True once the server has closed the connection (EOF or a reset)."""
    reader, writer = connection
    try:
        while await reader.read(65536):
            pass
    except (ConnectionError, ssl.SSLError):
        pass
    writer.close()
    return True


@pytest.mark.e2e
async def test_connections_that_never_finish_a_header_are_closed_by_spectax(
    tmp_path: Path, certs: Certs
) -> None:
    """A real spectax over TLS: 40 connections holding 7 KB of an unfinished header and 10
    that never finish the TLS handshake are all closed by spectax within the header timeout
    (they were held for an hour before), and /metrics answers meanwhile."""
    targets = Targets()
    targets.add_pages("vllm")
    await targets.start()
    port = free_port()
    web = web_config(tmp_path, {"tls_server_config": tls(certs)})
    config = write_config(tmp_path, port, [{"name": "vllm", "url": targets.url("vllm")}])
    spectax = Spectax(config, port, run_args=("--web.config.file", str(web)), scheme="https")
    spectax.ssl = client_context(certs.ca)
    await spectax.start()
    try:
        await spectax.wait_for(lambda m: value(m, "spectax_endpoint_up", endpoint="vllm"))
        context = client_context(certs.ca)
        # from two addresses: one holds at most webserver.MAX_PER_ADDRESS
        held = [await hold(port, context, source=f"127.0.0.{1 + i % 2}") for i in range(40)]
        held += [
            await hold(port, None, b"\x16\x03\x01", "127.0.0.3") for _ in range(10)
        ]  # half a hello
        status, _ = await spectax.get()
        assert status == 200
        bound = webserver.HEADER_TIMEOUT + 10  # the timeout, and room for a loaded machine
        done = await asyncio.wait_for(asyncio.gather(*map(closed_by_server, held)), bound)
        assert all(done)
        assert (await spectax.get())[0] == 200
    finally:
        assert await spectax.stop() == 0
        await targets.stop()
    assert "Traceback" not in spectax.log


async def test_an_unfinished_plain_http_header_is_closed_after_the_header_timeout(
    tmp_path: Path, serve: Any
) -> None:
    url, _ = await serve(web_config(tmp_path, {}), header_timeout=0.5)
    port = int(url.rsplit(":", 1)[1])
    held = [await hold(port, None, source=f"127.0.0.{1 + i % 2}") for i in range(50)]
    assert await get(url, "127.0.0.3") == 200
    assert all(await asyncio.wait_for(asyncio.gather(*map(closed_by_server, held)), 10))


async def test_connections_past_the_cap_are_closed_at_once_and_the_cap_frees_up(
    tmp_path: Path, certs: Certs, serve: Any
) -> None:
    """Past `max_connections`, a new connection is closed without waiting; once the held ones
    are gone (handshakes that time out included) the server takes connections again."""
    url, _ = await serve(
        web_config(tmp_path, {"tls_server_config": tls(certs)}),
        max_connections=6,
        header_timeout=0.5,
    )
    port = int(url.rsplit(":", 1)[1])
    context = client_context(certs.ca)
    held = [await hold(port, context) for _ in range(3)]
    held += [await hold(port, None, b"\x16\x03\x01") for _ in range(3)]  # stuck handshakes
    assert await refused(url, ssl=context)  # the seventh
    await asyncio.wait_for(asyncio.gather(*map(closed_by_server, held)), 10)

    async def served() -> bool:
        return not await refused(url, ssl=context)

    await wait_until(served, 10, "the server to take connections again")


async def held_or_refused(port: int, context: ssl.SSLContext, source: str) -> Held | None:
    """A held connection from `source`, or None when the server closed it at accept."""
    try:
        held = await hold(port, context, source=source)
    except (ConnectionError, ssl.SSLError, OSError):
        return None
    reader, _ = held
    try:  # past a cap the server closes at once: the TLS handshake itself fails, or EOF
        await asyncio.wait_for(reader.read(1), 0.2)
    except TimeoutError:
        return held  # still open: held
    except (ConnectionError, ssl.SSLError):
        pass
    held[1].close()
    return None


async def test_one_address_holds_at_most_its_share_and_another_always_gets_in(
    tmp_path: Path, certs: Certs, serve: Any
) -> None:
    """Slowloris from one address (the issue: 2,000 unfinished headers filled all 256 places
    and a normal client got 0 of 19 answers): the defaults let 127.0.0.1 hold 32 and no
    more, and 127.0.0.2 is answered every time while they are held."""
    url, _ = await serve(web_config(tmp_path, {"tls_server_config": tls(certs)}), header_timeout=30)
    port, context = int(url.rsplit(":", 1)[1]), client_context(certs.ca)
    flood = await asyncio.gather(*(held_or_refused(port, context, "127.0.0.1") for _ in range(300)))
    held = [connection for connection in flood if connection is not None]
    assert len(held) == webserver.MAX_PER_ADDRESS
    answers = [await get(url, "127.0.0.2", ssl=context) for _ in range(10)]
    assert answers == [200] * 10
    for _, writer in held:
        writer.close()


def test_connections_are_counted_per_ipv4_address_and_per_ipv6_64() -> None:
    address = webserver.client_address
    assert address(("127.0.0.2", 5000)) == "127.0.0.2"
    assert address(("::ffff:10.0.0.1", 5000, 0, 0)) == "10.0.0.1"  # a dual-stack socket
    one = address(("2001:db8:1:2:aaaa::1", 5000, 0, 0))
    assert one == address(("2001:db8:1:2:ffff::9", 6000, 0, 0)) == "2001:db8:1:2::/64"
    assert address(("2001:db8:1:3::1", 5000, 0, 0)) != one
    assert address(("fe80::1%lo", 5000, 0, 1)) == "fe80::/64"


async def test_the_last_places_go_to_addresses_that_hold_none(
    tmp_path: Path, certs: Certs, serve: Any
) -> None:
    """8 places, 3 per address, 2 reserved: two flooding addresses take the 6 shared ones; a
    third address gets one reserved place (not a second), a fourth the last one, a fifth
    none; once one flood is closed, its address gets in again."""
    url, _ = await serve(
        web_config(tmp_path, {"tls_server_config": tls(certs)}),
        max_connections=8,
        max_per_address=3,
        reserved=2,
        header_timeout=30,
    )
    port, context = int(url.rsplit(":", 1)[1]), client_context(certs.ca)

    async def count(source: str, tries: int) -> list[Held]:
        attempts = [await held_or_refused(port, context, source) for _ in range(tries)]
        return [connection for connection in attempts if connection is not None]

    first, second = await count("127.0.0.1", 5), await count("127.0.0.2", 5)
    assert (len(first), len(second)) == (3, 3)
    third = await count("127.0.0.3", 3)
    assert len(third) == 1
    assert len(await count("127.0.0.4", 1)) == 1
    assert await count("127.0.0.5", 1) == []
    for _, writer in first:
        writer.close()

    async def served() -> bool:
        return await get(url, "127.0.0.5", ssl=context) == 200

    await wait_until(served, 10, "a place to free up")


# ------------------------------------------------------------------ keys and auth on reload


def encrypted_key(certs: Certs, directory: Path) -> Path:
    """The server key, protected by a pass phrase."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(certs.server_key.read_bytes(), password=None)
    path = directory / "encrypted.key"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"a pass phrase"),
        )
    )
    return path


@pytest.mark.e2e
async def test_an_encrypted_key_is_refused_at_check_config_and_start_without_a_prompt(
    tmp_path: Path, certs: Certs
) -> None:
    key = encrypted_key(certs, tmp_path)
    inline = {"cert": certs.server_cert.read_text(), "key": key.read_text()}
    for content in (tls(certs, key_file=str(key)), inline):
        with pytest.raises(WebConfigError, match="the key is encrypted") as error:
            load_web_config(web_config(tmp_path, {"tls_server_config": content}))
        assert "openssl pkey" in str(error.value)
    web = web_config(tmp_path, {"tls_server_config": tls(certs, key_file=str(key))})
    config = write_config(tmp_path, free_port(), [{"name": "x", "url": "http://127.0.0.1:1/"}])
    for command in (
        ["check-config", str(config), "--web.config.file", str(web)],
        ["run", "--config", str(config), "--web.config.file", str(web)],
    ):
        # start_new_session: no terminal for OpenSSL to prompt on
        done = await asyncio.to_thread(run_spectax, *command, timeout=60, start_new_session=True)
        output = done.stdout + done.stderr
        assert done.returncode == 2, output
        assert "the key is encrypted" in output
        assert "PEM pass phrase" not in output and "Traceback" not in output


@pytest.mark.e2e
async def test_a_reload_that_would_turn_basic_auth_off_or_load_an_encrypted_key_is_refused(
    tmp_path: Path, certs: Certs
) -> None:
    """SIGHUP with `basic_auth_users: {}`, without `basic_auth_users`, or with an encrypted
    key: the running web config stays (the password is still needed), the gauge says 0, the
    log says why; a good file afterwards is taken."""
    targets = Targets()
    targets.add_pages("vllm")
    await targets.start()
    port = free_port()
    path = web_config(tmp_path, {"tls_server_config": tls(certs), "basic_auth_users": {"p": HASH}})
    config = write_config(tmp_path, port, [{"name": "vllm", "url": targets.url("vllm")}])
    spectax = Spectax(config, port, run_args=("--web.config.file", str(path)), scheme="https")
    spectax.ssl = client_context(certs.ca)
    spectax.auth = basic_auth_header("p", PASSWORD)
    key = encrypted_key(certs, tmp_path)
    await spectax.start()
    try:
        await spectax.wait_for(lambda m: value(m, "spectax_endpoint_up", endpoint="vllm"))
        await spectax.wait_ready()  # scraping begins before start-up has ended
        for bad, reason in (
            ({"tls_server_config": tls(certs), "basic_auth_users": {}}, "basic auth off"),
            ({"tls_server_config": tls(certs)}, "basic auth off"),
            (
                {"tls_server_config": tls(certs, key_file=str(key)), "basic_auth_users": {}},
                "the key is encrypted",
            ),
        ):
            await spectax.wait_for(lambda m: value(m, "spectax_config_last_reload_successful"))
            path.write_text(yaml.safe_dump(bad))
            spectax.signal(signal.SIGHUP)
            m = await spectax.wait_for(
                lambda m: value(m, "spectax_config_last_reload_successful") == 0
            )
            assert value(m, "spectax_endpoint_up", endpoint="vllm") == 1
            await spectax.wait_log(reason)
            assert (await spectax.get("/", headers={}))[0] == 401  # auth is still on
            path.write_text(
                yaml.safe_dump({"tls_server_config": tls(certs), "basic_auth_users": {"p": HASH}})
            )
            spectax.signal(signal.SIGHUP)
            await spectax.wait_for(lambda m: value(m, "spectax_config_last_reload_successful"))
    finally:
        assert await spectax.stop() == 0
        await targets.stop()
    assert "Traceback" not in spectax.log
    assert "restart spectax to run without basic auth" in spectax.log
