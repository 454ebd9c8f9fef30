"""vLLM `/metrics` page -> `EngineSample`.

Only a handful of the ~650 lines on a vLLM page matter, so instead of parsing
the whole exposition we scan for the lines we need with one compiled regular
expression (anchored on a newline, the scan runs in C), and parse only those
lines. Everything else (comments, the buckets of histograms other than the four
latency ones, `*_created`, `python_*`, other `vllm:` families) is skipped unvalidated.

A server's next page has the same series in the same order, only other values: the first
page of a layout is read line by line (`_accumulate`, which names a bad line), and the
layout it teaches (`_Layout`: which line goes into which sum) sums the next pages' values
in a few C-level passes. Both give the same `EngineSample` (tests/test_engine_vllm.py).

Covers vLLM V1 (0.11 - 0.33) and the V0 legacy names (before 0.11); see
/work/shared/ENGINES.md. Series are summed per `model_name` over every other
label (`engine` = data-parallel rank, `finished_reason`, ...).

Strictness on the lines that are read: a bad value, an unterminated label set
or quote, a missing/empty or over-long `model_name`, a bad `position` or `le`, a
histogram with buckets but no +Inf one, a duplicate series, and a cumulative value
(counter, histogram `_sum`/`_count`/`_bucket`) or request-count gauge that is
negative, NaN, infinite or above `MAX_VALUE` (the FLOP and byte estimates: negative,
NaN or infinite) raise `ParseError` naming the 1-based line. What passes fits the
store's columns, so one target's page can never stop the history of the others. The V0
legacy gauges are passed through as reported (vLLM V0 could report NaN there before the
first draft).
"""

from __future__ import annotations

import importlib
import itertools
import math
import re
import sys
import weakref
from array import array
from collections.abc import Callable, Mapping
from functools import partial, reduce
from itertools import repeat
from operator import add, getitem, itemgetter
from typing import Final, cast

from spectax.engines.base import (
    Capability,
    EngineSample,
    Histogram,
    ModelSample,
    ParseError,
    shared_bounds,
)
from spectax.engines.scan import (
    MAX_MODEL_NAME,
    MAX_MODELS,
    MAX_POSITIONS,
    MAX_VALUE,
    PAIR,
    grammatical,
    histogram,
    line_scanner,
    number,
    numbers,
    scanner,
    trie,
    unescape,
    with_buckets,
)
from spectax.engines.scan import decode as _decode
from spectax.engines.scan import where as _where
from spectax.engines.vllm_cache import PARSED as _CACHE_CONFIG_LABELS
from spectax.engines.vllm_cache import CacheConfig

__all__ = ["MAX_MODELS", "MAX_MODEL_NAME", "MAX_POSITIONS", "MAX_VALUE", "parse"]

ENGINE: Final = "vllm"

# Raw label-set text -> (model_name or None, position or None, le as a float or None).
# Label sets repeat on every page, so they are parsed once per process. Bounded: cleared
# when full, and only sets up to 1 KiB are kept (a real one is ~100 characters), so a
# hostile page cannot make the cache hold 4,096 copies of a megabyte-long label set.
_LABEL_CACHE: dict[str, tuple[str | None, str | None, float | None]] = {}
_LABEL_CACHE_MAX: Final = 4096
_LABEL_CACHE_KEY_MAX: Final = 1024


def _parse_labels(labels: str) -> tuple[str | None, str | None, float | None] | str:
    """(model_name, position, le) from an already validated `{...}`, or an error message."""
    found: dict[str, str] = {}
    for key, raw in PAIR.findall(labels):
        if key in found:
            return f"duplicate label {key!r}"
        found[key] = raw
    model = found.get("model_name")
    position = found.get("position")
    le: float | None = None
    if "le" in found:
        try:
            le = float(found["le"])
        except ValueError:
            return f"bad bucket bound le={found['le']!r}"
        if math.isnan(le) or "_" in found["le"] or not found["le"].isascii():
            return f"bad bucket bound le={found['le']!r}"
    result = (
        unescape(model) if model else None,
        unescape(position) if position is not None else None,
        le,
    )
    if result[0] is not None and len(result[0]) > MAX_MODEL_NAME:
        return (
            f"model_name is {len(result[0])} characters long, more than {MAX_MODEL_NAME}: "
            "serve the model under a shorter name (vLLM --served-model-name)"
        )
    if len(labels) <= _LABEL_CACHE_KEY_MAX:
        if len(_LABEL_CACHE) >= _LABEL_CACHE_MAX:
            _LABEL_CACHE.clear()
        _LABEL_CACHE[labels] = result
    return result


#: The estimated FLOPs and bytes (vLLM --enable-mfu-metrics) pass 2**53 within seconds on a
#: GPU: they are only bounded to be finite, and stored as floats.
_LARGEST_FLOAT: Final = sys.float_info.max

# Accumulator slots, one list of these per model.
(
    _GEN,
    _PROMPT,
    _FINISHED,
    _RUNNING,
    _WAITING,
    _DRAFTS,
    _DRAFT_TOKENS,
    _ACCEPTED,
    _ITER_SUM,
    _ITER_COUNT,
    _ITL_SUM,
    _ITL_COUNT,
    _TPOT_SUM,
    _TPOT_COUNT,
    _V0_TPOT_SUM,
    _V0_TPOT_COUNT,
    _LEGACY_RATE,
    _LEGACY_EFF,
    _FLOPS,
    _READ_BYTES,
    _TTFT_SUM,
    _TTFT_COUNT,
    _E2E_SUM,
    _E2E_COUNT,
    _PREEMPTIONS,
    _KV_USAGE,  # summed over ranks; divided by _KV_USAGE_SERIES: the ranks' mean
    _KV_USAGE_SERIES,
    _PREFILL_TIME,
    _N_SLOTS,
) = range(29)
_PER_POS: Final = -1
_PROCESS_START: Final = -2
_CACHE_CONFIG: Final = -3

# How a value is checked and combined.
_CUMULATIVE: Final = 0  # counter / histogram _sum / _count: finite, >= 0, summed
_COUNT_GAUGE: Final = 1  # num_requests_*: finite, >= 0, summed over ranks
_LEGACY_GAUGE: Final = 2  # V0 ratio gauges: as reported, one series per model
_ESTIMATE: Final = 3  # estimated FLOPs / bytes: finite, >= 0, summed, with no 2**53 bound
_FRACTION: Final = 4  # KV-cache usage: 0..1, averaged over ranks

