"""spectax's own HTTP GET for scrapes (http_get.py, issue 31), through scrape.fetch, against
real servers on loopback that answer byte by byte as a test needs: chunked, gzip and
deflate, a gzip bomb, redirects, a trickling head, a reset mid-body, HTTP/1.0 read until
close, TLS with the tests' CA and client certificates, names and IPv6 literals. Every case
runs on asyncio's loop, the daemon's (uvloop was measured and not adopted: bench/README.md,
"Issue 31, the monitor's path").
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
import ssl
import struct
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ops_helpers import Certs, client_context, make_certs
from spectax import __version__, http_get
from spectax.credentials import TargetAuth, basic_auth_header
from spectax.health import ScrapeError
from spectax.scrape import fetch

PAGE = b'# HELP vllm:x x\nvllm:generation_tokens_total{model_name="m"} 1\n' * 200
LOOPS = ["asyncio"]
Answer = Callable[[bytes, asyncio.StreamWriter], Awaitable[None]]


def run(loop: str, test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    assert loop == "asyncio"
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        runner.run(test())


@dataclass
class Server:
    port: int
    host: str = "127.0.0.1"
    requests: list[bytes] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)  # a client hung up

    def url(self, path: str = "/metrics", scheme: str = "http") -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}{path}"

    def header(self, name: str, request: int = -1) -> str | None:
        for line in self.requests[request].decode().split("\r\n")[1:]:
            key, _, value = line.partition(":")
            if key.lower() == name.lower():
                return value.strip()
        return None


@contextlib.asynccontextmanager
async def serve(
    answer: Answer, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None
) -> AsyncIterator[Server]:
    """A server that reads each request's head, lets `answer` write what it likes, then
    waits for the client to hang up (and records that it did)."""
    server: Server
    handlers: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            server.requests.append(await reader.readuntil(b"\r\n\r\n"))
            await answer(server.requests[-1], writer)
            await writer.drain()
            while await reader.read(65536):
                pass
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError, RuntimeError):
            pass  # the client hung up (uvloop: RuntimeError on writing to a closed transport)
        finally:
            writer.transport.abort()
        server.closed.set()

    listening = await asyncio.start_server(handle, host, 0, ssl=tls)
    server = Server(listening.sockets[0].getsockname()[1], host)
    try:
        yield server
    finally:
        listening.close()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)


def answer_with(*pieces: bytes) -> Answer:
    """Writes each piece on its own (so the client sees the answer in several reads)."""

    async def answer(request: bytes, writer: asyncio.StreamWriter) -> None:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.001)

    return answer


def head(*lines: str) -> bytes:
    return ("\r\n".join(("HTTP/1.1 200 OK", *lines)) + "\r\n\r\n").encode()


async def failure(url: str, timeout: float = 5.0, **kwargs: Any) -> ScrapeError:
    with pytest.raises(ScrapeError) as error:
        await fetch(None, url, timeout, kwargs.pop("max_bytes", 1 << 20), **kwargs)
    return error.value


@pytest.mark.parametrize("loop", LOOPS)
def test_a_page_with_content_length_and_the_request_that_asked_for_it(loop: str) -> None:
    async def test() -> None:
        answer = answer_with(head(f"Content-Length: {len(PAGE)}"), PAGE[:100], PAGE[100:])
        async with serve(answer) as server:
            auth = TargetAuth({"Authorization": "Bearer t0ken"})
            text = await fetch(None, server.url("/metrics?a=1&b=%20"), 5.0, 1 << 20, auth)
            assert text == PAGE.decode()
            assert server.requests[0].startswith(b"GET /metrics?a=1&b=%20 HTTP/1.1\r\n")
            assert server.header("Host") == f"127.0.0.1:{server.port}"
            assert server.header("User-Agent") == f"spectax/{__version__}"
            assert server.header("Accept") == "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"
            assert server.header("Authorization") == "Bearer t0ken"
            assert server.header("Connection") == "close"
            assert server.header("Accept-Encoding") is None
            await asyncio.wait_for(server.closed.wait(), 5)  # the client hung up

    run(loop, test)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_chunked_page_with_extensions_and_trailers(loop: str) -> None:
    async def test() -> None:
        pieces = [head("Transfer-Encoding: chunked")]
        for start in range(0, len(PAGE), 3000):
            chunk = PAGE[start : start + 3000]
            framed = f"{len(chunk):x};name=value\r\n".encode() + chunk + b"\r\n"
            pieces += [framed[:7], framed[7:]]  # a size line split across reads
        pieces.append(b"0\r\nX-Trailer: 1\r\n\r\n")
        async with serve(answer_with(*pieces)) as server:
            assert await fetch(None, server.url(), 5.0, 1 << 20) == PAGE.decode()
        async with serve(answer_with(head("Transfer-Encoding: chunked"), b"zz\r\n")) as server:
            error = await failure(server.url())
            assert error.reason == "connection" and "chunked body is malformed" in str(error)

    run(loop, test)


@pytest.mark.parametrize("loop", LOOPS)
def test_gzip_and_deflate_bodies_are_undone(loop: str) -> None:
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    bodies = {
        "gzip": gzip.compress(PAGE),
        "deflate": zlib.compress(PAGE),
        "raw deflate": raw_deflate.compress(PAGE) + raw_deflate.flush(),
    }

    async def test() -> None:
        for name, body in bodies.items():
            encoding = name.split()[-1]
            answer = answer_with(
                head(f"Content-Encoding: {encoding}", f"Content-Length: {len(body)}"), body
            )
            async with serve(answer) as server:
                assert await fetch(None, server.url(), 5.0, 1 << 20) == PAGE.decode(), name
        chunked = gzip.compress(PAGE)
        framed = b"".join(
            f"{len(part):x}\r\n".encode() + part + b"\r\n"
            for part in (chunked[:1000], chunked[1000:])
        )
        answer = answer_with(
            head("Content-Encoding: gzip", "Transfer-Encoding: chunked"), framed, b"0\r\n\r\n"
        )
        async with serve(answer) as server:
            assert await fetch(None, server.url(), 5.0, 1 << 20) == PAGE.decode()
        cut = gzip.compress(PAGE)[:-20]  # whole as far as Content-Length goes, not as gzip
        answer = answer_with(head("Content-Encoding: gzip", f"Content-Length: {len(cut)}"), cut)
        async with serve(answer) as server:
            error = await failure(server.url())
            assert str(error).endswith("the answer was cut short: the gzip stream ends early")

    run(loop, test)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_gzip_bomb_stops_at_the_cap_without_inflating(loop: str) -> None:
    """200 MB of zeros in ~200 kB of gzip: refused as too large with 1 MB inflated at most."""
    compressor = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    bomb = b"".join(compressor.compress(zeros) for _ in range(200)) + compressor.flush()

    async def test() -> None:
        answer = answer_with(head("Content-Encoding: gzip", f"Content-Length: {len(bomb)}"), bomb)
        async with serve(answer) as server:
            tracemalloc.start()
            try:
                error = await failure(server.url(), max_bytes=1 << 20)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        assert error.reason == "too_large"
        assert peak < 16 << 20, f"{peak / 2**20:.0f} MiB held while refusing a gzip bomb"

    run(loop, test)


@pytest.mark.parametrize("loop", LOOPS)
def test_the_cap_is_checked_on_content_length_first_and_status_before_the_body(
    loop: str,
) -> None:
    async def test() -> None:
        # The head alone: waiting for the body would time out, not refuse it.
        async with serve(answer_with(head("Content-Length: 50000000"))) as server:
            error = await failure(server.url(), timeout=2.0, max_bytes=1 << 20)
            assert error.reason == "too_large"
        big = b"x" * (3 << 20)
        error_page = b"HTTP/1.1 503 Busy\r\n\r\n" + big
        async with serve(answer_with(error_page)) as server:
            error = await failure(server.url(), max_bytes=1 << 20)
            assert (error.reason, str(error)) == ("http_status", f"HTTP 503 from {server.url()}")
        async with serve(answer_with(head(), big)) as server:  # read until close, too big
            assert (await failure(server.url(), max_bytes=1 << 20)).reason == "too_large"

    run(loop, test)


@pytest.mark.parametrize("loop", LOOPS)
def test_an_http_1_0_page_read_until_the_server_closes(loop: str) -> None:
    async def answer(request: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + PAGE[:5000])
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(PAGE[5000:])
        writer.close()

    async def test() -> None:
        async with serve(answer) as server:
            assert await fetch(None, server.url(), 5.0, 1 << 20) == PAGE.decode()

    run(loop, test)


def reset(writer: asyncio.StreamWriter) -> None:
    """Hang up with a TCP reset, not a FIN."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@pytest.mark.parametrize("loop", LOOPS)
