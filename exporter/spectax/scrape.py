"""Fetching one `/metrics` page: a timeout, a body-size cap, and errors that say what went wrong.

Each endpoint is fetched in its own task; a slow or broken target only ever
fails its own scrape. Errors carry a short `reason` from a fixed set, used as
a metric label, and a message that never includes credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import re
import resource
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from yarl import URL

from spectax import __version__
from spectax.engines import ENGINES
from spectax.health import ScrapeError

if TYPE_CHECKING:
    from spectax.credentials import TargetAuth

# The daemon's logger: the warning below was the daemon's before it moved here.
log = logging.getLogger("spectax.daemon")
ACCEPT = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"
# Who asks, in a target's (or a Prometheus's) access log: not aiohttp's default.
USER_AGENT = f"spectax/{__version__}"
# A metrics page starts with "#" or a metric name, never "<": an HTML page answered with
# 200 (a login page, a proxy's error page, a UI at the wrong path) is not "up".
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_HTML_START = re.compile(r"\s*+<")


@functools.lru_cache(maxsize=65536)
def metrics_url(url: str, engine: str = "vllm") -> URL:
    """The URL as configured, with the engine's page path added when it names only a server
    (`/metrics`; TensorRT-LLM's `/prometheus/metrics`); parsed once per configured URL
    rather than once per scrape."""
    parts = urlsplit(url)
    if parts.path in ("", "/"):
        path = ENGINES[engine].metrics_path if engine in ENGINES else "/metrics"
        parts = parts._replace(path=path)
    return URL(urlunsplit(parts))


def scrape_session() -> aiohttp.ClientSession:
    """The HTTP client every scrape goes through. Each fetch bounds itself (`timeout`), so
    the session does not; no cookie jar: scrapes carry no state from one target (or
    scrape) to the next.

    No keep-alive: a scrape closes its connection when the page is read. vLLM's server
    (uvicorn) drops an idle connection after 5 s, before the next scrape of a 15 s
    interval could use it, and until aiohttp noticed, each dead connection sat in its
    pool: ~9 MiB of the daemon's peak memory at 2,000 endpoints (bench/README "Under
    150 MiB"). The price is a new connection (and TLS handshake) per scrape, which
    those targets cost anyway."""
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=None),
        connector=aiohttp.TCPConnector(limit=256, limit_per_host=2, force_close=True),
        cookie_jar=aiohttp.DummyCookieJar(),
        headers={"User-Agent": USER_AGENT},
    )


def lift_open_files_limit(endpoints: int) -> int | None:
    """Raise the soft limit on open files to the hard one, as Go's runtime does for
    Prometheus; the limit now in force (None: unlimited), with a warning when it is still
    too low for the endpoints watched.

    Every target being scraped can hold a socket (and the server's clients more): at fleet
    scale the usual soft limit of 1,024 would fail scrapes with "Too many open files".
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    if soft == resource.RLIM_INFINITY:
        return None
    if soft < endpoints + 256:
        log.warning(
            "open files limited to %d for %d endpoints: raise LimitNOFILE (ulimit -n)",
            soft,
            endpoints,
        )
    return soft


def redact(url: str | URL) -> str:
    """The URL without user info or query string, for logs and error messages."""
    parts = urlsplit(str(url))
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


async def fetch(
    session: aiohttp.ClientSession,
    url: str | URL,
    timeout: float,
    max_bytes: int,
    auth: TargetAuth | None = None,
) -> str:
    """GET the page and return its text, or raise ScrapeError.

    `auth` adds the endpoint's Authorization header and TLS context. The timeout covers
    the whole exchange (connect, headers and every byte of the body), so a target that
    trickles its answer cannot hold a scrape past it.
    """
    headers = {"Accept": ACCEPT}
    if auth is not None:
        headers.update(auth.headers)
    ssl = auth.ssl if auth is not None and auth.ssl is not None else True
    try:
        async with asyncio.timeout(timeout):
            async with session.get(url, headers=headers, ssl=ssl) as response:
                if response.status != 200:
                    raise ScrapeError("http_status", f"HTTP {response.status} from {redact(url)}")
                if response.content_type in _HTML_TYPES:
                    raise _html(url, f"Content-Type {response.content_type}")
                if response.content_length is not None and response.content_length > max_bytes:
                    raise _too_large(url, max_bytes)
                body = bytearray()
                async for chunk in response.content.iter_chunked(64 * 1024):
                    body += chunk
                    if len(body) > max_bytes:
                        raise _too_large(url, max_bytes)
    except TimeoutError:
        raise ScrapeError(
            "timeout", f"no complete answer from {redact(url)} within {timeout:g} s"
        ) from None
    except aiohttp.ClientError as exc:
        raise ScrapeError("connection", f"{redact(url)}: {connection_problem(exc)}") from None
    except OSError as exc:
        raise ScrapeError(
            "connection", f"{redact(url)}: {exc.strerror or type(exc).__name__}"
        ) from None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScrapeError(
            "decode", f"{redact(url)}: body is not UTF-8 (byte {exc.start})"
        ) from None
    if _HTML_START.match(text):
        raise _html(url, "a body that starts with '<'")
    return text


def _html(url: str | URL, why: str) -> ScrapeError:
    return ScrapeError(
        "parse",
        f"{redact(url)} answered 200 with an HTML page ({why}), not Prometheus metrics: "
        "check the endpoint's url (vLLM serves them at /metrics)",
    )


def _too_large(url: str | URL, max_bytes: int) -> ScrapeError:
    return ScrapeError("too_large", f"{redact(url)}: body larger than {max_bytes} bytes")


#: What a failed connect's errno means to someone who can go and look.
_CONNECT_ERRNO: Final = {
    errno.ECONNREFUSED: "connection refused (nothing listening on {host})",
    errno.EHOSTUNREACH: "no route to {host} (host unreachable)",
    errno.ENETUNREACH: "no route to {host} (network unreachable)",
    errno.ETIMEDOUT: "no answer from {host} to connect (timed out)",
    errno.ECONNRESET: "{host} reset the connection",
}


def connection_problem(exc: aiohttp.ClientError) -> str:
    """aiohttp's error in words an operator acts on: "Cannot connect to host 127.0.0.1:18001
    ssl:default [Connect call failed ('127.0.0.1', 18001)]" (also for plain http) becomes
    "connection refused (nothing listening on 127.0.0.1:18001)"."""
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return f"cannot resolve {exc.host} (DNS: {exc.os_error.strerror or exc.os_error})"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"TLS certificate of {exc.host}:{exc.port} not accepted: {exc.certificate_error}"
    if isinstance(exc, aiohttp.ClientConnectorSSLError):
        return f"TLS handshake with {exc.host}:{exc.port} failed: {_first_line(exc.os_error)}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        host = f"{exc.host}:{exc.port}"
        known = _CONNECT_ERRNO.get(exc.os_error.errno or 0)
        if known:
            return known.format(host=host)
        return f"cannot connect to {host}: {exc.os_error.strerror or _first_line(exc.os_error)}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection before it answered"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return f"the answer was cut short: {_first_line(exc)}"
    return f"{type(exc).__name__}: {_first_line(exc)}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()
    return text[0][:200] if text else ""
