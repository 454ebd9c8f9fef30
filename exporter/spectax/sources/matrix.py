"""A Prometheus range-vector answer decoded a series at a time, as its bytes arrive.

Why not `json.loads` of the whole answer: at 20,000 replicas one query's answer is
~100 MB of JSON, its decoded form (a list, a float and a str per sample) several times
that, and the 17 queries of a window are in flight together. Decoded here, a series is
handed on as soon as its bytes are in, and its samples become two flat lists (the
timestamps as floats, the values as their text) found by two compiled patterns rather
than a list object per sample: about a third of `json.loads`'s CPU, and memory bounded by
a series, not an answer.

It relies on Prometheus's own encoding (the one of Prometheus, Thanos and Mimir):
`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{...},
"values":[[t,"v"],...]},...]}...}`. Any other layout (another key order, whitespace, an
error) is read whole with `json.loads`, as before.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Any

#: One series: its labels, the timestamps of its samples, their values as sent.
Series = tuple[dict[str, str], list[float], list[str]]

_HEAD = '{"status":"success","data":{"resultType":"matrix","result":['
_METRIC = '{"metric":'
_VALUES = ',"values":['
_STAMPS = re.compile(r'\[([^,\[\]"]*),')
_TEXTS = re.compile(r',"([^"]*)"\]')
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
                    stamps = [float(t) for t, _ in values]
                    series.append((dict(item["metric"]), stamps, [str(v) for _, v in values]))
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
            if not buffer.startswith(_VALUES, end) or not isinstance(labels, dict):
                raise MatrixError(f"unexpected {buffer[at : at + 80]!r} in the result")
            first = end + len(_VALUES)
            if buffer.startswith("]}", first):  # no samples
                out.append((labels, [], []))
                at = first + 2
                continue
            last = buffer.find("]]}", first)  # values hold numbers only: no "]" inside
            if last < 0:
                break
            values = buffer[first : last + 1]
            stamps, texts = _STAMPS.findall(values), _TEXTS.findall(values)
            if not len(stamps) == len(texts) == values.count("["):
                raise MatrixError(f"unexpected samples {values[:80]!r}")
            out.append((labels, list(map(float, stamps)), texts))
            at = last + 3
        self._buffer = buffer[at:]
        return out
