"""Text exposition format helpers for the engine parsers that scan a page with one regular
expression instead of parsing all of it (spectax.engines.vllm): the label-set grammar, the
alternation of family names, label unescaping, and the line a match sits on (for errors).
"""

from __future__ import annotations

import math
import re
from typing import Final

from spectax.engines.base import Histogram, ParseError

#: Distinct bucket bounds accepted per histogram (vLLM's have 11-30): the buckets are kept in
#: every interval of the sliding window and in every stored row, so a page cannot make
#: them a megabyte each.
MAX_BUCKETS: Final = 256


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


# A label value: anything but a quote, backslash or newline, or a backslash escape.
# Possessive quantifiers (Python 3.11+) keep the pattern linear on hostile input.
LABEL_VALUE = r'"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"'
LABEL_PAIR = r"[ \t]*+[a-zA-Z_][a-zA-Z0-9_]*+[ \t]*+=[ \t]*+" + LABEL_VALUE
LABEL_SET = r"\{(?:" + LABEL_PAIR + r"(?:[ \t]*+," + LABEL_PAIR + r")*+(?:[ \t]*+,)?+)?+[ \t]*+\}"

_ESCAPE: Final = re.compile(r"\\[\\n\"]")
_UNESCAPE: Final = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}


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


def where(scan: re.Pattern[str], body: str, index: int) -> tuple[int, str]:
    """Line number and text of the index-th match of `scan` in `body`, for a ParseError: a
    parser that scans with findall (no match object per line) finds its bad line again."""
    for i, match in enumerate(scan.finditer(body)):
        if i == index:
            return line_of(body, match.start())
    raise AssertionError(index)  # pragma: no cover - the index came from the same scan


def decode(data: bytes | bytearray | memoryview) -> str:
    raw = bytes(data)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_number = raw.count(b"\n", 0, exc.start) + 1
        begin = raw.rfind(b"\n", 0, exc.start) + 1
        end = raw.find(b"\n", exc.start)
        line = raw[begin : end if end >= 0 else len(raw)].decode("utf-8", "replace")
        raise ParseError("body is not valid UTF-8", line_number, line) from None


def histogram(total: float | None, count: float | None, name: str, model: str) -> Histogram | None:
    """The histogram of a family's summed `_sum` and `_count`; None when the page has neither."""
    if total is None and count is None:
        return None
    if total is None or count is None:
        missing = "_sum" if total is None else "_count"
        raise ParseError(f"{name} of model {model!r} has no {missing} series")
    return Histogram(sum=total, count=count)


def with_buckets(
    histogram: Histogram | None, per_le: dict[float, float], name: str, model: str
) -> Histogram:
    """The histogram with its cumulative buckets, ascending; a histogram needs its +Inf
    bucket (the exposition format's rule, and histogram_quantile's: NaN without it)."""
    if histogram is None:
        raise ParseError(f"{name} of model {model!r} has buckets but no _sum and _count")
    if math.inf not in per_le:
        raise ParseError(f'{name} of model {model!r} has no le="+Inf" bucket')
    if len(per_le) > MAX_BUCKETS:
        raise ParseError(f"{name} of model {model!r} has more than {MAX_BUCKETS} buckets")
    return Histogram(histogram.sum, histogram.count, tuple(sorted(per_le.items())))