def test_a_reset_or_a_close_before_the_end_says_the_answer_was_cut_short(loop: str) -> None:
    async def reset_mid_body(request: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(head("Content-Length: 1000") + b"# 100 bytes")
        await writer.drain()
        await asyncio.sleep(0.05)
        reset(writer)

    async def reset_at_once(request: bytes, writer: asyncio.StreamWriter) -> None:
        reset(writer)

    async def test() -> None:
        async with serve(reset_mid_body) as server:
            error = await failure(server.url())
            assert error.reason == "connection"
            assert str(error) == (
                f"{server.url()}: the answer was cut short: Connection reset by peer "
                "(received 11 bytes, 989 more were announced)"
            )
        async with serve(reset_at_once) as server:
            error = await failure(server.url())
            assert str(error) == f"{server.url()}: 127.0.0.1:{server.port} reset the connection"
        async with serve(closing(head("Content-Length: 1000") + b"# short")) as server:
            error = await failure(server.url())
            assert str(error) == (
                f"{server.url()}: the answer was cut short: received 7 bytes, 993 more were "
                "announced"
            )
        async with serve(closing(b"")) as server:
            error = await failure(server.url())
            assert str(error) == (
                f"{server.url()}: the server closed the connection before it answered"
            )

    run(loop, test)


def closing(answer: bytes) -> Answer:
    async def close(request: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(answer)
        writer.close()

    return close


@pytest.mark.parametrize("loop", LOOPS)
def test_a_trickling_head_times_out_and_its_connection_is_closed(loop: str) -> None:
    async def trickle(request: bytes, writer: asyncio.StreamWriter) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n":
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.05)

    async def test() -> None:
        async with serve(trickle) as server:
            error = await failure(server.url(), timeout=0.3)
            assert (error.reason, str(error)) == (
                "timeout",
                f"no complete answer from {server.url()} within 0.3 s",
            )
            await asyncio.wait_for(server.closed.wait(), 5)  # no connection left behind

    run(loop, test)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_tls_handshake_that_never_ends_times_out_and_its_connection_is_closed(
    loop: str,
) -> None:
    """Cancelled inside the loop's create_connection: the loop's own cleanup must close it."""

    async def test() -> None:
        hung_up = asyncio.Event()

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while await reader.read(65536):  # the ClientHello, never answered
                    pass
            hung_up.set()
            writer.close()

        listening = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = listening.sockets[0].getsockname()[1]
        try:
            error = await failure(f"https://127.0.0.1:{port}/metrics", timeout=0.3)
            assert error.reason == "timeout"
            await asyncio.wait_for(hung_up.wait(), 5)
        finally:
            listening.close()

    run(loop, test)


def redirect(status: int, location: str) -> Answer:
    return answer_with(
        f"HTTP/1.1 {status} Moved\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n".encode()
    )


@pytest.mark.parametrize("loop", LOOPS)
def test_redirects_are_followed_with_the_token_kept_on_the_same_origin_only(loop: str) -> None:
    auth = TargetAuth({"Authorization": "Bearer t0ken"})
    page = answer_with(head(f"Content-Length: {len(PAGE)}"), PAGE)

    async def starlette(request: bytes, writer: asyncio.StreamWriter) -> None:
        if request.startswith(b"GET /metrics/ "):
            await page(request, writer)
        else:  # Starlette's mount answers /metrics with 307 to /metrics/
            await redirect(307, "/metrics/")(request, writer)

    async def test() -> None:
        async with serve(starlette) as server:
            assert await fetch(None, server.url(), 5.0, 1 << 20, auth) == PAGE.decode()
            assert [server.header("Authorization", i) for i in (0, 1)] == ["Bearer t0ken"] * 2
        async with serve(page) as elsewhere, serve(redirect(302, elsewhere.url())) as server:
            assert await fetch(None, server.url(), 5.0, 1 << 20, auth) == PAGE.decode()
            assert server.header("Authorization") == "Bearer t0ken"
            assert elsewhere.header("Authorization") is None  # another port: another origin

    run(loop, test)


@pytest.mark.parametrize("loop", LOOPS)
def test_ten_redirects_in_a_row_are_refused_as_aiohttp_refused_them(loop: str) -> None:
    async def hops(limit: int) -> Answer:
        async def answer(request: bytes, writer: asyncio.StreamWriter) -> None:
            path = request.split(b" ")[1].partition(b"?")[0]
            hop = int(path.rsplit(b"/", 1)[1] or b"0")
            if hop < limit:
                await redirect(308, f"/hop/{hop + 1}?token=secret")(request, writer)
            else:
                await answer_with(head("Content-Length: 5"), b"# ok\n")(request, writer)

        return answer

    async def test() -> None:
        async with serve(await hops(9)) as server:
            assert await fetch(None, server.url("/hop/"), 5.0, 1 << 20) == "# ok\n"
        async with serve(await hops(10)) as server:
            error = await failure(server.url("/hop/"))
            assert len(server.requests) == http_get.MAX_REDIRECTS
            assert str(error) == f"{server.url('/hop/')}: more than 9 redirects in a row"
        async with serve(redirect(302, "ftp://user:pw@host/x")) as server:
            error = await failure(server.url())
            assert "not http or https" in str(error) and "pw" not in str(error)

    run(loop, test)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def server_tls(certs: Certs, client_ca: Path | None = None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.server_cert, certs.server_key)
    if client_ca is not None:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


@pytest.mark.parametrize("loop", LOOPS)
def test_https_with_the_endpoints_ca_client_certificate_or_none(loop: str, certs: Certs) -> None:
    page = answer_with(head("Content-Length: 5"), b"# ok\n")
    trusted = TargetAuth(ssl=client_context(certs.ca))
    with_client = TargetAuth(ssl=client_context(certs.ca, certs.client_cert, certs.client_key))
    unverified = ssl.create_default_context()
    unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE

    async def test() -> None:
        async with serve(page, tls=server_tls(certs)) as server:
            url = server.url(scheme="https")
            assert await fetch(None, url, 5.0, 1 << 20, trusted) == "# ok\n"
            # By name: SNI and the certificate's DNS name, whichever address answers.
            by_name = url.replace("127.0.0.1", "localhost")
            assert await fetch(None, by_name, 5.0, 1 << 20, trusted) == "# ok\n"
            assert await fetch(None, url, 5.0, 1 << 20, TargetAuth(ssl=unverified)) == "# ok\n"
        async with serve(
            closing(b"HTTP/1.0 200 OK\r\n\r\n# ok\n"), tls=server_tls(certs)
        ) as server:
            url = server.url(scheme="https")  # read until the server's close_notify
            assert await fetch(None, url, 5.0, 1 << 20, trusted) == "# ok\n"
            error = await failure(url)  # the system's CAs do not know the tests' CA
            assert error.reason == "connection"
            assert str(error).startswith(
                f"{url}: TLS certificate of 127.0.0.1:{server.port} not accepted: "
                "[SSL: CERTIFICATE_VERIFY_FAILED]"
            )
        async with serve(page, tls=server_tls(certs, client_ca=certs.ca)) as server:
            url = server.url(scheme="https")
            assert await fetch(None, url, 5.0, 1 << 20, with_client) == "# ok\n"
            assert (await failure(url, auth=trusted)).reason == "connection"  # no client cert
        plain = await asyncio.start_server(plain_http, "127.0.0.1", 0)
        port = plain.sockets[0].getsockname()[1]
        error = await failure(f"https://127.0.0.1:{port}/metrics")  # https to plain http
        assert f"TLS handshake with 127.0.0.1:{port} failed" in str(error)
        plain.close()

    run(loop, test)


async def plain_http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A plain HTTP server's answer to a TLS ClientHello."""
    await reader.read(1)
    writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    writer.close()


@pytest.mark.parametrize("loop", LOOPS)
def test_connection_refused_and_an_unknown_name_in_scrape_words(loop: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed at the end of the block: nothing listens

    async def test() -> None:
        url = f"http://user:secret@127.0.0.1:{port}/metrics?token=secret"
        error = await failure(url)
        assert str(error) == (
            f"http://127.0.0.1:{port}/metrics: connection refused "
            f"(nothing listening on 127.0.0.1:{port})"
        )
        error = await failure("http://spectax-no-such-host.invalid/metrics")
        assert str(error).startswith(
            "http://spectax-no-such-host.invalid/metrics: "
            "cannot resolve spectax-no-such-host.invalid (DNS: "
        )

    run(loop, test)


@pytest.mark.parametrize("loop", LOOPS)
def test_user_info_in_the_url_is_sent_as_basic_auth_not_on_the_request_line(loop: str) -> None:
    async def test() -> None:
        async with serve(answer_with(head("Content-Length: 5"), b"# ok\n")) as server:
            url = server.url().replace("http://", "http://user:pa%20ss@")
            assert await fetch(None, url, 5.0, 1 << 20) == "# ok\n"
            assert server.header("Authorization") == basic_auth_header("user", "pa ss")
            assert server.header("Host") == f"127.0.0.1:{server.port}"
            assert b"pa" not in server.requests[0].split(b"\r\n")[0]

    run(loop, test)


@pytest.mark.parametrize("loop", LOOPS)
def test_an_ipv6_literal(loop: str) -> None:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")

    async def test() -> None:
        async with serve(answer_with(head("Content-Length: 5"), b"# ok\n"), host="::1") as server:
            assert await fetch(None, server.url(), 5.0, 1 << 20) == "# ok\n"
            assert server.header("Host") == f"[::1]:{server.port}"

    run(loop, test)


def test_a_name_is_looked_up_once_per_ten_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """2,000 endpoints on names do not call getaddrinfo at every scrape."""
    lookups: list[str] = []
    monkeypatch.setattr(http_get, "_resolved", {})

    async def test() -> None:
        loop = asyncio.get_running_loop()
        real = loop.getaddrinfo

        async def counting(host: Any, *args: Any, **kwargs: Any) -> Any:
            lookups.append(host)
            return await real(host, *args, **kwargs)

        monkeypatch.setattr(loop, "getaddrinfo", counting)
        async with serve(answer_with(head("Content-Length: 5"), b"# ok\n")) as server:
            url = server.url().replace("127.0.0.1", "localhost")
            for _ in range(3):
                assert await fetch(None, url, 5.0, 1 << 20) == "# ok\n"
            assert lookups == ["localhost"]
            for key, (_, addresses) in http_get._resolved.items():  # ten seconds later
                http_get._resolved[key] = (0.0, addresses)
            assert await fetch(None, url, 5.0, 1 << 20) == "# ok\n"
            assert lookups == ["localhost"] * 2
            assert await fetch(None, server.url(), 5.0, 1 << 20) == "# ok\n"  # an IP literal
            assert lookups == ["localhost"] * 2

    run("asyncio", test)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_name_with_several_addresses_is_served_by_the_one_that_answers(
    loop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Addresses tried as aiohttp's connector tries them (happy eyeballs): one refuses,
    the next answers; when all refuse, the error names the host as the URL does."""

    def seed(name: str, port: int, *hosts: str) -> None:
        infos: list[http_get.AddrInfo] = [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", (h, port)) for h in hosts
        ]
        http_get._resolved[(name, port)] = (float("inf"), infos)

    async def test() -> None:
        async with serve(answer_with(head("Content-Length: 5"), b"# ok\n")) as server:
            seed("two.spectax.test", server.port, "127.0.0.2", "127.0.0.1")
            url = f"http://two.spectax.test:{server.port}/metrics"
            assert await fetch(None, url, 5.0, 1 << 20) == "# ok\n"
            assert server.header("Host") == f"two.spectax.test:{server.port}"
            seed("none.spectax.test", server.port, "127.0.0.2", "127.0.0.3")
            error = await failure(url.replace("two", "none"))
            assert str(error).endswith(
                f"connection refused (nothing listening on none.spectax.test:{server.port})"
            )

    monkeypatch.setattr(http_get, "_resolved", {})
    run(loop, test)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_malformed_answer_is_named_without_echoing_the_url(loop: str) -> None:
    async def test() -> None:
        async with serve(answer_with(b"HELLO WORLD\r\n\r\n")) as server:
            url = server.url("/metrics?token=secret")
            error = await failure(url)
            assert str(error) == (
                f"{server.url()}: the answer is not HTTP/1.x (status line 'HELLO WORLD')"
            )

    run(loop, test)


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\nab",  # latin-1's superscript two
        b"HTTP/1.1 20\xb2 OK\r\nContent-Length: 2\r\n\r\nab",
    ],
)
def test_a_number_in_the_head_that_is_no_number_is_a_scrape_error(
    answer: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """str.isdigit() takes the superscripts a latin-1 head can hold, int() does not: the
    scrape fails as a malformed answer (the endpoint down, its failure counted), never with
    a ValueError out of fetch or asyncio's "protocol.data_received() call failed" (review of
    issue 31)."""

    async def test() -> None:
        async with serve(closing(answer)) as server:
            await failure(server.url())

    run("asyncio", test)
    assert "data_received() call failed" not in caplog.text


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.0 200 OK\nContent-Type: text/plain\n\nfoo 1\n",
        b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n3\nfoo\n3\n 1\n\n0\n\n",
    ],
)
def test_a_head_and_chunks_with_bare_lf_line_ends_are_read_as_aiohttp_read_them(
    answer: bytes,
) -> None:
    """RFC 9112 2.2 lets a recipient take a bare LF for a line end, and aiohttp did: an
    exporter written as a shell script (netcat, busybox) scraped before the own client and
    must still (review of issue 31)."""

    async def test() -> None:
        async with serve(closing(answer)) as server:
            assert await fetch(None, server.url(), 5.0, 1 << 20) == "foo 1\n"

    run("asyncio", test)