_CACHE_CONFIG_INFO: Final = "vllm:cache_config_info"
_FAMILIES: Final[dict[str, tuple[int, int]]] = {
    # vLLM V1 (and the V0 names that kept their meaning).
    "vllm:generation_tokens_total": (_GEN, _CUMULATIVE),
    "vllm:prompt_tokens_total": (_PROMPT, _CUMULATIVE),
    "vllm:request_success_total": (_FINISHED, _CUMULATIVE),
    "vllm:num_requests_running": (_RUNNING, _COUNT_GAUGE),
    "vllm:num_requests_waiting": (_WAITING, _COUNT_GAUGE),
    "vllm:num_preemptions_total": (_PREEMPTIONS, _CUMULATIVE),
    "vllm:kv_cache_usage_perc": (_KV_USAGE, _FRACTION),  # a 0-1 fraction despite the name
    "vllm:gpu_cache_usage_perc": (_KV_USAGE, _FRACTION),  # its name until 0.11
    # Settings as labels, one series per rank and no model_name: the page's KV cache.
    _CACHE_CONFIG_INFO: (_CACHE_CONFIG, _LEGACY_GAUGE),
    "vllm:spec_decode_num_drafts_total": (_DRAFTS, _CUMULATIVE),
    "vllm:spec_decode_num_draft_tokens_total": (_DRAFT_TOKENS, _CUMULATIVE),
    "vllm:spec_decode_num_accepted_tokens_total": (_ACCEPTED, _CUMULATIVE),
    "vllm:spec_decode_num_accepted_tokens_per_pos_total": (_PER_POS, _CUMULATIVE),
    "vllm:iteration_tokens_total_sum": (_ITER_SUM, _CUMULATIVE),
    "vllm:iteration_tokens_total_count": (_ITER_COUNT, _CUMULATIVE),
    "vllm:inter_token_latency_seconds_sum": (_ITL_SUM, _CUMULATIVE),
    "vllm:inter_token_latency_seconds_count": (_ITL_COUNT, _CUMULATIVE),
    "vllm:request_time_per_output_token_seconds_sum": (_TPOT_SUM, _CUMULATIVE),
    "vllm:request_time_per_output_token_seconds_count": (_TPOT_COUNT, _CUMULATIVE),
    "vllm:time_to_first_token_seconds_sum": (_TTFT_SUM, _CUMULATIVE),
    "vllm:time_to_first_token_seconds_count": (_TTFT_COUNT, _CUMULATIVE),
    "vllm:e2e_request_latency_seconds_sum": (_E2E_SUM, _CUMULATIVE),
    "vllm:e2e_request_latency_seconds_count": (_E2E_COUNT, _CUMULATIVE),
    # The finished requests' prefill time (scheduled to first token), summed: with the
    # inter-token latencies' sum, the running requests' integral (ModelSample.prefill_seconds).
    "vllm:request_prefill_time_seconds_sum": (_PREFILL_TIME, _CUMULATIVE),
    # Non-zero only with --enable-mfu-metrics (vLLM 0.32+; v1/metrics/perf.py).
    "vllm:estimated_flops_per_gpu_total": (_FLOPS, _ESTIMATE),
    "vllm:estimated_read_bytes_per_gpu_total": (_READ_BYTES, _ESTIMATE),
    # vLLM V0 only (before 0.11).
    "vllm:spec_decode_draft_acceptance_rate": (_LEGACY_RATE, _LEGACY_GAUGE),
    "vllm:spec_decode_efficiency": (_LEGACY_EFF, _LEGACY_GAUGE),
    "vllm:time_per_output_token_seconds_sum": (_V0_TPOT_SUM, _CUMULATIVE),
    "vllm:time_per_output_token_seconds_count": (_V0_TPOT_COUNT, _CUMULATIVE),
    # Unlabelled process gauge (absent in prometheus multiprocess mode).
    "process_start_time_seconds": (_PROCESS_START, _LEGACY_GAUGE),
}

#: The kind of each model slot's family (one kind a slot).
_FAMILIES_KIND: Final = {slot: kind for slot, kind in _FAMILIES.values()}

_HISTOGRAMS: Final = {
    (_ITER_SUM, _ITER_COUNT): "vllm:iteration_tokens_total",
    (_ITL_SUM, _ITL_COUNT): "vllm:inter_token_latency_seconds",
    (_TPOT_SUM, _TPOT_COUNT): "vllm:request_time_per_output_token_seconds",
    (_V0_TPOT_SUM, _V0_TPOT_COUNT): "vllm:time_per_output_token_seconds",
    (_TTFT_SUM, _TTFT_COUNT): "vllm:time_to_first_token_seconds",
    (_E2E_SUM, _E2E_COUNT): "vllm:e2e_request_latency_seconds",
}
# The latency histograms whose `_bucket` series are read (quantiles), each with its slot
# below _BUCKET: a bucket line's slot is _BUCKET - its index here.
_BUCKETED: Final = tuple((at, at + 1) for at in (_ITL_SUM, _TPOT_SUM, _TTFT_SUM, _E2E_SUM))
_BUCKET: Final = -10
_FAMILIES.update(
    {f"{_HISTOGRAMS[h]}_bucket": (_BUCKET - i, _CUMULATIVE) for i, h in enumerate(_BUCKETED)}
)


