"""spectax's own HTTP/1.1 GET, for scrapes: one request on one new connection, page in hand.

Why not aiohttp's client (issue 31): at 2,000 endpoints every 15 s the scrape's GET was
the largest single stage of the daemon's CPU, ~500 µs per page through aiohttp's session,
connector, request and response objects, against ~200 µs for an asyncio Protocol that
writes the request and collects the answer (bench/README.md, "### Issue 31: where a
scrape's CPU goes"). A scrape needs little of a general client: GET only, no cookies, no
keep-alive (scrape.py's `scrape_session` says why), no proxy. What it does need, it keeps
as aiohttp did it: http and https (the endpoint's TLS context, server_hostname), the
Host header with its port, Content-Length, chunked and read-until-close bodies, gzip and
deflate, up to 10 redirects with the Authorization header kept on the same origin only,
basic auth from user info in the URL, names resolved through a 10 s cache, and errors in
the words scrape.py has always shown (`connect_problem`).

Where it differs from aiohttp, on purpose: no Accept-Encoding (scrape.fetch says why); a
server that closes before answering is not asked again (aiohttp retried once, meant for a
kept-alive connection gone stale, which a new connection never is); a gzip or deflate body
that ends before its stream does is refused as cut short (aiohttp returned the part); a
malformed answer or a redirect out of http(s) is named without echoing the URL (aiohttp's
message carried it, query string and all).

The module speaks only asyncio's transport API (`loop.create_connection` and a Protocol),
so it runs unchanged on uvloop. The caller bounds the whole exchange with a timeout; the
connection is closed however the exchange ends (`get_page`'s `finally`).
"""

from __future__ import annotations

import asyncio
import base64
import errno
import functools
import re
import socket
import ssl
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

import aiohappyeyeballs
from yarl import URL

#: As aiohttp's client: the tenth redirect in a row is an error.
MAX_REDIRECTS: Final = 10
REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
#: The status line and headers: aiohttp allowed 8,190 bytes a line; 64 KiB in all is
#: far more than any metrics server sends, and bounds what a hostile one can make us hold.
MAX_HEAD_BYTES: Final = 64 * 1024
#: How long a name's addresses are reused (aiohttp's connector: ttl_dns_cache=10): 2,000
#: endpoints on names then cost one getaddrinfo each per 10 s, not one per scrape.
DNS_CACHE_SECONDS: Final = 10.0
#: As aiohttp's connector: a second address family is tried after 250 ms (RFC 8305).
HAPPY_EYEBALLS_DELAY: Final = 0.25
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


class HttpGetError(Exception):
    """What went wrong, in words an operator acts on. Never the URL (the caller adds it,
    redacted) nor a header's value: nothing here can carry a credential."""


class BodyTooLarge(Exception):
    """The body (after Content-Encoding is undone) passed the caller's cap."""


@dataclass(frozen=True, slots=True)
class Head:
    """A response's status and headers (names lower-cased, repeats joined by ", ")."""

    status: int
    headers: dict[str, str]

    @property
    def content_type(self) -> str:
        """The media type alone, lower-cased; aiohttp's default when the header is missing."""
        value = self.headers.get("content-type")
        if not value:
            return "application/octet-stream"
        return value.partition(";")[0].strip().lower()

    @property
    def content_length(self) -> int | None:
        value = self.headers.get("content-length")
        return int(value) if value is not None and _is_number(value) else None


@functools.cache
def default_tls_context() -> ssl.SSLContext:
    """The system's CAs, host names checked: aiohttp's default for `ssl=True`. Made on the
    first https scrape (loading the CAs takes ~10 ms), then shared."""
    context = ssl.create_default_context()
    context.set_alpn_protocols(("http/1.1",))
    return context


async def get_page(
    url: URL,
    headers: Mapping[str, str],
    tls: ssl.SSLContext | None,
    max_bytes: int,
    check_head: Callable[[Head], None],
) -> bytes:
    """GET `url` on a new connection, following redirects, and return the body once the
    last answer's head has passed `check_head` (which raises to refuse it: its status, its
    type, its length). `tls` is the context for https (None: the default one).

    Raises HttpGetError, BodyTooLarge, or what `check_head` raises; the caller bounds the
    time (`asyncio.timeout`), and a cancelled GET closes its connection too."""
    request_headers = dict(headers)
    for _ in range(MAX_REDIRECTS):
        url, request_headers = _credentials_from_url(url, request_headers)
        exchange = await _connect(url, _request_bytes(url, request_headers), tls, max_bytes)
        try:
            head = await exchange.read_head()
            location = None
            if head.status in REDIRECT_STATUSES:
                location = head.headers.get("location") or head.headers.get("uri")
            if location is None:
                check_head(head)
                return await exchange.read_body()
        finally:
            exchange.close()
        url, request_headers = _redirected(url, location, request_headers)
    raise HttpGetError(f"more than {MAX_REDIRECTS - 1} redirects in a row")


