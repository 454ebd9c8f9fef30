"""The HTTP face: a landing page, `/metrics`, and the health endpoints Prometheus users expect,
behind the web config's guard (TLS client SANs, basic auth, headers; `spectax.webconfig`).

Passwords are checked with bcrypt (constant-time comparison); unknown users are checked
against a fixed hash so that timing does not tell which users exist. A verified result is
cached under a SHA-256 of user, hash and password (never the password itself), so a
Prometheus scraping every few seconds pays bcrypt's cost once.
The socket under it, and what a client can hold there, is `spectax.webserver`'s.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import html
import ssl
import struct
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

import bcrypt
from aiohttp import web
from aiohttp.typedefs import Middleware
from isal import isal_zlib
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from spectax import __version__
from spectax.exposition.text import Deflated, KeptLines, Page
from spectax.webconfig import WebConfig, WebConfigError

REGISTRY_KEY = web.AppKey("registry", CollectorRegistry)
EndpointStates = Callable[[], list[tuple[str, bool, str]]]
READY_KEY: web.AppKey[Callable[[], bool]] = web.AppKey("ready")
ENDPOINTS_KEY: web.AppKey[EndpointStates] = web.AppKey("endpoints")
Reload = Callable[[], Awaitable[None]]
RELOAD_KEY: web.AppKey[Reload | None] = web.AppKey("reload")
# The text page, a part at a time, and its generation: SnapshotCollector.render_page
RenderPage = Callable[[], Page]
TEXT_KEY: web.AppKey[RenderPage | None] = web.AppKey("render_page")
STATUS_KEY: web.AppKey[Callable[[], str] | None] = web.AppKey("status_page")


class LastGzip:
    """The last page's gzip and the page's generation (never the page: see text.py)."""

    generation = -1
    gzip = b""


GZIP_KEY: web.AppKey[LastGzip] = web.AppKey("gzip")
#: A gzip member's header: deflate, no name or comment, time 0 (no clock in the page's
#: bytes), no extra flags, the OS unknown (RFC 1952, 2.3).
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CLASSIC_TYPES = ("text/plain", "text/*", "*/*")
# bcrypt of "fakepassword" (the toolkit's): unknown users cost as much as known ones.
_FAKE_HASH = b"$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi"
_CACHE_MAX = 1024


def make_app(
    registry: CollectorRegistry,
    ready: Callable[[], bool],
    endpoints: Callable[[], list[tuple[str, bool, str]]],
    reload: Reload | None = None,
    middlewares: Sequence[Middleware] = (),
    render_page: RenderPage | None = None,
    status_page: Callable[[], str] | None = None,
    documents: Mapping[str, Callable[[], str | None]] | None = None,
) -> web.Application:
    """`endpoints()` gives (name, up, last error or "") for the bare landing page;
    `status_page()` renders the status page (`spectax.status`) served at `/` instead;
    `reload()` re-reads the configuration (`POST /-/reload`), raising ValueError when it
    is bad; `middlewares` are the web config's (basic auth, headers); `render_page()` is
    the fast text exposition, used instead of the registry when given; `documents` maps a
    path to a whole HTML page served there (the runbook: `spectax.status.docs`)."""
    app = web.Application(middlewares=list(middlewares))
    app[REGISTRY_KEY] = registry
    app[READY_KEY] = ready
    app[ENDPOINTS_KEY] = endpoints
    app[RELOAD_KEY] = reload
    app[TEXT_KEY] = render_page
    app[STATUS_KEY] = status_page
    app[GZIP_KEY] = LastGzip()
    app.router.add_post("/-/reload", reload_handler)
    app.router.add_get("/", landing)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/-/healthy", healthy)
    app.router.add_get("/-/ready", ready_handler)
    for path, document in (documents or {}).items():
        app.router.add_get(path, _document(document))
    return app


def _document(render: Callable[[], str | None]) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def serve(request: web.Request) -> web.Response:
        # In a worker thread: the first read renders the Markdown (~0.1 s), then it is kept.
        document = await asyncio.to_thread(render)
        if document is None:
            raise web.HTTPNotFound()
        return web.Response(text=document, content_type="text/html", charset="utf-8")

    return serve


async def metrics(request: web.Request) -> web.Response:
    """The classic text format whenever the client takes it, as node_exporter does.

    Prometheus asks for OpenMetrics first and the text format second; the text
    format is pre-rendered per snapshot (`render_page`) while OpenMetrics goes
    through prometheus_client's generic encoder, which is many times slower with
    thousands of endpoints. OpenMetrics is served to clients that take nothing else.
    Compressed when the client accepts gzip, once per distinct page, a part at a time, so
    that the page is never whole in memory (`_gzipped`). A client that takes no gzip gets
    it joined in a worker thread.
    """
    accept = request.headers.get("Accept", "")
    render = request.app[TEXT_KEY]
    if render is not None and _takes_classic_text(accept):
        page = render()
        if "gzip" not in request.headers.get("Accept-Encoding", ""):
            body = await asyncio.to_thread(b"".join, page.parts)
            return web.Response(body=body, headers={"Content-Type": TEXT_CONTENT_TYPE})
        headers = {"Content-Type": TEXT_CONTENT_TYPE, "Content-Encoding": "gzip"}
        compressed = _gzipped(request.app[GZIP_KEY], page)
        return web.Response(body=compressed, headers=headers)
    encoder, content_type = choose_encoder(accept)
    body = encoder(request.app[REGISTRY_KEY])
    return web.Response(body=body, headers={"Content-Type": content_type})


def _takes_classic_text(accept: str) -> bool:
    """No Accept header, or one that admits text/plain (Prometheus' does, at q=0.5)."""
    types = [part.split(";", 1)[0].strip() for part in accept.split(",") if part.strip()]
    return not types or any(t in CLASSIC_TYPES for t in types)


def _gzipped(cache: LastGzip, page: Page) -> bytes:
    """`page` compressed, on the event loop; the last result is kept by its generation, not
    its body, since every scraper between two snapshots gets the same page.

    On the loop, not in a worker thread: ISA-L compresses what is not kept of a 25 MB page
    (2,000 endpoints, a day of curves) in ~20 ms, which the scrapes then wait. In a worker
    thread each of its ~20 calls into ISA-L gave the GIL up, and getting it back waited up
    to the switch interval (5 ms) while the scrapes ran Python: a read took 97-478 ms at
    worst against 48-60 ms on the loop, and the scrapes were no later (bench/README,
    "/metrics compressed on the event loop")."""
    if cache.generation != page.generation:
        compressed = gzip_parts(page.blocks)
        cache.generation, cache.gzip = page.generation, compressed
    return cache.gzip


def gzip_parts(blocks: Iterable[bytes | KeptLines]) -> bytes:
    """One gzip member of the page's `blocks` in order, its header's time 0 (no clock in
    the bytes). ISA-L's deflate at level 1, not zlib's: a 9 MB page in ~5 ms rather than
    ~22, and a little smaller (the read's largest cost at 2,000 endpoints: bench/README
    "Under 150 MiB").

    The lines formatted elsewhere (`KeptLines`: the load curves, half of the page with a
    day of them) are compressed once while they last, each family apart and ended by a
    full flush, and laid between the rest's streams, the CRC-32 of the whole combined from
    the pieces'. Compressed again at every read they were half of its CPU, and in the
    worker thread that compressed it then, the read waited for the GIL for as long again
    (bench/README, "Where a read waits")."""
    compressor = isal_zlib.compressobj(1, zlib.DEFLATED, -zlib.MAX_WBITS)  # raw deflate
    out = [GZIP_HEADER]
    crc = size = 0
    for block in blocks:
        if isinstance(block, KeptLines):
            data, block_crc, length = _deflated(block)
            out.append(compressor.flush(zlib.Z_FULL_FLUSH))
            out.append(data)
            compressor = isal_zlib.compressobj(1, zlib.DEFLATED, -zlib.MAX_WBITS)
            crc, size = isal_zlib.crc32_combine(crc, block_crc, length), size + length
        else:
            out.append(compressor.compress(block))
            crc, size = isal_zlib.crc32(block, crc), size + len(block)
        del block  # before the next block is joined: one in memory at a time, not two
    out.append(compressor.flush())
    out.append(struct.pack("<II", crc, size & 0xFFFFFFFF))
    return b"".join(out)


def _deflated(lines: KeptLines) -> Deflated:
    """The lines' raw deflate ended by a full flush (byte-aligned, no final block: another
    stream may follow), with their CRC-32 and length: kept where the lines say, beside
    the very pieces it was made of (a family given other pieces is made again), and made
    once."""
    if lines.deflated is not None:
        kept = lines.deflated.get(lines.family)
        if kept is not None and kept[0] is lines.pieces:
            return kept[1]
    # Joined first (~1.5 MB a family at 2,000 endpoints): one call into ISA-L, not one a
    # piece (~18,000 calls; in a worker thread each waited for the GIL back, and a read
    # took 1.9 s in one run: bench/README, "Where a read waits").
    text = b"".join(lines.pieces)
    compressor = isal_zlib.compressobj(1, zlib.DEFLATED, -zlib.MAX_WBITS)
    data = compressor.compress(text) + compressor.flush(zlib.Z_FULL_FLUSH)
    made = (data, isal_zlib.crc32(text), len(text))
    del text
    if lines.deflated is not None:
        lines.deflated[lines.family] = (lines.pieces, made)
    return made


async def reload_handler(request: web.Request) -> web.Response:
    """Like Prometheus: 200 when the new configuration is in force, 500 with the reason."""
    reload = request.app[RELOAD_KEY]
    if reload is None:
        return web.Response(status=404, text="spectax has no configuration file to reload.\n")
    try:
        await reload()
    except ValueError as exc:
        return web.Response(status=500, text=f"failed to reload config: {exc}\n")
    return web.Response(text="spectax reloaded its configuration.\n")


async def healthy(request: web.Request) -> web.Response:
    return web.Response(text="spectax is healthy.\n")


async def ready_handler(request: web.Request) -> web.Response:
    if request.app[READY_KEY]():
        return web.Response(text="spectax is ready.\n")
    return web.Response(status=503, text="spectax is starting.\n")


async def landing(request: web.Request) -> web.Response:
    """The status page when the daemon gives one (it renders from memory: no I/O here)."""
    status_page = request.app[STATUS_KEY]
    if status_page is not None:
        return web.Response(text=status_page(), content_type="text/html")
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{'up' if up else 'down'}</td>"
        f"<td>{html.escape(error)}</td></tr>"
        for name, up, error in request.app[ENDPOINTS_KEY]()
    )
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>spectax</title></head>
<body>
<h1>spectax {html.escape(__version__)}</h1>
<p>Is speculative decoding paying for itself? Derived gauges per endpoint are at
<a href="/metrics">/metrics</a>. Health: <a href="/-/healthy">/-/healthy</a>,
readiness: <a href="/-/ready">/-/ready</a>.</p>
<table border="1" cellpadding="4"><tr><th>endpoint</th><th>state</th><th>last error</th></tr>
{rows}</table>
</body></html>
"""
    return web.Response(text=page, content_type="text/html")


# ------------------------------------------------------------------ the guard


class BasicAuthChecker:
    """bcrypt basic auth with a cache of verified results keyed by a SHA-256 digest."""

    def __init__(self, users: dict[str, bytes]):
        self._users = users
        self._cache: dict[bytes, bool] = {}
        self._lock = asyncio.Lock()  # one bcrypt at a time, like the toolkit's mutex

    async def check(self, header: str | None) -> bool:
        credentials = _parse_basic(header)
        if credentials is None:
            return False
        user, password = credentials
        hashed = self._users.get(user)
        valid_user = hashed is not None
        if hashed is None:
            hashed = _FAKE_HASH
        key = hashlib.sha256(b"\0".join((user.encode(), hashed, password))).digest()
        ok = self._cache.get(key)
        if ok is None:
            async with self._lock:
                ok = await asyncio.to_thread(_checkpw, password, hashed)
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[key] = ok
        return ok and valid_user


def _checkpw(password: bytes, hashed: bytes) -> bool:
    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:  # longer than bcrypt's 72 bytes, or a malformed hash
        return False


def _parse_basic(header: str | None) -> tuple[str, bytes] | None:
    if not header:
        return None
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = decoded.partition(b":")
    if not sep:
        return None
    try:
        return user.decode("utf-8"), password
    except UnicodeDecodeError:
        return None


class WebGuard:
    """The web config in force: swapped whole by a reload, read by every request."""

    def __init__(self, config: WebConfig):
        self.tls = config.ssl is not None
        self._config = config
        self._auth = BasicAuthChecker(config.users) if config.users else None
        self._base_context = config.ssl
        if config.ssl is not None:
            config.ssl.sni_callback = self._pick_context

    @property
    def server_ssl(self) -> ssl.SSLContext | None:
        return self._base_context

    def replace(self, config: WebConfig) -> None:
        """Take a new validated config; TLS cannot be switched on or off without a restart,
        nor basic auth off: a reload that empties `basic_auth_users` (or drops it) is more
        likely a slip than a wish to open /metrics to anyone."""
        if (config.ssl is not None) != self.tls:
            raise WebConfigError(
                "web config", ["switching TLS on or off takes a restart of spectax"]
            )
        if self._auth is not None and not config.users:
            raise WebConfigError(
                "web config",
                [
                    "basic_auth_users: empty or missing would turn basic auth off; list the "
                    "users, or restart spectax to run without basic auth"
                ],
            )
        self._config = config
        self._auth = BasicAuthChecker(config.users) if config.users else None

    def _pick_context(self, sslobj: ssl.SSLObject, name: str | None, base: ssl.SSLContext) -> None:
        """New connections use the latest certificate, key and client CA (a reload's)."""
        current = self._config.ssl
        if current is not None and current is not base:
            sslobj.context = current

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        config = self._config
        if config.allowed_sans is not None and not _san_allowed(request, config.allowed_sans):
            return web.Response(status=403, text="Forbidden\n")
        auth = self._auth
        if auth is not None and not await auth.check(request.headers.get("Authorization")):
            return web.Response(
                status=401, text="Unauthorized\n", headers={"WWW-Authenticate": "Basic"}
            )
        response = await handler(request)
        for name, value in config.headers.items():
            response.headers[name] = value
        return response


def _san_allowed(request: web.Request, allowed: frozenset[str]) -> bool:
    transport = request.transport
    cert = transport.get_extra_info("peercert") if transport is not None else None
    if not cert:
        return False
    return any(value in allowed for _, value in cert.get("subjectAltName", ()))
