"""Reading a file a command was given: one clear line for each way it can fail."""

from __future__ import annotations

from pathlib import Path


def read_text(path: str, error: type[Exception], what: str = "a text file") -> str:
    """The file's text as UTF-8, or `error` saying in one line why not (no traceback)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not {what} (not UTF-8)") from None
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror}") from None
