"""The line scanner every engine parser shares: the exposition format's label-set grammar,
the alternation of family names, label unescaping, the line a match sits on (for errors),
and histograms with their buckets.

A page has hundreds of lines and a parser needs a dozen families, so each engine
compiles one regular expression over its family names (`scanner`), anchored on a
newline so the scan runs in C, and reads only the lines it matches (`samples`).
A matched line whose tail (labels, value, timestamp) does not parse is a
`ParseError` naming the line, never a line skipped silently. Values of the lines
read are checked here once: cumulative ones (counters, histogram `_sum` and
`_count`) and request counts must be finite, >= 0 and at most `MAX_VALUE`.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any, Final, TypeVar, cast

from spectax.engines.base import Histogram, ParseError

#: Largest cumulative value or request count accepted, 2**53: above it a float no longer
#: holds every integer, so deltas (and the stored sums) stop being exact; and the store's
#: BIGINT columns (2**63) keep 2**10 times that as headroom for rollups summing windows.
#: 2**53 tokens is 285 years at a million tokens a second.
MAX_VALUE: Final = float(2**53)
#: Distinct `model_name` values accepted on one page (guards memory and cardinality).
MAX_MODELS: Final = 64
#: Longest `model_name` accepted, in characters: the store's `model` column is
#: String(256) (PostgreSQL refuses longer), and a served name is a Hugging Face id
#: (at most 96 + 1 + 96 characters) or a local path, well under it.
MAX_MODEL_NAME: Final = 256
#: Largest number of speculative positions accepted (vLLM K is typically 1-10).
MAX_POSITIONS: Final = 256
#: Distinct bucket bounds accepted per histogram (vLLM's have 11-30): the buckets are kept in
#: every interval of the sliding window and in every stored row, so a page cannot make
#: them a megabyte each.
MAX_BUCKETS: Final = 256

# A label value: anything but a quote, backslash or newline, or a backslash escape.
# Possessive quantifiers (Python 3.11+) keep the pattern linear on hostile input.
_LABEL_VALUE = r'"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"'
_LABEL_PAIR = r"[ \t]*+[a-zA-Z_][a-zA-Z0-9_]*+[ \t]*+=[ \t]*+" + _LABEL_VALUE
LABEL_SET = r"\{(?:" + _LABEL_PAIR + r"(?:[ \t]*+," + _LABEL_PAIR + r")*+(?:[ \t]*+,)?+)?+[ \t]*+\}"
PAIR: Final = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*\"([^\"\\\n]*(?:\\.[^\"\\\n]*)*)\"")
_ESCAPE: Final = re.compile(r"\\[\\n\"]")
_UNESCAPE: Final = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}
_LABEL_CACHE: dict[str, dict[str, str]] = {}
_LABEL_CACHE_MAX: Final = 4096
_LABEL_CACHE_KEY_MAX: Final = 1024
T = TypeVar("T")


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


def scanner(names: Iterable[str]) -> re.Pattern[str]:
    """One pattern matching a sample line of any of `names`; group 3 is None when the
    line's tail is malformed (so the caller raises rather than skips it)."""
    return re.compile(
        r"\n[ \t]*+("
        + trie(sorted(names))
        + r")(?![a-zA-Z0-9_:])(?:("
        + LABEL_SET
        + r")?+[ \t]++([^ \t\r\n]++)"
        + r"(?:[ \t]++-?[0-9]++(?:\.[0-9]++)?+(?:[eE][+-]?[0-9]++)?+)?+"
        + r"[ \t\r]*+(?=\n|\Z))?"
    )


def line_scanner(names: Iterable[str]) -> re.Pattern[str]:
    """`scanner`'s lines, each as (name, the rest of its line): the same matches in the same
    order, without the tail's grammar, which costs most of a scan (on a 56 KB vLLM page
    120 of 190 µs go to its 117 label sets); `split_tails` splits the rest with str methods."""
    return re.compile(r"\n[ \t]*+(" + trie(sorted(names)) + r")(?![a-zA-Z0-9_:])([^\n]*+)")


_WHOLE_LABEL_SET: Final = re.compile(LABEL_SET)


