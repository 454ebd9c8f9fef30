"""Fetching one `/metrics` page: a timeout, a body-size cap, and errors that say what went wrong.

Each endpoint is fetched in its own task; a slow or broken target only ever
fails its own scrape. Errors carry a short `reason` from a fixed set, used as
a metric label, and a message that never includes credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import resource
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from yarl import URL

from spectax import __version__, http_get
from spectax.engines import ENGINES
from spectax.health import ScrapeError

if TYPE_CHECKING:
    from spectax.credentials import TargetAuth

# The daemon's logger: the warning below was the daemon's before it moved here.
log = logging.getLogger("spectax.daemon")
ACCEPT = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"
# Who asks, in a target's (or a Prometheus's) access log: not aiohttp's default.
USER_AGENT = f"spectax/{__version__}"
# What every scrape sends, and no Accept-Encoding: `fetch` says why.
SCRAPE_HEADERS: Final = {"User-Agent": USER_AGENT, "Accept": ACCEPT}
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
    """The daemon's aiohttp session: its fleet sources' queries to Prometheus go through it
    (scrapes themselves, since issue 31, through http_get.py, which keeps the same rules:
    a connection per GET, no state). Each query bounds itself, so the session does not;
    no cookie jar: nothing carries over from one target (or scrape) to the next.

    No keep-alive (here and in http_get): a scrape closes its connection when the page is
    read. vLLM's server (uvicorn) drops an idle connection after 5 s, before the next
    scrape of a 15 s interval could use it, and until aiohttp noticed, each dead
    connection sat in its pool: ~9 MiB of the daemon's peak memory at 2,000 endpoints
    (bench/README "Under 150 MiB"). The price is a new connection (and TLS handshake)
    per scrape, which those targets cost anyway."""
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
    session: aiohttp.ClientSession | None,
    url: str | URL,
    timeout: float,
    max_bytes: int,
    auth: TargetAuth | None = None,
) -> str:
    """GET the page and return its text, or raise ScrapeError.

    `auth` adds the endpoint's Authorization header and TLS context. The timeout covers
    the whole exchange (connect, headers and every byte of the body), so a target that
    trickles its answer cannot hold a scrape past it.

    The GET goes through spectax's own client (http_get.py: ~2.5x less CPU per page than
    aiohttp's, issue 31), not `session`: callers still pass the daemon's session, which
    its fleet sources' queries use.

    It asks for no compression (aiohttp asked for gzip): vLLM's prometheus_client then
    skips gzip at level 9, ~2 ms of its API server's event loop per 50 kB page, and
    spectax the inflate, ~90 µs of a ~200 µs fetch. The price is the wire: 50 kB a page,
    not 5 kB (2,000 endpoints every 15 s: ~7 MB/s, not 0.7). A server that compresses
    anyway (a proxy) is still read: http_get undoes gzip and deflate.
    """
    target = url if isinstance(url, URL) else URL(url)
    headers = SCRAPE_HEADERS if auth is None or not auth.headers else SCRAPE_HEADERS | auth.headers
    try:
        async with asyncio.timeout(timeout):
            body = await http_get.get_page(
                target,
                headers,
                auth.ssl if auth is not None else None,
                max_bytes,
                functools.partial(_check_head, url, max_bytes),
            )
    except TimeoutError:
        raise ScrapeError(
            "timeout", f"no complete answer from {redact(url)} within {timeout:g} s"
        ) from None
    except http_get.BodyTooLarge:
        raise _too_large(url, max_bytes) from None
    except http_get.HttpGetError as exc:
        raise ScrapeError("connection", f"{redact(url)}: {exc}") from None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScrapeError(
            "decode", f"{redact(url)}: body is not UTF-8 (byte {exc.start})"
        ) from None
    if _HTML_START.match(text):
        raise _html(url, "a body that starts with '<'")
    return text


def _check_head(url: str | URL, max_bytes: int, head: http_get.Head) -> None:
    """Refuses an answer on its head, before its body is read: not 200, an HTML page, or a
    Content-Length over the cap."""
    if head.status != 200:
        raise ScrapeError("http_status", f"HTTP {head.status} from {redact(url)}")
    if head.content_type in _HTML_TYPES:
        raise _html(url, f"Content-Type {head.content_type}")
    if head.content_length is not None and head.content_length > max_bytes:
        raise _too_large(url, max_bytes)


def _html(url: str | URL, why: str) -> ScrapeError:
    return ScrapeError(
        "parse",
        f"{redact(url)} answered 200 with an HTML page ({why}), not Prometheus metrics: "
        "check the endpoint's url (vLLM serves them at /metrics)",
    )


def _too_large(url: str | URL, max_bytes: int) -> ScrapeError:
    return ScrapeError("too_large", f"{redact(url)}: body larger than {max_bytes} bytes")