# One relevant sample line. The body is prefixed with "\n" so every line starts
# after a newline. When the tail (labels, value, optional timestamp) does not
# match, group 3 is empty -> ParseError, so a relevant line is never skipped
# silently. `_LINES` finds the same lines, split by str methods in the common case.
_SCAN: Final = scanner(_FAMILIES)
_LINES: Final = line_scanner(_FAMILIES)
#: `_LINES`' lines whole (name and rest in one string: no tuple, one string fewer a line).
_WHOLE_LINES: Final = re.compile(
    r"\n[ \t]*+((?:" + trie(sorted(_FAMILIES)) + r")(?![a-zA-Z0-9_:])[^\n]*+)"
)
#: Below it (in characters) a page is read with `_SCAN`'s grammar, not `_LINES` and
#: `split_tails`: the vLLM page without engine families (--disable-log-stats, 6.4 KB, one
#: line read) took 16 µs the second way, 10.6 the grammar's; pages with them are 50 KB+.
_SMALL_PAGE: Final = 16384
#: A relevant line, at the start of a line: `_WHOLE_LINES`' rule.
_RELEVANT: Final = re.compile(r"[ \t]*+(?:" + trie(sorted(_FAMILIES)) + r")(?![a-zA-Z0-9_:])")
#: Templates (`_Template`), the last one a page matched first. Bounded: each holds 90-170
#: KB (16: ~2.7 MB at most), and a page adds nothing to one.
_TEMPLATES: list[_Template] = []
_MAX_TEMPLATES: Final = 16
#: `re.compile` without its cache, which would keep up to 512 templates' patterns alive.
_UNCACHED_COMPILE: Final = importlib.import_module("re._compiler").compile
#: A layout gets a template on its third page that no template of it matched (a template
#: costs ~70 ms to compile: a layout seen twice does not get one); each later one after
#: four times as many such pages as the last (12, 48, ... 3,072 at most), so a layout
#: whose pages keep changing compiles ever more rarely (at worst ~23 us a page on average).
#: A layout has as many templates as its pages have variants, within `_MAX_TEMPLATES`:
#: servers with the same series differ in the lines spectax does not read (the
#: `http_requests_total` handlers each was asked on, a `status="4xx"` after a bad request),
#: and a variant without a template was read ~1.8x slower (bench/README, "Several
#: templates a layout").
_TEMPLATE_AFTER: Final = 3

# (model, index in _BUCKETED) -> le -> count summed over ranks.
_PerBound = dict[tuple[str, int], dict[float, float]]
_Buckets = Mapping[tuple[str, int], dict[float, float]]
# Model -> its histograms by their (sum, count) slots, None for one the page lacks.
_Built = dict[str, dict[tuple[int, int], Histogram | None]]
_Info = tuple[str | None, str | None, float | None]  # model_name, position, le
_Columns = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]  # names, label sets, values
_Accumulated = tuple[
    dict[str, list[float | None]], dict[str, dict[int, float]], _Buckets, float | None, CacheConfig
]


class LastTemplate:
    """Which template one server's last page matched (weakly: a template dropped is not
    kept for it), so that its next page, most likely of the same variant, is tried against
    that one alone. A server whose page matched none is looked for again only every
    `_SEARCH_EVERY` pages: its variant may have no template yet."""

    __slots__ = ("skip", "template")

    def __init__(self) -> None:
        self.template: weakref.ref[_Template] | None = None
        self.skip = 0  # pages to read before looking through every template again


def reader() -> Callable[[str | bytes], EngineSample]:
    """`parse` for one server's pages, remembering which template its last page matched."""
    return partial(parse, last=LastTemplate())


def parse(text: str | bytes, last: LastTemplate | None = None) -> EngineSample:
    """Parse a vLLM `/metrics` page (text exposition format) into an `EngineSample`.

    `text` is the decoded body; bytes are accepted too and must be UTF-8.
    A page without any vLLM family (`--disable-log-stats`) gives `models == {}`.
    Raises `ParseError` for malformed relevant lines (see the module docstring).
    `last` is the page's server's (`reader`): only which template is tried first.
    """
    if not isinstance(text, str):
        text = _decode(text)
    if _TEMPLATES and len(text) >= _SMALL_PAGE:
        templated = _through_template(text, last)
        if templated is not None:
            return templated
    body = "\n" + text
    columns: _Columns | None
    if len(body) < _SMALL_PAGE:  # a few lines: the grammar's tails cost less than splitting
        columns, checked = _grammar_columns(body), True
    else:
        lines = _WHOLE_LINES.findall(body)
        if lines:
            known = _through_known_layout(lines, text, last)
            if known is not None:
                return known
        columns, checked = (_split_lines(lines) if lines else ((), (), ())), False
    if columns is not None:
        if not columns[0]:
            return EngineSample(engine=ENGINE, models={})
        layout = _LAYOUTS.get(columns[:2])
        if layout is not None:  # the label sets were grammatical when it was learnt
            layout.used = next(_READS)
            if not checked:
                layout.index_by_edges(*columns[:2])
            values = numbers(columns[2])
            if None not in values:
                sample = layout.sample(values)  # type: ignore[arg-type]
                if sample is not None:
                    return sample
        elif not checked and not grammatical(columns[1], _LABEL_CACHE, _CACHE_CONFIG_LABELS):
            columns = None
    if columns is None:  # a line of another form (timestamp, blanks, CRLF, a bad tail)
        columns = _grammar_columns(body)
    names, labelsets, raws = columns
    values = numbers(raws)
    infos = _labels_of(names, labelsets)
    summed = _accumulate(body, names, labelsets, raws, values, infos)
    sample = _sample(summed)
    _learn(names, labelsets, infos, values, summed, sample)
    return sample


def _grammar_columns(body: str) -> _Columns:
    """(names, label sets, values) of the relevant lines as `_SCAN`'s grammar reads them."""
    found = _SCAN.findall(body)
    if not found:
        return (), (), ()
    names, labelsets, raws = zip(*found, strict=True)
    return names, labelsets, raws


def _split_lines(lines: list[str]) -> _Columns | None:
    """`split_tails` of `_LINES`' matches, from `_WHOLE_LINES`' (the same lines whole): the
    same columns, or None where it gives None or the label sets cannot be grammatical (a
    name followed by anything but a label set or its value: the grammar then reads it)."""
    heads, spaces, raws = zip(*map(str.rpartition, lines, repeat(" ")), strict=True)
    names, braces, labels = zip(*map(str.partition, heads, repeat("{")), strict=True)
    if "" in spaces or "" in raws or not all(map(_FAMILIES.__contains__, names)):
        return None  # a name + what is not a label set (a family name has no other char)
    joined = "".join(raws)
    if "\t" in joined or "\r" in joined:
        return None
    return names, tuple(map(add, braces, labels)), raws


def _through_known_layout(
    lines: list[str], text: str, last: LastTemplate | None = None
) -> EngineSample | None:
    """The sample of a page whose lines are those of a layout learnt (`_BY_EDGES`, checked
    line by line: each starts with its name, label set and a space, and the rest is one
    value), summed by it; None otherwise, or when a value is out of its bounds (the page is
    then read as any other). The columns `split_tails` would give are not built: splitting
    every line was a seventh of a page's parse (issue 31)."""
    edges = (len(lines), lines[0].rpartition(" ")[0], lines[-1].rpartition(" ")[0])
    layout = _BY_EDGES.get(edges)
    if layout is None or not all(map(str.startswith, lines, layout.heads)):
        return None
    raws = cast(list[str], list(map(getitem, lines, layout.tails)))
    joined = "".join(raws)
    if " " in joined or "\t" in joined or "\r" in joined:
        return None  # a timestamp or another blank: split_tails would have read otherwise
    layout.used = next(_READS)
    values = numbers(raws)
    if None in values:
        return None
    sample = layout.sample(values)  # type: ignore[arg-type]
    if sample is not None:  # a page no template of its layout matched
        layout.edge_reads += 1
        if layout.edge_reads == _TEMPLATE_AFTER << min(2 * layout.templates_built, 10):
            made = _make_template(text, layout, raws)
            if made is not None and last is not None:
                last.template, last.skip = weakref.ref(made), 0
    return sample