def split_tails(
    found: list[tuple[str, str]],
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]] | None:
    """(names, label sets, values) of `line_scanner`'s matches, equal to `scanner`'s groups
    when the label sets are grammatical (`grammatical`) and every line has the common form
    `name{labels} value` or `name value` (one space, no timestamp, no trailing blank, no
    carriage return); None for any other line, which `scanner`'s grammar then reads."""
    names, rests = zip(*found, strict=True)
    labelsets, spaces, raws = zip(*map(str.rpartition, rests, repeat(" ")), strict=True)
    if "" in spaces or "" in raws:
        return None
    joined = "".join(raws)
    if "\t" in joined or "\r" in joined:
        return None
    return names, labelsets, raws


def grammatical(
    labelsets: Iterable[str], known: Mapping[str, Any], *also_known: Container[str]
) -> bool:
    """Whether every non-empty label set is one `scanner` matches whole. One in `known` or
    `also_known` (the parsers' caches, which hold only sets the grammar matched) is not
    matched again."""
    for labels in set(labelsets).difference(known):  # a dict: looked up, not iterated
        unknown = labels and not any(labels in cache for cache in also_known)
        if unknown and _WHOLE_LABEL_SET.fullmatch(labels) is None:
            return False
    return True


def numbers(raws: Sequence[str]) -> list[float | None]:
    """`number` of each of `raws`, with one float() pass in C when all are plain."""
    joined = "".join(raws)
    if "_" not in joined and joined.isascii():
        with contextlib.suppress(ValueError):
            return list(map(float, raws))
    return list(map(number, raws))


def unescape(value: str) -> str:
    """Undo the exposition format's label escaping (`\\\\`, `\\"`, `\\n`); other escapes stay."""
    if "\\" not in value:
        return value
    return _ESCAPE.sub(lambda m: _UNESCAPE[m.group(0)], value)


def _labels(raw: str) -> dict[str, str] | str:
    """The label set `{...}` as a dict (cached: label sets repeat on every page), or why not."""
    found: dict[str, str] = {}
    for key, value in PAIR.findall(raw):
        if key in found:
            return f"duplicate label {key!r}"
        found[key] = unescape(value)
    if len(found.get("model_name", "")) > MAX_MODEL_NAME:
        return f"model_name is longer than {MAX_MODEL_NAME} characters"
    if len(raw) <= _LABEL_CACHE_KEY_MAX:
        if len(_LABEL_CACHE) >= _LABEL_CACHE_MAX:
            _LABEL_CACHE.clear()
        _LABEL_CACHE[raw] = found
    return found


def line_of(body: str, start: int) -> tuple[int, str]:
    """1-based line number and text of the line whose preceding newline is at `start`."""
    end = body.find("\n", start + 1)
    return body.count("\n", 0, start) + 1, body[start + 1 : end if end >= 0 else len(body)]


def decode(text: str | bytes | bytearray | memoryview) -> str:
    """The page as text; bytes must be UTF-8 (the error names the line that is not)."""
    if isinstance(text, str):
        return text
    raw = bytes(text)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        begin = raw.rfind(b"\n", 0, exc.start) + 1
        end = raw.find(b"\n", exc.start)
        line = raw[begin : end if end >= 0 else len(raw)].decode("utf-8", "replace")
        raise ParseError(
            "body is not valid UTF-8", raw.count(b"\n", 0, exc.start) + 1, line
        ) from None


_EMPTY: Final[dict[str, str]] = {}


