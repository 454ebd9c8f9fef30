"""Pieces of the Prometheus text format that an engine's line scanner needs.

An engine parser (`vllm.py`) scans a page for the few families it reads with one
compiled pattern; the pattern's parts, the label unescaping and the error location
are the format's, not the engine's, so they live here for every engine's scanner.
"""

from __future__ import annotations

import re
from typing import Final

from spectax.engines.base import ParseError

# A label value: anything but a quote, backslash or newline, or a backslash escape.
# Possessive quantifiers (Python 3.11+) keep the pattern linear on hostile input.
LABEL_VALUE: Final = r'"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"'
LABEL_PAIR: Final = r"[ \t]*+[a-zA-Z_][a-zA-Z0-9_]*+[ \t]*+=[ \t]*+" + LABEL_VALUE
LABEL_SET: Final = (
    r"\{(?:" + LABEL_PAIR + r"(?:[ \t]*+," + LABEL_PAIR + r")*+(?:[ \t]*+,)?+)?+[ \t]*+\}"
)
#: One `name="value"` of an already validated label set: (name, raw escaped value).
PAIR: Final = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*\"([^\"\\\n]*(?:\\.[^\"\\\n]*)*)\"")
_ESCAPE: Final = re.compile(r"\\[\\n\"]")
_UNESCAPE: Final = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}


def trie(words: list[str]) -> str:
    """A regex alternation of `words` factored by common prefixes (fewer branch tries)."""
    if words == [""]:
        return ""
    optional = "" in words
    groups: dict[str, list[str]] = {}
    for word in words:
        if word:
            groups.setdefault(word[0], []).append(word[1:])
    parts = [re.escape(char) + trie(rest) for char, rest in sorted(groups.items())]
    body = parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"
    return f"(?:{body})?" if optional else body


def unescape(value: str) -> str:
    """Undo the exposition format's label escaping (`\\\\`, `\\"`, `\\n`); other escapes stay."""
    if "\\" not in value:
        return value
    return _ESCAPE.sub(lambda m: _UNESCAPE[m.group(0)], value)


def line_of(body: str, start: int) -> tuple[int, str]:
    """1-based line number and text of the line whose preceding newline is at `start`."""
    end = body.find("\n", start + 1)
    line = body[start + 1 : end if end >= 0 else len(body)]
    return body.count("\n", 0, start) + 1, line


def decode(data: bytes | bytearray | memoryview) -> str:
    """The page as text; a body that is not UTF-8 is a `ParseError` naming its line."""
    raw = bytes(data)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_number = raw.count(b"\n", 0, exc.start) + 1
        begin = raw.rfind(b"\n", 0, exc.start) + 1
        end = raw.find(b"\n", exc.start)
        line = raw[begin : end if end >= 0 else len(raw)].decode("utf-8", "replace")
        raise ParseError("body is not valid UTF-8", line_number, line) from None