class _Template:
    """A learnt layout's whole page as fixed text and values (issue 31, third pass): the
    text between two values (a value's newline, the comments and the next line's name,
    label set and blank) is the same on every page of a layout while no series comes or
    goes, so one compiled pattern built from a page skips each such stretch in one step
    (`(?s:.){n}`: no per-character loop) and captures it, and each value as the rest of
    its line; the stretches are then compared with the learnt page's, all at once, in C.
    A page that matches has every line where the learnt page had it, with the same text
    up to its value: the same relevant lines in the same order, and no other, as the scan
    would find them (56 KB: ~36 us against the scan's ~56 and its line checks' ~13)."""

    __slots__ = (
        "__weakref__",
        "fixed",
        "fixed_of",
        "layout",
        "near",
        "pattern",
        "probe",
        "values_of",
    )

    def __init__(self, text: str, layout: _Layout) -> None:
        parts: list[str] = []
        fixed: list[str] = []
        fixed_at: list[int] = []
        values_at: list[int] = []
        stretch: list[str] = []
        lines = text.split("\n")
        probe_at = -1
        for index, line in enumerate(lines):
            last = index == len(lines) - 1
            head, space, _ = line.rpartition(" ")
            if space and not line.startswith("#"):  # a sample line (or one read as such)
                stretch.append(head + space)
                fixed_at.append(len(parts))
                fixed.append("".join(stretch))
                parts.append(_stretch(fixed[-1]))
                stretch = [] if last else ["\n"]
                if _RELEVANT.match(line):
                    if "model_name=" in head or probe_at < 0:
                        probe_at = len(fixed) - 1
                    values_at.append(len(parts))
                    parts.append(r"([^ \t\r\n]++)")
                else:
                    parts.append(r"[^\n]*+")
            else:
                stretch.append(line if last else line + "\n")
        fixed_at.append(len(parts))
        fixed.append("".join(stretch))
        parts.append(_stretch(fixed[-1]))
        groups = [None] * len(parts)
        numbered = [i for i, part in enumerate(parts) if part.startswith("(")]
        for group, at in enumerate(numbered):
            groups[at] = group  # type: ignore[call-overload]
        # re._compiler: re.compile would keep the pattern in re's own cache (512 of them)
        self.pattern = _UNCACHED_COMPILE("".join(parts), 0)
        self.fixed = tuple(fixed)
        self.fixed_of = itemgetter(*(groups[at] for at in fixed_at))
        self.values_of = itemgetter(*(groups[at] for at in values_at))
        self.layout = layout
        # Which template a page may be: the stretch before its last relevant value with a
        # model_name (its name and label set), looked for near where it was.
        self.probe = fixed[probe_at]
        start = sum(map(len, fixed[:probe_at]))
        self.near = (max(0, start - len(text) // 8), start + len(fixed[probe_at]) + len(text) // 8)

    def raws(self, text: str) -> tuple[str, ...] | None:
        """The page's relevant values, or None when it is not this template's page."""
        match = self.pattern.fullmatch(text)
        if match is None:
            return None
        groups = match.groups()
        if self.fixed_of(groups) != self.fixed:
            return None
        return cast(tuple[str, ...], self.values_of(groups))


def _stretch(fixed: str) -> str:
    """The pattern of a stretch of fixed text: skipped in one step and captured (compared
    once the page is matched), its first and last characters matched as they are (a
    newline, a blank): a page out of step with the template, such as another server's with
    one more line, fails at the next line rather than at its end (~1 us, not ~35)."""
    if len(fixed) < 2:
        return f"((?s:.){{{len(fixed)}}})"
    return f"({re.escape(fixed[0])}(?s:.){{{len(fixed) - 2}}}{re.escape(fixed[-1])})"


_INDENTS = (" ", "\t")  # what the line-by-line reading strips before a line's name
_INDENTED = tuple("\n" + indent for indent in _INDENTS)


def _make_template(text: str, layout: _Layout, raws: list[str]) -> _Template | None:
    """Give `layout` a template of its page `text` (whose relevant values are `raws`), in
    place of the one matched longest ago when there are `_MAX_TEMPLATES` (each 90-170 KB:
    pattern and stretches of a 56-71 KB page; ~70 ms to compile), on a layout's
    `_TEMPLATE_AFTER`th page that none of its templates matched (4 times as many for each
    one built before)."""
    if (
        not text.endswith("\n")
        or text.startswith(_INDENTS)
        or any(map(text.__contains__, _INDENTED))
    ):
        return None  # an indented line: the template skips what follows its first word, but
        # the line-by-line reading strips the indent and may find a series there
    layout.templates_built += 1
    layout.edge_reads = 0
    template = _Template(text, layout)
    if template.raws(text) != tuple(raws):
        return None  # (a line the scan and the split read otherwise: not a template's page)
    if len(_TEMPLATES) >= _MAX_TEMPLATES:  # the one matched longest ago goes
        _TEMPLATES.pop()
    _TEMPLATES.insert(0, template)
    return template


def _drop_templates(layout: _Layout) -> None:
    """Forget `layout`'s templates (the layout is given up)."""
    _TEMPLATES[:] = [t for t in _TEMPLATES if t.layout is not layout]


def _through_template(text: str, last: LastTemplate | None) -> EngineSample | None:
    """The sample of a page that is a template's (`_Template`), or None: a page no template
    has, or one that differs from them (read as any other).

    A template tried costs nearly a whole match even when it fails (~13-35 us of a 56 KB
    page's ~37: the lines that differ between servers, their HTTP handlers', are near its
    end), so few are tried. With its server's `last`: the template its last page matched
    alone; else, when that one no longer matches or every `_SEARCH_EVERY` pages, all of
    them. Without: at most two whose probe the page holds, the last one matched first."""
    if last is None:
        return _search(text, None, 2)
    if last.template is not None:
        own = last.template()
        if own is not None:
            sample = _through(own, text)
            if sample is not _OTHER_PAGE:
                return cast(EngineSample | None, sample)
        last.template = None  # its page changed, or its template was dropped: look again
    elif last.skip:
        last.skip -= 1
        return None
    return _search(text, last, len(_TEMPLATES))


#: How often (in its pages) a server whose page matched no template looks through them all
#: again: its variant's template may since have been made from another server's page.
_SEARCH_EVERY: Final = 8


def _search(text: str, last: LastTemplate | None, tries: int) -> EngineSample | None:
    """The sample of `text` read through the first template that matches it, of at most
    `tries` whose probe the page holds, the last one matched first; remembered in `last`."""
    for template in _TEMPLATES:
        lo, hi = template.near
        if text.find(template.probe, lo, hi) < 0:
            continue
        sample = _through(template, text)
        if sample is not _OTHER_PAGE:
            if last is not None:
                last.template = weakref.ref(template)
            return cast(EngineSample | None, sample)
        tries -= 1
        if not tries:
            break
    if last is not None:
        last.skip = _SEARCH_EVERY
    return None


#: What `_through` gives for a page that is not its template's.
_OTHER_PAGE: Final = object()


def _through(template: _Template, text: str) -> EngineSample | object | None:
    """The sample of `text` read through `template`; `_OTHER_PAGE` when it is not the
    template's page; None when a value is out of its bounds (the checked path names it)."""
    raws = template.raws(text)
    values = numbers(raws) if raws is not None else None
    if values is None or None in values:
        return _OTHER_PAGE
    layout = template.layout
    layout.used = next(_READS)
    sample = layout.sample(values)  # type: ignore[arg-type]
    if sample is not None and _TEMPLATES[0] is not template and template in _TEMPLATES:
        _TEMPLATES.remove(template)
        _TEMPLATES.insert(0, template)
    return sample


def _labels_of(names: tuple[str, ...], labelsets: tuple[str, ...]) -> list[_Info | str | None]:
    """Each line's (model_name, position, le), or why its label set is refused, or None for a
    line without labels or of `vllm:cache_config_info` (whose labels `CacheConfig` reads):
    parsed once per label set (the cache), in C for the ones seen."""
    cache = _LABEL_CACHE
    infos: list[_Info | str | None]
    infos = list(map(cache.get, labelsets))
    if None in infos:
        for index, labels in enumerate(labelsets):
            if infos[index] is None and labels and names[index] != _CACHE_CONFIG_INFO:
                infos[index] = cache.get(labels) or _parse_labels(labels)
    return infos


def _first_error(
    body: str, index: int, name: str, raw: str, key: tuple[str, str], seen: set[tuple[str, str]]
) -> None:
    """The checks of a line whose value did not parse or that may repeat a series, in their
    order: a tail that does not parse, a duplicate series, a bad value."""
    if not raw:  # findall gives "" for a group that did not match
        raise ParseError(f"cannot parse {name} sample", *_where(_SCAN, body, index))
    if key in seen:
        raise ParseError(f"duplicate series {name}", *_where(_SCAN, body, index))
    seen.add(key)
    if number(raw) is None:
        raise ParseError(f"bad value {raw!r} for {name}", *_where(_SCAN, body, index))


def _accumulate(
    body: str,
    names: tuple[str, ...],
    labelsets: tuple[str, ...],
    raws: tuple[str, ...],
    values: list[float | None],
    infos: list[_Info | str | None],
) -> _Accumulated:
    """Sum the page's relevant lines per model, checking each (a ParseError names its line).

    The checks of every line (values, label sets, duplicates) are done first for all lines
    at once, in C where they can be; a line that fails one is checked again on its own, in
    its turn, so the error is the one of the first bad line."""
    families = _FAMILIES
    keys = list(zip(names, labelsets, strict=True))
    repeats = len(set(keys)) < len(keys)
    seen: set[tuple[str, str]] = set()
    models: dict[str, list[float | None]] = {}
    positions: dict[str, dict[int, float]] = {}
    buckets: _PerBound = {}
    process_start: float | None = None
    cache_config = CacheConfig()

    for index, (name, labels, value, info) in enumerate(
        zip(names, labelsets, values, infos, strict=True)
    ):
        if value is None or repeats:
            _first_error(body, index, name, raws[index], keys[index], seen)
            assert value is not None
        slot, kind = families[name]

        if kind < _LEGACY_GAUGE and not 0.0 <= value <= MAX_VALUE:
            raise ParseError(
                f"{name} must be a finite non-negative number at most 2**53, got {raws[index]}",
                *_where(_SCAN, body, index),
            )
        if kind == _ESTIMATE and not 0.0 <= value < math.inf:
            raise ParseError(
                f"{name} must be a finite non-negative number, got {raws[index]}",
                *_where(_SCAN, body, index),
            )
        if slot <= _BUCKET:  # the most frequent lines
            _add_bucket(body, index, name, info, _BUCKET - slot, value, buckets)
            continue
        if slot == _PROCESS_START:
            if not math.isfinite(value):
                raise ParseError(f"bad value for {name}", *_where(_SCAN, body, index))
            process_start = value
            continue
        if slot == _CACHE_CONFIG:
            refused = cache_config.add(labels)
            if refused:
                raise ParseError(f"{name}: {refused}", *_where(_SCAN, body, index))
            continue
        if kind == _FRACTION and not 0.0 <= value <= 1.0:
            raise ParseError(
                f"{name} must be a fraction from 0 to 1, got {raws[index]}",
                *_where(_SCAN, body, index),
            )
        if info is None or isinstance(info, str):
            problem = info or f"{name} has no model_name label"
            raise ParseError(problem, *_where(_SCAN, body, index))
        owner = info[0]
        if owner is None:
            raise ParseError(f"{name} has no model_name label", *_where(_SCAN, body, index))
        model = owner
        acc = models.get(model)
        if acc is None:
            if len(models) >= MAX_MODELS:
                raise ParseError(
                    f"too many models (more than {MAX_MODELS} model_name values)",
                    *_where(_SCAN, body, index),
                )
            acc = models[model] = [None] * _N_SLOTS

        if slot == _PER_POS:
            _add_position(body, index, name, model, info[1], value, positions)
            continue

        if kind == _FRACTION:
            acc[_KV_USAGE_SERIES] = (acc[_KV_USAGE_SERIES] or 0.0) + 1.0
        previous = acc[slot]
        if previous is None:
            acc[slot] = value
        elif kind == _LEGACY_GAUGE:
            raise ParseError(
                f"{name} appears twice for model {model!r}", *_where(_SCAN, body, index)
            )
        else:
            acc[slot] = previous = previous + value
            # Each series passed, their sum over ranks does not (an estimate: when infinite).
            if previous > (MAX_VALUE if kind != _ESTIMATE else _LARGEST_FLOAT):
                bound = "2**53" if kind != _ESTIMATE else "the largest float"
                raise ParseError(
                    f"{name} of model {model!r} sums to more than {bound}",
                    *_where(_SCAN, body, index),
                )
    return models, positions, buckets, process_start, cache_config


def _add_bucket(
    body: str,
    index: int,
    name: str,
    info: _Info | str | None,
    at: int,
    value: float,
    buckets: _PerBound,
) -> None:
    """Add a bucket's count to its model's and bound's (histogram `at` of _BUCKETED)."""
    if info is None or isinstance(info, str):
        problem = info or f"{name} has no model_name label"
        raise ParseError(problem, *_where(_SCAN, body, index))
    model, _, le = info
    if model is None or le is None:
        missing = "model_name" if model is None else "le"
        raise ParseError(f"{name} has no {missing} label", *_where(_SCAN, body, index))
    per_le = buckets.get((model, at))
    if per_le is None:
        per_le = buckets[(model, at)] = {}
    per_le[le] = total = per_le.get(le, 0.0) + value
    if total > MAX_VALUE:
        raise ParseError(
            f"{name} of model {model!r} sums to more than 2**53", *_where(_SCAN, body, index)
        )


def _add_position(
    body: str,
    index: int,
    name: str,
    model: str,
    position: str | None,
    value: float,
    positions: dict[str, dict[int, float]],
) -> None:
    """Add a per-position count of accepted tokens to its model's, checking its position."""
    if (
        position is None
        or not position.isascii()
        or not position.isdigit()
        or int(position) >= MAX_POSITIONS
    ):
        raise ParseError(
            f"{name} needs a position label 0..{MAX_POSITIONS - 1}",
            *_where(_SCAN, body, index),
        )
    per_pos = positions.setdefault(model, {})
    at = int(position)
    per_pos[at] = total = per_pos.get(at, 0.0) + value
    if total > MAX_VALUE:
        raise ParseError(
            f"{name} of model {model!r} sums to more than 2**53", *_where(_SCAN, body, index)
        )


_Sums = tuple[tuple[int, ...], ...]  # line indices, a tuple per slot (or bound) summed


class _Layout:
    """Which line of a page goes into which sum, learnt from a page the checked path read
    (`_accumulate`), for the next pages with the same lines in the same order: the same
    series, so the same label sets, models and buckets; only the values differ. A vLLM
    server's page keeps its layout from one scrape to the next (a new series, such as the
    first request finished for another reason, makes a new one).

    `sample` checks the values as `_accumulate` does, but all at once, in C, and sums them
    per slot, bound and position in page order (so to the same float); None when a value
    or a sum is out of its bounds: the checked path then names the line.
    """

    __slots__ = (
        "bounded",
        "buckets",
        "cache_config",
        "edge_reads",
        "edges",
        "heads",
        "models",
        "plain",
        "positions",
        "spans",
        "starts",
        "tails",
        "templates_built",
        "usable",
        "used",
        "within",
    )

    def __init__(
        self,
        names: tuple[str, ...],
        infos: list[_Info | str | None],
        summed: _Accumulated,
    ) -> None:
        self.used = next(_READS)  # when a page was last read through it (`_evictable`)
        self.edge_reads = 0  # pages no template matched, since its last template was made
        self.templates_built = 0
        models = {model: dict[int, list[int]]() for model in summed[0]}
        positions: dict[str, dict[int, list[int]]] = {}
        bounds: dict[tuple[str, int], dict[float, list[int]]] = {}
        self.bounded: list[int] = []  # cumulative values and request counts: 0..2**53
        # estimates: 0..largest float; fractions: 0..1; process start: finite
        self.within: tuple[tuple[list[int], float, float], ...] = (
            ([], 0.0, _LARGEST_FLOAT),
            ([], 0.0, 1.0),
            ([], -_LARGEST_FLOAT, _LARGEST_FLOAT),
        )
        checked = {_ESTIMATE: self.within[0][0].append, _FRACTION: self.within[1][0].append}
        bounded, starts = self.bounded.append, self.within[2][0].append
        self.starts = self.within[2][0]
        for index, (name, info) in enumerate(zip(names, infos, strict=True)):
            slot, kind = _FAMILIES[name]
            if kind < _LEGACY_GAUGE:
                bounded(index)
            elif kind in checked:
                checked[kind](index)
            if slot == _PROCESS_START:
                starts(index)
            elif slot != _CACHE_CONFIG:
                model, position, le = cast(tuple[str, str, float], info)
                if slot <= _BUCKET:
                    per_le = bounds.get((model, _BUCKET - slot))
                    if per_le is None:
                        per_le = bounds[(model, _BUCKET - slot)] = {}
                    lines = per_le.get(le)
                    if lines is None:
                        per_le[le] = [index]
                    else:
                        lines.append(index)
                elif slot == _PER_POS:
                    per_pos = positions.setdefault(model, {})
                    per_pos.setdefault(int(position), []).append(index)
                else:
                    models[model].setdefault(slot, []).append(index)
        # vLLM writes every bound once per rank; a page that does not stays line by line.
        self.usable = all(len(set(map(len, per_le.values()))) == 1 for per_le in bounds.values())
        self.cache_config = summed[4]
        # Per model: the line of each slot read from one line (`len(names)`: a None, for the
        # slots without a line), the lines of each slot summed over several, the KV-cache
        # usage's number of series.
        self.models = tuple(
            (
                model,
                [
                    slots[slot][0] if len(slots.get(slot, ())) == 1 else len(names)
                    for slot in range(_N_SLOTS)
                ],
                tuple((slot, tuple(lines)) for slot, lines in slots.items() if len(lines) > 1),
                float(len(slots[_KV_USAGE])) if _KV_USAGE in slots else None,
            )
            for model, slots in models.items()
        )
        self.positions = tuple(
            (model, tuple((at, tuple(lines)) for at, lines in per_pos.items()))
            for model, per_pos in positions.items()
        )
        # Per histogram: its model, the slots of its sum and count, its bounds ascending
        # (the one shared tuple) and, per rank, the line of each bound in that order.
        self.buckets = tuple(
            (
                key,
                _BUCKETED[key[1]],
                shared_bounds(tuple(sorted(per_le))),
                tuple(zip(*map(per_le.__getitem__, sorted(per_le)), strict=False)),
            )
            for key, per_le in bounds.items()
        )
        # A histogram of one rank whose bucket lines follow each other, bounds ascending
        # (vLLM's): its counts are a slice of the page's values packed as doubles.
        self.spans = tuple(
            slice(8 * ranks[0][0], 8 * (ranks[0][-1] + 1))
            if len(ranks) == 1 and ranks[0] == tuple(range(ranks[0][0], ranks[0][-1] + 1))
            else None
            for _, _, _, ranks in self.buckets
        )
        # Per model, the histograms built from their sum and count alone (no buckets read).
        self.plain = {
            model: tuple(h for i, h in enumerate(_BUCKETED) if (model, i) not in bounds)
            + tuple(h for h in _HISTOGRAMS if h not in _BUCKETED)
            for model in models
        }

    def index_by_edges(self, names: tuple[str, ...], labelsets: tuple[str, ...]) -> None:
        """Find this layout by its page's number of lines and first and last line's name and
        label set (`_BY_EDGES`, for `_through_known_layout`), with each line's name, label
        set and space, and where its value starts."""
        self.heads = tuple(map(add, map(add, names, labelsets), repeat(" ")))
        self.tails = tuple(slice(len(head), None) for head in self.heads)
        self.edges = (len(names), self.heads[0][:-1], self.heads[-1][:-1])
        _BY_EDGES[self.edges] = self

    def sample(self, values: list[float]) -> EngineSample | None:
        """The page's sample from its values, or None when one is out of bounds."""
        get = values.__getitem__
        # Usually every value is a count within 0..2**53: one pass over them all, and the
        # fractions apart; else (a V0 gauge's NaN, an estimate past 2**53) a pass a check.
        if not _between(values, 0.0, MAX_VALUE):
            for checked, low, high in ((self.bounded, 0.0, MAX_VALUE), *self.within):
                if checked and not _between(list(map(get, checked)), low, high):
                    return None
        elif self.within[1][0] and not _between(list(map(get, self.within[1][0])), 0.0, 1.0):
            return None
        start = values[self.starts[-1]] if self.starts else None
        if not self.models:  # no engine family (--disable-log-stats): only the start time
            return EngineSample(engine=ENGINE, models={}, process_start_time_seconds=start)
        models: dict[str, list[float | None]] = {}
        padded: list[float | None] = [*values, None]
        for model, single, summed, usage_series in self.models:
            acc = list(map(padded.__getitem__, single))
            for slot, lines in summed:
                acc[slot] = total = reduce(add, map(get, lines))
                if total > (_LARGEST_FLOAT if _FAMILIES_KIND[slot] == _ESTIMATE else MAX_VALUE):
                    return None
            acc[_KV_USAGE_SERIES] = usage_series
            models[model] = acc
        positions: dict[str, dict[int, float]] = {}
        for model, per_pos in self.positions:
            totals = {at: reduce(add, map(get, lines), 0.0) for at, lines in per_pos}
            if max(totals.values()) > MAX_VALUE:
                return None
            positions[model] = totals
        # Each model's histograms, built here: which have a sum and a count is the layout's.
        built: _Built = {
            model: {
                h: None if acc[h[0]] is None else Histogram.of(acc[h[0]], acc[h[1]], (), b"")  # type: ignore[arg-type]
                for h in self.plain[model]
            }
            for model, acc in models.items()
        }
        packed = b""
        for bucketed, span in zip(self.buckets, self.spans, strict=True):
            (model, at), (total, count), bounds, ranks = bucketed
            counts: bytes | list[float]
            if span is not None:  # one rank: every count is within 0..2**53 (checked above)
                packed = packed or _packed(values)
                counts = packed[span]
            else:
                counts = list(map(add, repeat(0.0), map(get, ranks[0])))
                for rank in ranks[1:]:
                    counts = list(map(add, counts, map(get, rank)))
                if max(counts) > MAX_VALUE:
                    return None
            acc = models[model]
            built[model][_BUCKETED[at]] = Histogram.of(acc[total], acc[count], bounds, counts)  # type: ignore[arg-type]
        return _sample((models, positions, {}, start, self.cache_config), built)


_NEGATIVE_ZERO: Final = array("d", [-0.0]).tobytes()


def _packed(values: list[float]) -> bytes:
    """The page's values as doubles, a -0.0 written as 0.0 (a count summed from 0.0, as the
    line-by-line path sums it, is never -0.0)."""
    packed = array("d", values).tobytes()
    if _NEGATIVE_ZERO in packed:  # maybe astride two values: normalising is then a no-op
        packed = array("d", map(add, values, repeat(0.0))).tobytes()
    return packed


def _between(values: list[float], low: float, high: float) -> bool:
    """Whether every value is a number from `low` to `high` (a NaN makes the sum one)."""
    return not math.isnan(sum(values)) and low <= min(values) and max(values) <= high


#: Layouts learnt, by the page's (names, label sets). Bounded: a page's key holds its lines'
#: names and label sets (~10 KB on a vLLM page), so 256 of them hold ~3 MB at most; when
#: full, a new layout replaces the oldest.
_LAYOUTS: dict[tuple[tuple[str, ...], tuple[str, ...]], _Layout] = {}
#: Layouts of `_LAYOUTS` by their page's edges (`_Layout.index_by_edges`): the one read last
#: of those that share them. As bounded as the table: a layout given up leaves both.
_BY_EDGES: dict[tuple[int, str, str], _Layout] = {}
_MAX_LAYOUTS: Final = 256
#: Hashes of the series of pages read once, not yet learnt (ints: bounded and small): room
#: for a fleet of 4,096 layouts scraped in turn to be seen twice before it is cleared.
_SEEN_ONCE: dict[int, None] = {}
_MAX_SEEN_ONCE: Final = 16 * _MAX_LAYOUTS
_LEARN_WHEN_FULL: Final = 16
_MISSES_WHEN_FULL: Final = itertools.count(1)
#: Counts the pages read through a layout: a layout's `used` says when it last served.
_READS: Final = itertools.count()
#: A full table gives up a layout only when no page has used it for this many layout reads.
#: A fleet of more layouts than the table holds, scraped in turn, uses each one within as
#: many reads as there are layouts: evicting the oldest there would make every page miss
#: and pay a learning (found in review: 600 layouts, 702-1,046 us a page against 424 for
#: never learning). So the table keeps the layouts it holds while they serve, and the rest
#: of such a fleet reads on the checked path (~370 us); a layout whose server went away
#: goes once idle.
_IDLE_READS: Final = 16 * _MAX_LAYOUTS


def _learn(
    names: tuple[str, ...],
    labelsets: tuple[str, ...],
    infos: list[_Info | str | None],
    values: list[float | None],
    summed: _Accumulated,
    sample: EngineSample,
) -> None:
    """Keep the layout of a page the checked path read (`summed`, giving `sample`), from the
    second page with these series on: a layout costs about one reading of its page to learn
    and check, which a series seen once (a page with an error, a test's page) never repays.

    Kept only when it gives the same sample: a page whose bounds do not repeat once per
    rank, or a V0 gauge at NaN (NaN != NaN), stays on the checked path."""
    key = (names, labelsets)
    fingerprint = hash(key)
    if fingerprint not in _SEEN_ONCE:
        if len(_SEEN_ONCE) >= _MAX_SEEN_ONCE:
            _SEEN_ONCE.clear()
        _SEEN_ONCE[fingerprint] = None
        return
    idle = _room()
    if idle is False:
        return
    layout = _Layout(names, infos, summed)
    again = layout.sample(values) if layout.usable else None  # type: ignore[arg-type]
    if again is None or again != sample:
        return
    if idle is not True:
        given_up = _LAYOUTS.pop(idle)
        _drop_templates(given_up)
        if _BY_EDGES.get(getattr(given_up, "edges", None)) is given_up:  # type: ignore[arg-type]
            del _BY_EDGES[given_up.edges]
    _LAYOUTS[key] = layout
    layout.index_by_edges(names, labelsets)


def _room() -> tuple[tuple[str, ...], tuple[str, ...]] | bool:
    """Whether a layout may be learnt now: True while the table has room; when full, the key
    of the layout idle longest if it is idle enough to give up (`_IDLE_READS`), looked for
    once in `_LEARN_WHEN_FULL` misses (a look is a pass over the table); else False."""
    if len(_LAYOUTS) < _MAX_LAYOUTS:
        return True
    if next(_MISSES_WHEN_FULL) % _LEARN_WHEN_FULL:
        return False
    key, oldest = min(_LAYOUTS.items(), key=lambda item: item[1].used)
    return key if next(_READS) - oldest.used > _IDLE_READS else False


def _sample(accumulated: _Accumulated, built: _Built | None = None) -> EngineSample:
    """The page's `EngineSample` from its sums: histograms with their buckets, per model
    (`built`: a layout's, checked when it was learnt)."""
    models, positions, buckets, process_start, cache_config = accumulated
    for model, _ in buckets:
        if model not in models:
            raise ParseError(f"model {model!r} has histogram buckets but no _sum and _count")
    out: dict[str, ModelSample] = {}
    for model, acc in models.items():
        hist = built[model] if built is not None else _histograms(model, acc, buckets)
        itl = hist[(_ITL_SUM, _ITL_COUNT)]
        if itl is None:  # V0 name of the same quantity
            itl = hist[(_V0_TPOT_SUM, _V0_TPOT_COUNT)]
        accepted = positions.get(model)
        usage, usage_series = acc[_KV_USAGE], acc[_KV_USAGE_SERIES]
        out[model] = ModelSample(
            generation_tokens=acc[_GEN] or 0.0,
            prompt_tokens=acc[_PROMPT] or 0.0,
            requests_finished=acc[_FINISHED] or 0.0,
            requests_running=acc[_RUNNING] or 0.0,
            requests_waiting=acc[_WAITING] or 0.0,
            drafts=acc[_DRAFTS],
            draft_tokens=acc[_DRAFT_TOKENS],
            accepted_tokens=acc[_ACCEPTED],
            accepted_per_position=(
                tuple(accepted.get(i, 0.0) for i in range(max(accepted) + 1)) if accepted else ()
            ),
            iteration_tokens=hist[(_ITER_SUM, _ITER_COUNT)],
            inter_token_latency=itl,
            time_per_output_token=hist[(_TPOT_SUM, _TPOT_COUNT)],
            time_to_first_token=hist[(_TTFT_SUM, _TTFT_COUNT)],
            e2e_request_latency=hist[(_E2E_SUM, _E2E_COUNT)],
            estimated_flops=acc[_FLOPS] or 0.0,
            estimated_read_bytes=acc[_READ_BYTES] or 0.0,
            preemptions=acc[_PREEMPTIONS] or 0.0,
            kv_cache_usage=usage / usage_series if usage is not None and usage_series else None,
            kv_cache_blocks=cache_config.blocks,
            kv_block_size=cache_config.block_size,
            kv_cache_bytes=cache_config.memory_bytes,
            legacy_acceptance_rate=acc[_LEGACY_RATE],
            legacy_efficiency=acc[_LEGACY_EFF],
            prefill_seconds=acc[_PREFILL_TIME],
        )
    return EngineSample(engine=ENGINE, models=out, process_start_time_seconds=process_start)


def _histograms(
    model: str, acc: list[float | None], buckets: _Buckets
) -> dict[tuple[int, int], Histogram | None]:
    """A model's histograms from its sums, the latency ones with their buckets."""
    hist = {h: histogram(acc[h[0]], acc[h[1]], name, model) for h, name in _HISTOGRAMS.items()}
    for i, h in enumerate(_BUCKETED):
        found = buckets.get((model, i))
        if found is not None:
            hist[h] = with_buckets(hist[h], found, _HISTOGRAMS[h], model)
    return hist


#: vLLM exposes every quantity spectax reads (V1; V0's counters over-counted: its gauges).
CAPABILITIES: Final = {
    "output_tokens": Capability("exact"),
    "prompt_tokens": Capability("exact"),
    "requests_finished": Capability("exact"),
    "draft_tokens": Capability("exact"),
    "acceptance_length": Capability("exact"),
    "per_position": Capability("exact"),
    "step_time": Capability("exact", "vllm:iteration_tokens_total, inter-token latency"),
    "time_per_output_token": Capability("exact"),
    "requests_running": Capability(
        "exact", "inter-token latency and request_prefill_time_seconds sums, not the gauge"
    ),
    "draft_overhead": Capability("absent", "vLLM does not time the drafter apart"),
    "restart": Capability("exact", "process_start_time_seconds"),
}
