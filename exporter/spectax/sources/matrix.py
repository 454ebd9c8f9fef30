"""A Prometheus answer (a matrix: of a range selector, or of a range query) decoded a
series at a time, as its bytes arrive.

Why not `json.loads` of the whole answer: at 20,000 replicas one query's answer is
~100 MB of JSON, its decoded form (a list, a float and a str per sample) several times
that, and the queries of a window are in flight together. Decoded here, a series is
handed on as soon as its bytes are in, and its samples become two flat lists of their
texts (timestamps and values as sent), split out by `str.replace` and `str.split` rather
than a list object per sample; the reader converts only the ones it needs (a whole-number
counter needs its timestamps only where a window boundary falls): memory bounded by a
series, not an answer, and a fraction of `json.loads`'s CPU.

It relies on Prometheus's own encoding (the one of Prometheus, Thanos and Mimir):
`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{...},
"values":[[t,"v"],...]},...]}...}`. Any other layout
(another key order, whitespace, an error) is read whole with `json.loads`, as before.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Any

#: One series: its labels, the timestamps of its samples and their values, as sent.
Series = tuple[dict[str, str], list[str], list[str]]

_HEAD = '{"status":"success","data":{"resultType":"matrix","result":['
_METRIC = '{"metric":'
_VALUES, _CLOSE = ',"values":[', "]]}"
_STAMPS = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:,[0-9]+(?:\.[0-9]+)?)*")  # t,t,...
_LARGEST_LABELS = 1 << 20  # a series' labels: more than this is no Prometheus answer


class MatrixError(ValueError):
    """The answer began as Prometheus's but did not go on as one."""


class MatrixDecoder:
    """Feed it an answer's bytes as they come; it returns the series completed so far."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._buffer = ""  # the text not decoded yet (in streaming mode: less than a series)
        self._streaming: bool | None = None  # None until the head has been seen
        self._rest: list[str] = []  # the whole answer (other layouts) or what follows the series
        self._labels = json.JSONDecoder()
        self._ended = False  # the result list is closed

    def feed(self, chunk: bytes) -> list[Series]:
        text = self._utf8.decode(chunk)
        if self._streaming is False or self._ended:
            self._rest.append(text)
            return []
        self._buffer += text
        if self._streaming is None:
            if len(self._buffer) < len(_HEAD) and _HEAD.startswith(self._buffer):
                return []
            self._streaming = self._buffer.startswith(_HEAD)
            if not self._streaming:
                self._rest.append(self._buffer)
                self._buffer = ""
                return []
            self._buffer = self._buffer[len(_HEAD) :]
        return self._series()

    def finish(self) -> tuple[Any, list[Series], str]:
        """(the answer without its series, or None if it is no JSON; the series of an answer
        read whole; the text, for an error message)."""
        self.feed(self._utf8.decode(b"", final=True).encode())
        if self._streaming:
            if not self._ended:
                raise MatrixError("the answer ended inside its result")
            rest = "".join(self._rest)
            return json.loads(_HEAD + rest), [], rest
        text = self._buffer + "".join(self._rest)
        try:
            body = json.loads(text)
        except ValueError:
            return None, [], text  # a proxy's error page
        data = body.get("data") if isinstance(body, dict) else None
        result = data.get("result") if isinstance(data, dict) else None
        series: list[Series] = []
        if isinstance(data, dict) and isinstance(result, list):
            try:
                for item in result:
                    values = item["values"]
                    stamps = [repr(float(t)) for t, _ in values]
                    series.append((_labels(item["metric"]), stamps, [str(v) for _, v in values]))
            except (KeyError, TypeError, ValueError) as exc:
                raise MatrixError(f"unexpected series in the result: {exc!r}"[:200]) from None
            data["result"] = []
        return body, series, text

    def _series(self) -> list[Series]:
        out: list[Series] = []
        buffer, at = self._buffer, 0
        while at < len(buffer):
            if buffer[at] == ",":
                at += 1
                continue
            if buffer[at] == "]":  # the result list ends; the rest is read whole at the end
                self._ended = True
                self._rest.append(buffer[at:])
                at = len(buffer)
                break
            if len(buffer) - at < len(_METRIC):
                break
            if not buffer.startswith(_METRIC, at):
                raise MatrixError(f"unexpected {buffer[at : at + 40]!r} in the result")
            try:
                labels, end = self._labels.raw_decode(buffer, at + len(_METRIC))
            except ValueError:
                if len(buffer) - at > _LARGEST_LABELS:
                    raise MatrixError("a series' labels do not end") from None
                break  # not all in yet
            if len(buffer) - end < len(_VALUES) + 2:
                break
            if not buffer.startswith(_VALUES, end):
                raise MatrixError(f"unexpected {buffer[at : at + 80]!r} in the result")
            labels = _labels(labels)
            first = end + len(_VALUES)
            if buffer.startswith("]}", first):  # no samples
                out.append((labels, [], []))
                at = first + 2
                continue
            last = buffer.find(_CLOSE, first)  # values hold numbers only: no "]" inside
            if last < 0:
                break
            out.append((labels, *_samples(buffer[first : last + 1])))
            at = last + len(_CLOSE)
        self._buffer = buffer[at:]
        return out


def _labels(labels: Any) -> dict[str, str]:
    """A series' labels, which Prometheus sends as strings only."""
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise MatrixError(f"unexpected labels {str(labels)[:80]!r}")
    return labels


def _samples(values: str) -> tuple[list[str], list[str]]:
    """`[t,"v"],[t,"v"]` (or `[t,"v"]`) as its timestamps and values: the values are
    numbers as Prometheus writes them ("12", "1.5e-05", "NaN", "+Inf"), so hold no comma,
    quote or bracket; the timestamps are seconds since 1970 with up to 3 decimals. Anything
    else is no Prometheus answer (counted by delimiters: every sample `[t,"v"]`, joined
    by `,`)."""
    parts = values.replace('"', "").replace("[", "").replace("]", "").split(",")
    stamps, texts = parts[0::2], parts[1::2]
    n = len(texts)
    if not (
        len(stamps) == n == values.count("[") == values.count(',"') == values.count('"]')
        and values.count('"') == 2 * n
        and values.count("],[") == n - 1
        and _STAMPS.fullmatch(",".join(stamps))
    ):
        raise MatrixError(f"unexpected samples {values[:80]!r}")
    return stamps, texts