def _credentials_from_url(url: URL, headers: dict[str, str]) -> tuple[URL, dict[str, str]]:
    """User info in the URL becomes basic auth, as aiohttp sent it (an endpoint's own
    Authorization header wins), and never goes on the request line."""
    if url.raw_user is None:
        return url, headers
    if "Authorization" not in headers:
        pair = f"{url.user or ''}:{url.password or ''}".encode()
        headers = {**headers, "Authorization": "Basic " + base64.b64encode(pair).decode()}
    return url.with_user(None), headers


def _redirected(url: URL, location: str, headers: dict[str, str]) -> tuple[URL, dict[str, str]]:
    """Where a redirect leads, and the headers to send there: the Authorization header
    only to the same origin (scheme, host and port), as aiohttp does."""
    try:
        target = url.join(URL(location))
        origin = target.origin()
    except ValueError:
        raise HttpGetError("redirected to a location that is not a URL") from None
    if target.scheme not in _DEFAULT_PORTS:
        raise HttpGetError("redirected to a URL that is not http or https")
    if origin != url.origin():
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
    return target, headers


def _request_bytes(url: URL, headers: Mapping[str, str]) -> bytes:
    """The request: the Host header with its port unless the scheme's default (IPv6 in
    brackets), the path and query as given, and `Connection: close`."""
    host = url.raw_host or ""
    if ":" in host:
        host = f"[{host}]"
    if url.explicit_port is not None and url.explicit_port != _DEFAULT_PORTS.get(url.scheme):
        host = f"{host}:{url.explicit_port}"
    lines = [f"GET {url.raw_path_qs} HTTP/1.1", f"Host: {host}"]
    for name, value in headers.items():
        if "\r" in value or "\n" in value:
            raise HttpGetError(f"the {name} header holds a line break: not sent")
        lines.append(f"{name}: {value}")
    lines.append("Connection: close\r\n\r\n")
    return "\r\n".join(lines).encode("utf-8")


async def _connect(
    url: URL, request: bytes, tls: ssl.SSLContext | None, max_bytes: int
) -> _Exchange:
    """A new connection to the URL's host, the request written on it."""
    loop = asyncio.get_running_loop()
    host = url.raw_host or ""
    port = url.port or _DEFAULT_PORTS.get(url.scheme, 80)
    context = (tls or default_tls_context()) if url.scheme == "https" else None
    server_hostname = host.rstrip(".") if context is not None else None
    exchange = _Exchange(request, max_bytes, loop, f"{host}:{port}")
    addresses = await resolve(loop, host, port)
    try:
        family, *_, address = addresses[0]
        if len(addresses) == 1 and (family != socket.AF_INET6 or not address[3]):
            # One address without an IPv6 scope: the loop's own connect, the cheapest path.
            await loop.create_connection(
                lambda: exchange,
                address[0],
                address[1],
                family=family,
                ssl=context,
                server_hostname=server_hostname,
            )
        else:
            # Several (IPv6 and IPv4, or round robin): aiohttp's way, a race staggered 250 ms.
            sock = await aiohappyeyeballs.start_connection(
                addresses, happy_eyeballs_delay=HAPPY_EYEBALLS_DELAY
            )
            try:
                await loop.create_connection(
                    lambda: exchange, sock=sock, ssl=context, server_hostname=server_hostname
                )
            except BaseException:
                sock.close()
                raise
    except OSError as exc:  # ssl.SSLError is one too
        raise HttpGetError(connect_problem(exc, f"{host}:{port}")) from None
    return exchange


#: What a failed connect's errno means to someone who can go and look.
_CONNECT_ERRNO: Final = {
    errno.ECONNREFUSED: "connection refused (nothing listening on {where})",
    errno.EHOSTUNREACH: "no route to {where} (host unreachable)",
    errno.ENETUNREACH: "no route to {where} (network unreachable)",
    errno.ETIMEDOUT: "no answer from {where} to connect (timed out)",
    errno.ECONNRESET: "{where} reset the connection",
}


