"""The socket under spectax's HTTP face: what a client can hold without sending a request.

The TLS handshake and the request header each have `HEADER_TIMEOUT` (Go's exporters use
ReadHeaderTimeout), at most `MAX_CONNECTIONS` are open at once and at most
`MAX_PER_ADDRESS` from one client address (an IPv6 client's /64); past either, a new
connection is closed at once, before any TLS handshake. One address holding its share
cannot fill the server: a second address always gets in, and the last `RESERVED` places
go only to addresses holding none (a Prometheus that is not the flood). `spectax.web` is
the app served.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

# Go's ReadHeaderTimeout, from accept (and from the end of the last response on a kept-alive
# connection) to a complete header: a scrape sends its header in one segment, in under 1 ms.
# 5 s, not 10: a held connection is a place a scraper cannot have (bench/web_flood.py).
HEADER_TIMEOUT = 5.0
# Who scrapes spectax is a few Prometheus servers and a browser; each open connection costs
# ~270 KiB over TLS (asyncio's 256 KiB read buffer, bench/web_flood.py): 256 take ~70 MiB.
MAX_CONNECTIONS = 256
# A Prometheus keeps one connection per target, a browser six: 32 from one address is
# plenty for those, and one address's flood leaves 224 places to everyone else.
MAX_PER_ADDRESS = 32
# The last places, for addresses that hold none: a flood from several addresses still
# leaves a newcomer (the Prometheus scraping /metrics) its first connection.
RESERVED = 32


class ListenError(Exception):
    """spectax's own address cannot be listened on (taken, not this host's, privileged):
    the message names it and how to give another; the command exits 2 on it."""


class WebServer:
    """The listening socket and the aiohttp runner behind it; `close()` stops both."""

    def __init__(self, runner: web.AppRunner, server: asyncio.Server, gate: ConnectionGate):
        self.runner, self.server, self.gate = runner, server, gate

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    async def close(self) -> None:
        self.server.close()
        await self.runner.cleanup()


async def start_server(
    app: web.Application,
    host: str,
    port: int,
    ssl_context: ssl.SSLContext | None,
    *,
    max_connections: int = MAX_CONNECTIONS,
    max_per_address: int = MAX_PER_ADDRESS,
    reserved: int = RESERVED,
    header_timeout: float = HEADER_TIMEOUT,
    shutdown_timeout: float = 60.0,
) -> WebServer:
    """Serve `app` with the handshake and the header each bounded by `header_timeout`
    (aiohttp's keep-alive timer runs from accept and closes a connection still waiting
    for a complete request), at most `max_connections` open at once and `max_per_address`
    from one client address, the last `reserved` places for addresses holding none.

    The socket listens in plain TCP and TLS starts once the connection is admitted: each
    TLS connection holds asyncio's 256 KiB read buffer, so one refused before its
    handshake costs nothing (bench/web_flood.py: 2,000 held, 87 -> 620 MiB otherwise)."""
    runner = web.AppRunner(
        app, access_log=None, keepalive_timeout=header_timeout, shutdown_timeout=shutdown_timeout
    )
    await runner.setup()
    assert runner.server is not None
    gate = ConnectionGate(
        runner.server,
        Limits(max_connections, max_per_address, reserved),
        ssl_context,
        header_timeout,
    )
    try:
        server = await asyncio.get_running_loop().create_server(gate, host, port)
    except OSError as exc:  # EADDRINUSE (98) most often: a second spectax, or the demo
        await runner.cleanup()
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        raise ListenError(
            f"cannot listen on {host}:{port}: {reason}; give another address with"
            " --web.listen-address HOST:PORT (or `listen:` in the configuration)"
        ) from None
    return WebServer(runner, server, gate)


@dataclass(frozen=True)
class Limits:
    """Open connections at once: in all, from one address, and the places kept for
    addresses holding none (see the module's docstring)."""

    total: int = MAX_CONNECTIONS
    per_address: int = MAX_PER_ADDRESS
    reserved: int = RESERVED


def client_address(peer: object) -> str:
    """Whom a connection from `peer` (the socket's peername) is counted against: its IPv4
    address, or its IPv6 /64 (one host is handed a whole /64, so counting its single
    addresses would bound nothing)."""
    host = peer[0] if isinstance(peer, tuple) and peer else ""
    try:
        address = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return str(host)  # a Unix socket's path, or nothing: counted together
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class ConnectionGate:
    """The protocol factory: aiohttp's handler for each connection within `limits` (TLS
    handshakes in progress included), a connection closed at once past them."""

    def __init__(
        self,
        factory: Callable[[], asyncio.Protocol],
        limits: Limits,
        ssl_context: ssl.SSLContext | None,
        handshake_timeout: float,
    ):
        self._factory, self.limits, self.open = factory, limits, 0
        self.by_address: dict[str, int] = {}  # open connections per client address
        self.ssl_context, self.handshake_timeout = ssl_context, handshake_timeout
        self._handshakes: set[asyncio.Task[None]] = set()

    def __call__(self) -> asyncio.Protocol:
        return _Admission(self)

    def _admits(self, address: str) -> bool:
        held, limits = self.by_address.get(address, 0), self.limits
        if self.open >= limits.total or held >= limits.per_address:
            return False
        # The shared places: never fewer than one address's share (a small test server).
        return held == 0 or self.open < max(limits.total - limits.reserved, limits.per_address)

    def admit(self, transport: asyncio.Transport) -> None:
        address = client_address(transport.get_extra_info("peername"))
        if not self._admits(address):
            transport.abort()
            return
        self.open += 1
        self.by_address[address] = self.by_address.get(address, 0) + 1
        handler = self._factory()
        if self.ssl_context is None:
            transport.set_protocol(_Counted(handler, self, address))
            handler.connection_made(transport)
            return
        transport.pause_reading()  # the ClientHello waits in the kernel for start_tls
        task = asyncio.create_task(self._start_tls(transport, handler, address))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    def release(self, address: str) -> None:
        self.open -= 1
        left = self.by_address.pop(address) - 1
        if left:
            self.by_address[address] = left

    async def _start_tls(
        self, transport: asyncio.Transport, handler: asyncio.Protocol, address: str
    ) -> None:
        counted, context = _Counted(handler, self, address), self.ssl_context
        assert context is not None
        loop, timeout = asyncio.get_running_loop(), self.handshake_timeout
        try:
            tls = await loop.start_tls(
                transport, counted, context, server_side=True, ssl_handshake_timeout=timeout
            )
        except (OSError, ssl.SSLError, TimeoutError, asyncio.CancelledError):
            tls = None  # start_tls has closed the connection
        if tls is None:
            counted.release()
        else:
            handler.connection_made(tls)


class _Admission(asyncio.Protocol):
    """A connection just accepted, before it is counted: the gate admits or closes it."""

    def __init__(self, gate: ConnectionGate):
        self._gate = gate

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._gate.admit(transport)  # type: ignore[arg-type]


class _Counted(asyncio.Protocol):
    """Passes everything to aiohttp's handler and counts itself out when the connection ends
    (aiohttp's handler has __slots__, so it cannot be told directly)."""

    def __init__(self, inner: asyncio.Protocol, gate: ConnectionGate, address: str):
        self._inner, self._gate, self._address, self._counted = inner, gate, address, True

    def release(self) -> None:
        if self._counted:
            self._counted = False
            self._gate.release(self._address)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.release()
        self._inner.connection_lost(exc)