def samples(
    text: str | bytes, pattern: re.Pattern[str], bounded: frozenset[str]
) -> Iterator[tuple[str, dict[str, str], float, int, str]]:
    """(name, labels, value, match start, body) of every line `pattern` matches.

    A name in `bounded` (cumulative values, request counts) must be finite, >= 0 and at
    most `MAX_VALUE`; any other (a ratio gauge) only a number. A duplicate series, a bad
    value or label set raises `ParseError` naming the line; `error(body, start, msg)`
    lets the caller do the same for its own rules.
    """
    body = "\n" + decode(text)
    seen: set[tuple[str, str | None]] = set()
    cache = _LABEL_CACHE
    for match in pattern.finditer(body):
        name, raw_labels, raw_value = match.groups()
        start = match.start()
        if raw_value is None:
            raise ParseError(f"cannot parse {name} sample", *line_of(body, start))
        key = (name, raw_labels)
        if key in seen:
            raise ParseError(f"duplicate series {name}", *line_of(body, start))
        seen.add(key)
        value = number(raw_value)
        if value is None:
            raise ParseError(f"bad value {raw_value!r} for {name}", *line_of(body, start))
        if name in bounded and not 0.0 <= value <= MAX_VALUE:
            raise ParseError(
                f"{name} must be a finite non-negative number at most 2**53, got {raw_value}",
                *line_of(body, start),
            )
        if raw_labels is None:
            labels = _EMPTY
        else:
            cached = cache.get(raw_labels)
            if cached is None:
                parsed = _labels(raw_labels)
                if isinstance(parsed, str):
                    raise ParseError(parsed, *line_of(body, start))
                cached = parsed
            labels = cached
        yield name, labels, value, start, body


#: One line `samples` yields: (name, labels, value, match start, body).
Row = tuple[str, dict[str, str], float, int, str]


def read(
    text: str | bytes,
    lines: re.Pattern[str],
    grammar: re.Pattern[str],
    bounded: frozenset[str],
    reader: Callable[[Iterable[Row]], T],
) -> T:
    """`reader` over the page's relevant lines, as `samples(text, grammar, bounded)` gives
    them, with the same result and the same `ParseError`.

    A page whose relevant lines all pass `samples`' checks is read in a few C-level passes
    (`rows`) rather than a match at a time; such a row's start is -1, so a `ParseError` the
    reader raises from one sends the page to `samples`, which names the line. `lines` is
    `line_scanner(names)` for the `scanner(names)` that `grammar` is (issue 31: the
    generator's per-line cost was a tenth of a large page's parse)."""
    if not isinstance(text, str):
        text = decode(text)
    fast = rows(text, lines, grammar, bounded)
    if fast is not None:
        with contextlib.suppress(ParseError):
            return reader(fast)
    return reader(samples(text, grammar, bounded))


#: Below it (in characters) `rows` reads a page with the grammar's tails, not the line
#: scan and `split_tails`, whose fixed cost is more on a page of a few lines read.
SMALL_PAGE: Final = 16384


def rows(
    text: str, lines: re.Pattern[str], grammar: re.Pattern[str], bounded: Container[str]
) -> list[Row] | None:
    """The rows `samples` yields, each with start -1, when every relevant line has a
    grammatical tail, a valid value within its bounds and a label set `samples` accepts, and
    no series repeats; None otherwise (`samples` then reads the page and names the line)."""
    body = "\n" + text
    if len(body) < SMALL_PAGE:
        return _few_rows(body, lines, bounded)
    found = lines.findall(body)
    if not found:
        return []
    columns = split_tails(found)
    cache = _LABEL_CACHE
    if columns is None or not grammatical(columns[1], cache):
        return None
    names, labelsets, raws = columns
    if len(set(zip(names, labelsets, strict=True))) < len(names):
        return None  # a series twice
    values = numbers(raws)
    if None in values:
        return None
    numeric = cast(list[float], values)
    if not (min(numeric) >= 0.0 and max(numeric) <= MAX_VALUE and not math.isnan(sum(numeric))):
        for name, value in zip(names, numeric, strict=True):
            if name in bounded and not 0.0 <= value <= MAX_VALUE:
                return None
    labels: list[dict[str, str] | str | None] = list(map(cache.get, labelsets))
    if None in labels:
        for index, raw in enumerate(labelsets):
            if labels[index] is None:
                labels[index] = _labels(raw) if raw else _EMPTY
    if any(isinstance(parsed, str) for parsed in labels):
        return None
    return list(zip(names, labels, numeric, repeat(-1), repeat(body)))  # type: ignore[arg-type]