def connect_problem(exc: OSError, where: str) -> str:
    """A failed connect (or TLS handshake) to `where` (host:port) in the words scrape.py
    showed when aiohttp made them: "connection refused (nothing listening on
    127.0.0.1:18001)", never "Connect call failed (...)"."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate of {where} not accepted: {exc}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake with {where} failed: {_first_line(exc)}"
    known = _CONNECT_ERRNO.get(exc.errno or 0)
    if known:
        return known.format(where=where)
    return f"cannot connect to {where}: {exc.strerror or _first_line(exc)}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()
    return text[0][:200] if text else ""


# ------------------------------------------------------------------ names


AddrInfo = tuple[int, int, int, str, tuple[Any, ...]]  # getaddrinfo's five-tuple
_resolved: dict[tuple[str, int], tuple[float, list[AddrInfo]]] = {}


async def resolve(loop: asyncio.AbstractEventLoop, host: str, port: int) -> list[AddrInfo]:
    """The host's addresses, an IP literal without a lookup, a name from the cache while
    its DNS_CACHE_SECONDS last. aiohttp's ThreadedResolver's call: getaddrinfo in the
    loop's thread pool, any family, AI_ADDRCONFIG."""
    literal = _ip_literal(host, port)
    if literal is not None:
        return literal
    key = (host, port)
    now = time.monotonic()
    cached = _resolved.get(key)
    if cached is not None and cached[0] > now:
        return cached[1]
    try:
        infos = await loop.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_ADDRCONFIG
        )
    except socket.gaierror as exc:
        raise HttpGetError(f"cannot resolve {host} (DNS: {exc.strerror or exc})") from None
    if not infos:
        raise HttpGetError(f"cannot resolve {host} (DNS: no address)")
    if len(_resolved) > 4096:  # names that left the config: forget the expired ones
        for stale in [k for k, (until, _) in _resolved.items() if until <= now]:
            del _resolved[stale]
    addresses: list[AddrInfo] = [(int(f), int(t), p, c, tuple(a)) for f, t, p, c, a in infos]
    _resolved[key] = (now + DNS_CACHE_SECONDS, addresses)
    return addresses


@functools.lru_cache(maxsize=65536)
def _ip_literal(host: str, port: int) -> list[AddrInfo] | None:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except (OSError, ValueError):  # (ValueError: a NUL in the name)
            continue
        address = (host, port) if family == socket.AF_INET else (host, port, 0, 0)
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", address)]
    return None


# ------------------------------------------------------------------ the answer


_NO_BODY_STATUSES: Final = frozenset({204, 304})
_MAX_CHUNK_LINE: Final = 4096
#: zlib's window bits per Content-Encoding: gzip's header and trailer, or zlib's.
_WBITS: Final = {
    "gzip": 16 + zlib.MAX_WBITS,
    "x-gzip": 16 + zlib.MAX_WBITS,
    "deflate": zlib.MAX_WBITS,
}
_CUT_SHORT: Final = "the answer was cut short: "


