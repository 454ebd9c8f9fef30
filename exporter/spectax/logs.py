"""Logging: plain text or one JSON object per line, and secrets blanked out of every line.

`--log-format json` writes objects with `time` (RFC 3339, UTC), `level`, `logger`,
`message`, `endpoint` when the line is about one endpoint, and `exception` when one is
attached. The endpoint is taken from `extra={"endpoint": ...}` or, for spectax's
"endpoint %s: ..." messages, from their first argument.

Every secret spectax resolves is registered here (`register_secret`); a filter on the
handler replaces it in the formatted line. spectax's own messages never hold one; the
filter is there for what a library might say.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from datetime import UTC, datetime
from typing import Any, Literal

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
REDACTED = "<secret>"
_MIN_SECRET_LENGTH = 4  # shorter values would blank out ordinary words

_secrets: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str) -> None:
    if len(value) >= _MIN_SECRET_LENGTH:
        with _lock:
            _secrets.add(value)


def secrets_registered() -> int:
    """How many secrets are registered; none is ever removed, so a change means a new one."""
    return len(_secrets)


def blank_secrets(text: str) -> str:
    """`text` with every registered secret replaced by `<secret>`."""
    if not _secrets:
        return text
    with _lock:
        known = sorted(_secrets, key=len, reverse=True)
    for secret in known:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


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
            "message": record.getMessage(),
        }
        endpoint = _endpoint_of(record)
        if endpoint is not None:
            entry["endpoint"] = endpoint
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
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