def _few_rows(body: str, lines: re.Pattern[str], bounded: Container[str]) -> list[Row] | None:
    """`rows` of a small page: its few lines split and checked one by one, from one
    `findall` of `lines` (no match object or generator step per line, and no label-set
    grammar in the scan: most of a small page's cost), as `split_tails` and `grammatical`
    split and check them."""
    found: list[Row] = []
    seen: set[tuple[str, str]] = set()
    cache = _LABEL_CACHE
    for name, rest in lines.findall(body):
        raw_labels, space, raw = rest.rpartition(" ")
        key = (name, raw_labels)
        if not (space and raw) or "\t" in raw or "\r" in raw or "_" in raw or not raw.isascii():
            return None  # not `name{labels} value` (split_tails), or a value float() bends
        if key in seen:
            return None
        seen.add(key)
        try:
            value = float(raw)
        except ValueError:
            return None
        if name in bounded and not 0.0 <= value <= MAX_VALUE:
            return None
        labels: dict[str, str] | str | None = _EMPTY
        if raw_labels:
            labels = cache.get(raw_labels)
            if labels is None:
                if _WHOLE_LABEL_SET.fullmatch(raw_labels) is None:
                    return None
                labels = _labels(raw_labels)
        if labels is None or isinstance(labels, str):  # (None: not after the lines above)
            return None
        found.append((name, labels, value, -1, body))
    return found


def number(raw: str) -> float | None:
    """A sample value as the exposition format writes it, or None: float() also takes
    "1_000" and non-ASCII digits, which the format does not."""
    if "_" in raw or not raw.isascii():
        return None
    try:
        return float(raw)
    except ValueError:
        return None


def model_of(
    name: str, labels: dict[str, str], models: Mapping[str, Any], body: str, start: int
) -> str:
    """The sample's `model_name`, or a ParseError: missing, or one model more than
    `MAX_MODELS` on the page (`models`: those seen so far)."""
    model = labels.get("model_name")
    if not model:
        raise error(body, start, f"{name} has no model_name label")
    if model not in models and len(models) >= MAX_MODELS:
        raise error(body, start, f"too many models (more than {MAX_MODELS})")
    return model


def error(body: str, start: int, message: str) -> ParseError:
    """A `ParseError` for the line at `start` of `body` (as `samples` yields them)."""
    return ParseError(message, *line_of(body, start))


def position(body: str, start: int, name: str, raw: str | None) -> int:
    """A draft-position label as an index 0..MAX_POSITIONS-1, or a ParseError."""
    if raw is None or not raw.isascii() or not raw.isdigit() or int(raw) >= MAX_POSITIONS:
        raise error(body, start, f"{name} needs a position label 0..{MAX_POSITIONS - 1}")
    return int(raw)


def check_sum(body: str, start: int, name: str, model: str, total: float) -> float:
    """`total`, a sum over series, or a ParseError when it passes `MAX_VALUE`."""
    if total > MAX_VALUE:
        raise error(body, start, f"{name} of model {model!r} sums to more than 2**53")
    return total


def where(scan: re.Pattern[str], body: str, index: int) -> tuple[int, str]:
    """Line number and text of the index-th match of `scan` in `body`, for a ParseError: a
    parser that scans with findall (no match object per line) finds its bad line again."""
    for i, match in enumerate(scan.finditer(body)):
        if i == index:
            return line_of(body, match.start())
    raise AssertionError(index)  # pragma: no cover - the index came from the same scan


def histogram(total: float | None, count: float | None, name: str, model: str) -> Histogram | None:
    """The histogram of a family's summed `_sum` and `_count`; None when the page has neither."""
    if total is None and count is None:
        return None
    if total is None or count is None:
        missing = "_sum" if total is None else "_count"
        raise ParseError(f"{name} of model {model!r} has no {missing} series")
    return Histogram.of(total, count, (), b"")


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
    bounds = tuple(sorted(per_le))
    # Pages list bounds ascending, so the counts are usually in order already.
    in_order = bounds == tuple(per_le)
    counts = per_le.values() if in_order else map(per_le.__getitem__, bounds)
    return Histogram.of(histogram.sum, histogram.count, bounds, counts)