class _Exchange(asyncio.Protocol):
    """One GET's connection: writes the request once connected, parses the answer as it
    arrives (head, then a Content-Length, chunked or read-until-close body, decoded and
    capped at `max_bytes` as it comes), and wakes the reader at each step."""

    def __init__(
        self, request: bytes, max_bytes: int, loop: asyncio.AbstractEventLoop, where: str
    ) -> None:
        self._request = request
        self._where = where  # host:port, as the URL names them, for messages
        self._max_bytes = max_bytes
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()  # the head, or chunked framing, not yet parsed
        self._head: Head | None = None
        self._body: list[bytes | bytearray] = []  # joined once, at the end
        self._body_size = 0
        self._framing = ""  # "length", "chunked" or "close"
        self._left = 0  # "length": bytes of the body still to come; "chunked": of the chunk
        self._chunk_crlf = False  # "chunked": the CRLF after a chunk's data is next
        self._trailers = False  # "chunked": the last chunk came, its trailer lines follow
        self._encoding = ""  # Content-Encoding to undo: "", "gzip", "x-gzip" or "deflate"
        self._decoder: zlib._Decompress | None = None
        self._complete = False
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None

    # -------------------------------------------------------------- the caller's side

    async def read_head(self) -> Head:
        while self._head is None and self._error is None:
            await self._wait()
        if self._head is None:
            assert self._error is not None
            raise self._error
        return self._head

    async def read_body(self) -> bytes:
        while not self._complete and self._error is None:
            await self._wait()
        if self._error is not None:
            raise self._error
        if len(self._body) == 1 and isinstance(self._body[0], bytes):
            return self._body[0]  # the usual page, in one read: no copy
        return b"".join(self._body)

    def close(self) -> None:
        """Closes the connection: at once (`abort`) unless the answer came whole."""
        if self._transport is not None and not self._transport.is_closing():
            if self._complete:
                self._transport.close()
            else:
                self._transport.abort()

    async def _wait(self) -> None:
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # -------------------------------------------------------------- the transport's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        if self._complete or self._error is not None:
            return
        try:
            if self._head is None:
                seen = len(self._buffer)  # searched for the head's end already
                if self._buffer:
                    data = bytes(self._buffer + data)
                    self._buffer.clear()
                rest = self._take_head(data, seen)
                if rest is None:  # more of the head to come, or no body
                    return
                data = rest
            if self._framing == "chunked":
                self._buffer += data
                self._take_chunks()
            else:
                self._take_bytes(data)
        except (HttpGetError, BodyTooLarge) as exc:
            self._fail(exc)
        except ValueError as exc:  # a number no check above foresaw: the answer's fault
            self._fail(HttpGetError(f"the answer is malformed: {_first_line(exc)}"))

    def eof_received(self) -> bool | None:
        return None  # the transport closes itself; connection_lost says what it meant

    def connection_lost(self, exc: Exception | None) -> None:
        if self._complete or self._error is not None:
            self._wake()
            return
        if self._head is None:
            if exc is None:
                self._fail(HttpGetError("the server closed the connection before it answered"))
            else:
                problem = (
                    connect_problem(exc, self._where)
                    if isinstance(exc, OSError)
                    else _first_line(exc)
                )
                self._fail(HttpGetError(problem))
        elif self._framing == "close" and exc is None:
            try:
                self._finish()
            except HttpGetError as error:
                self._fail(error)
        else:
            self._fail(HttpGetError(_CUT_SHORT + self._shortfall(exc)))
        self._wake()

    # -------------------------------------------------------------- parsing

    def _take_head(self, data: bytes, seen: int = 0) -> bytes | None:
        """Parses the head once it is all here (skipping any 1xx answers before it); the
        bytes after it when it is and a body follows, else None (what came is kept). The
        first `seen` bytes were searched before, but for an end that the new ones complete:
        a head trickled byte by byte is not searched again from its start each time."""
        while True:
            found = _HEAD_END.search(data, max(0, seen - 3))
            seen = 0
            if found is None:
                if len(data) > MAX_HEAD_BYTES:
                    raise HttpGetError(
                        f"the answer's headers are longer than {MAX_HEAD_BYTES} bytes"
                    )
                self._buffer += data
                return None
            head = _parse_head(data[: found.start()])
            data = data[found.end() :]
            if not 100 <= head.status < 200:
                break
        self._head = head
        self._frame(head)
        self._wake()
        return None if self._complete else data

    def _frame(self, head: Head) -> None:
        """How the body ends, and what encoding to undo, from the head."""
        encoding = head.headers.get("content-encoding", "").strip().lower()
        if encoding in _WBITS:
            self._encoding = encoding
        elif encoding not in ("", "identity"):
            raise HttpGetError(
                f"the answer's Content-Encoding {encoding[:40]!r} is not one spectax reads"
                " (gzip, deflate)"
            )
        transfer = head.headers.get("transfer-encoding")
        length = head.headers.get("content-length")
        if head.status in _NO_BODY_STATUSES:
            self._complete = True
        elif transfer is not None:
            if transfer.strip().lower() != "chunked":
                raise HttpGetError(
                    f"the answer's Transfer-Encoding {transfer[:40]!r} is not chunked"
                )
            self._framing = "chunked"
        elif length is not None:
            values = {value.strip() for value in length.split(",")}
            if len(values) != 1 or not _is_number(value := values.pop()):
                raise HttpGetError(f"the answer's Content-Length {length[:40]!r} is not a number")
            self._framing, self._left = "length", int(value)
            if self._left == 0:
                self._finish()
        else:
            self._framing = "close"

    def _take_bytes(self, data: bytes) -> None:
        if self._framing == "length":
            if len(data) > self._left:
                data = data[: self._left]
            self._left -= len(data)
            self._deliver(data)
            if self._left == 0:
                self._finish()
        else:
            self._deliver(data)

    def _take_chunks(self) -> None:
        """Chunked framing (RFC 9112 7.1): size line, data, CRLF, ..., 0, trailers, CRLF."""
        buffer, at = self._buffer, 0
        while not self._complete:
            if self._left:
                data = buffer[at : at + self._left]
                if not data:
                    break
                at += len(data)
                self._left -= len(data)
                self._chunk_crlf = not self._left
                self._deliver(data)
                continue
            if self._chunk_crlf:  # CRLF, or a bare LF (RFC 9112 2.2), after the chunk's data
                ending = b"\n" if buffer[at : at + 1] == b"\n" else b"\r\n"
                if len(buffer) - at < len(ending):
                    break
                if buffer[at : at + len(ending)] != ending:
                    raise HttpGetError(
                        "the answer's chunked body is malformed (no CRLF after a chunk)"
                    )
                at += len(ending)
                self._chunk_crlf = False
                continue
            end = buffer.find(b"\n", at)
            if end < 0:
                if len(buffer) - at > _MAX_CHUNK_LINE:
                    raise HttpGetError("the answer's chunked body is malformed (a line too long)")
                break
            line, at = bytes(buffer[at:end]).removesuffix(b"\r"), end + 1
            if self._trailers:
                if not line:
                    self._finish()
                continue
            size = line.partition(b";")[0].strip()
            if not size or size.strip(b"0123456789abcdefABCDEF") or len(size) > 16:
                shown = size[:20].decode("latin-1")
                raise HttpGetError(f"the answer's chunked body is malformed (chunk size {shown!r})")
            self._left = int(size, 16)
            self._trailers = self._left == 0
        del buffer[:at]

    def _deliver(self, data: bytes | bytearray) -> None:
        """A piece of the body, its encoding undone, onto the body: never past the cap, so a
        gzip bomb is stopped after max_bytes + 1 bytes of output, whatever it inflates to."""
        if not data:
            return
        room = self._max_bytes - self._body_size
        if self._encoding:
            if self._decoder is None:
                self._decoder = zlib.decompressobj(_wbits(self._encoding, data))
            try:
                data = self._decoder.decompress(data, room + 1)
            except zlib.error:
                raise HttpGetError(
                    f"{_CUT_SHORT}Can not decode content-encoding: {self._encoding}"
                ) from None
        if len(data) > room:
            raise BodyTooLarge
        self._body.append(data)
        self._body_size += len(data)

    def _finish(self) -> None:
        if self._decoder is not None and not self._decoder.eof:
            raise HttpGetError(f"{_CUT_SHORT}the {self._encoding} stream ends early")
        self._complete = True
        self._wake()
        if self._transport is not None:
            self._transport.close()

    def _fail(self, error: Exception) -> None:
        self._error = error
        self._wake()
        if self._transport is not None:
            self._transport.abort()

    def _shortfall(self, exc: Exception | None) -> str:
        why = ""
        if exc is not None:
            why = (exc.strerror if isinstance(exc, OSError) else None) or _first_line(exc)
        if self._framing == "length":
            got = f"received {self._body_size} bytes, {self._left} more were announced"
            return f"{why} ({got})" if why else got
        return why or "the connection closed before the last chunk"


