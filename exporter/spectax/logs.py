"""Logging: plain text or one JSON object per line, and secrets blanked out of every line.

`--log-format json` writes objects with `time` (RFC 3339, UTC), `level`, `logger`,
`message`, `endpoint` when the line is about one endpoint, and `exception` when one is
attached. The endpoint is taken from `extra={"endpoint": ...}` or, for spectax's
"endpoint %s: ..." messages, from their first argument.

Every secret spectax resolves is registered here (`register_secret`); a filter on the
handler replaces it in the formatted line. spectax's own messages never hold one; the
filter is there for what a library might say. The same check (`blank_secrets`,
`holds_secret`) guards what a target sends before it can become a label, a row or a line
of the status page: any 8 characters in a row of a secret, in any of its escaped forms, so
that a truncated or re-escaped echo is caught as well as a whole one.
"""

from __future__ import annotations

import html
import json
import logging
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import quote, quote_plus

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
REDACTED = "<secret>"
#: The shortest secret spectax takes (credentials.resolve refuses a shorter one), and the
#: length of the fragments it blanks: any 8 characters of a secret, in a row, in any text.
MIN_SECRET_LENGTH = 8


class _Registered:
    """The secrets, and every MIN_SECRET_LENGTH-character window of each, as written and
    as each escaping below writes it. `windows` is replaced whole (never mutated) so that a
    reader needs no lock: registration is rare (a load, a reload), blanking is on every log
    line and label value."""

    def __init__(self) -> None:
        self.secrets: set[str] = set()
        self.windows: frozenset[str] = frozenset()


_registered = _Registered()
_lock = threading.Lock()
_collecting: ContextVar[set[str] | None] = ContextVar("spectax_collecting", default=None)


def _written_forms(value: str) -> set[str]:
    """`value` as the encodings its text passes through write it: a JSON log line, a
    Python repr in an exception (`\\` for a backslash), HTML, a Prometheus label value, a
    URL. Each escapes character by character, so an escaped fragment of the secret is a
    fragment of its escaped form: the windows of these forms catch it too."""
    label = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return {
        value,
        json.dumps(value, ensure_ascii=False)[1:-1],
        json.dumps(value)[1:-1],
        repr(value)[1:-1],
        ascii(value)[1:-1],
        value.encode("unicode_escape").decode("ascii"),
        html.escape(value),
        html.escape(value, quote=False),
        label,
        value.replace("\\", "\\\\"),
        quote(value, safe=""),
        quote_plus(value, safe=""),
    }


def register_secret(value: str) -> None:
    """Blank `value`, and any MIN_SECRET_LENGTH of its characters in a row, from now on. A
    shorter value is not taken: it would blank ordinary words (the configuration refuses
    a shorter secret, so only a non-secret such as a header value can be that short)."""
    if len(value) < MIN_SECRET_LENGTH:
        return
    if (found := _collecting.get()) is not None:
        found.add(value)
    with _lock:
        if value in _registered.secrets:
            return
        _registered.windows = _registered.windows | windows_of([value])
        _registered.secrets.add(value)


def windows_of(values: Iterable[str]) -> frozenset[str]:
    """Every MIN_SECRET_LENGTH-character window of `values`, in each written form."""
    n = MIN_SECRET_LENGTH
    return frozenset(
        form[i : i + n]
        for value in values
        for form in _written_forms(value)
        for i in range(len(form) - n + 1)
    )


@contextmanager
def collected_secrets() -> Iterator[set[str]]:
    """The secrets registered inside the block (those registered before too): what one
    configuration holds, for its own names to be checked against (a reload keeps the old
    ones registered, for the lines that may still quote them)."""
    found: set[str] = set()
    token = _collecting.set(found)
    try:
        yield found
    finally:
        _collecting.reset(token)


def secrets_registered() -> int:
    """How many secrets are registered; none is ever removed, so a change means a new one."""
    return len(_registered.secrets)


def _secret_starts(text: str, windows: frozenset[str]) -> list[int]:
    n = MIN_SECRET_LENGTH
    return [i for i in range(len(text) - n + 1) if text[i : i + n] in windows]


def holds_secret(text: str, windows: frozenset[str] | None = None) -> bool:
    """Whether `text` holds MIN_SECRET_LENGTH characters in a row of a registered secret
    (or of `windows_of` some): one set look-up per character, O(len(text))."""
    windows, n = _registered.windows if windows is None else windows, MIN_SECRET_LENGTH
    return bool(windows) and not windows.isdisjoint(
        text[i : i + n] for i in range(len(text) - n + 1)
    )


def blank_secrets(text: str) -> str:
    """`text` with every run of characters that registered secrets' windows cover replaced
    by `<secret>`: a whole secret, a truncated one (a page's line cut at 120 characters, a
    token minus its last characters) or an escaped one. O(len(text)): this runs on every
    log line and on each new label value a target sends."""
    windows = _registered.windows
    if not windows:
        return text
    starts = _secret_starts(text, windows)
    if not starts:
        return text
    parts: list[str] = []
    kept = 0  # where the text not yet copied begins
    begin, end = starts[0], starts[0] + MIN_SECRET_LENGTH
    for start in starts[1:]:
        if start > end:  # a gap: the run so far is one secret
            parts += [text[kept:begin], REDACTED]
            kept, begin = end, start
        end = start + MIN_SECRET_LENGTH
    parts += [text[kept:begin], REDACTED, text[end:]]
    return "".join(parts)


def _endpoint_of(record: logging.LogRecord) -> str | None:
    endpoint = getattr(record, "endpoint", None)
    if isinstance(endpoint, str):
        return endpoint
    if (
        isinstance(record.msg, str)
        and record.msg.startswith("endpoint %s")
        and isinstance(record.args, tuple)
        and record.args
    ):
        return str(record.args[0])
    return None


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            # Blanked before json.dumps escapes it (the handler blanks the line again).
            "message": blank_secrets(record.getMessage()),
        }
        endpoint = _endpoint_of(record)
        if endpoint is not None:
            entry["endpoint"] = endpoint
        if record.exc_info:
            entry["exception"] = blank_secrets(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False)


class _RedactingHandler(logging.StreamHandler):  # type: ignore[type-arg]
    def format(self, record: logging.LogRecord) -> str:
        return blank_secrets(super().format(record))


def setup(level: str = "info", log_format: LogFormat = "text") -> None:
    """Configure the root logger: one handler on stderr, text or JSON, secrets blanked."""
    handler = _RedactingHandler(sys.stderr)
    handler.setFormatter(
        JSONFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
    # APScheduler logs every job run at INFO: thousands of lines an hour at fleet scale.
    logging.getLogger("apscheduler").setLevel(max(logging.WARNING, root.level))
    # Alembic narrates every migration step; spectax says what matters itself.
    logging.getLogger("alembic").setLevel(max(logging.WARNING, root.level))
    # asyncio's debug lines can quote request data; keep them at warnings.
    logging.getLogger("asyncio").setLevel(max(logging.WARNING, root.level))
    # aiosqlite logs every statement it runs at DEBUG: --log-level debug was its flood,
    # not spectax's lines (nor are asyncpg's or aiohttp's access lines wanted there).
    for chatty in ("aiosqlite", "asyncpg", "aiohttp.access"):
        logging.getLogger(chatty).setLevel(max(logging.INFO, root.level))