def _wbits(encoding: str, first: bytes | bytearray) -> int:
    """zlib's window bits: "deflate" is meant as zlib's format, but some servers send raw
    deflate. A zlib stream starts with CM = 8 and a header that is a multiple of 31 (RFC
    1950); aiohttp looked at CM alone, which one raw stream in 16 also matches."""
    if encoding == "deflate" and first:
        zlib_header = (first[0] & 0x0F) == 8 and (
            len(first) < 2 or ((first[0] << 8) | first[1]) % 31 == 0
        )
        if not zlib_header:
            return -zlib.MAX_WBITS
    return _WBITS[encoding]


#: The end of an answer's head: an empty line, its line ends CRLF or, as RFC 9112 2.2 lets
#: a recipient read them (and aiohttp did), a bare LF (exporters written as shell scripts).
_HEAD_END = re.compile(rb"\r?\n\r?\n")


def _is_number(text: str) -> bool:
    """ASCII digits only: str.isdigit() also takes the latin-1 head's superscripts (0xB2),
    which int() refuses."""
    return text.isascii() and text.isdigit()


def _parse_head(raw: bytes) -> Head:
    """The status line and the headers of an answer."""
    lines = raw.decode("latin-1").replace("\r\n", "\n").split("\n")
    version, _, rest = lines[0].partition(" ")
    status = rest[:3]
    if not version.startswith("HTTP/1.") or not _is_number(status) or rest[3:4] not in ("", " "):
        raise HttpGetError(f"the answer is not HTTP/1.x (status line {lines[0][:40]!r})")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise HttpGetError(f"the answer's header line {line[:40]!r} is malformed")
        name, value = name.lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return Head(int(status), headers)
