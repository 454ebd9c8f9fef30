"""The text exposition format (0.0.4), written directly: what Prometheus scrapes, fast.

prometheus_client's generic encoder builds a metric object per sample and
formats all of them on every request: with 2,000 endpoints that took about a
second. Here each endpoint's sample lines are formatted once per snapshot and
kept as bytes; a request only joins them under their families' headers, and
while nothing changed it gets the same bytes again. The collector's
`collect()` stays the reference (OpenMetrics goes through it); tests check
that both say the same, sample for sample.

An endpoint's lines are the same label sets scrape after scrape, only their values
change: its samples are recorded, and while their names and labels are those of the last
scrape, they fill the same template (its lines as `%`-formats, a family at a time, with
holes for the values and the endpoint's name) in a few C-level calls, rather than a
Python call, a lookup and a format per line (issue 31).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter

from spectax.endpoint import EndpointSnapshot
from spectax.exposition.families import FAMILIES, AddSample, Family

# Writes one endpoint's samples (the collector's walk over a snapshot) into `add`.
EndpointSamples = Callable[[AddSample, str, EndpointSnapshot], None]


def header(family: Family) -> str:
    """`# HELP` and `# TYPE` of a family, its help text escaped as the format wants."""
    escaped = family.help.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {family.name} {escaped}\n# TYPE {family.name} {family.kind}\n"


def line_template(family: Family) -> str:
    """`%`-template of one sample line: the escaped label values, then the value."""
    pairs = ",".join(f'{key}="%s"' for key in family.labels)
    return f"{family.name}{{{pairs}}} %s\n" if pairs else f"{family.name} %s\n"


HEADERS = {name: header(family).encode() for name, family in FAMILIES.items()}
LINE_TEMPLATES = {name: line_template(family) for name, family in FAMILIES.items()}
# An endpoint's lines are kept as a tuple in this order (None: no line in that family):
# a dict per endpoint cost ~1 KB more, ~2 MB at 2,000 endpoints.
FAMILY_NAMES = tuple(FAMILIES)
FAMILY_INDEX = {name: index for index, name in enumerate(FAMILY_NAMES)}
Fragments = tuple[bytes | None, ...]
# A sample as an endpoint's walk adds it: its family, its label values, its value.
Sample = tuple[str, tuple[str, ...], float]
#: Lines formatted elsewhere, by family (the load curves'), in pieces of bytes.
Formatted = Mapping[str, tuple[bytes, ...]]
_NOTHING_FORMATTED: Formatted = {}
#: A family's lines compressed apart: their raw deflate stream ended by a full flush (so
#: it can be laid between two others), their CRC-32 and their length (`web.gzip_parts`).
Deflated = tuple[bytes, int, int]


class FormattedLines(dict[str, tuple[bytes, ...]]):
    """`Formatted` that a weak reference can name, and that keeps its families' compressed
    copies for as long as it lives.

    The text encoder keeps the last page's key until the next read, and a strong
    reference would keep the last curves' lines alive after a refresh replaced them
    (`TextEncoder.render`). The lines change only when the curves do (every 5 minutes),
    while the page changes at every scrape: with a day of curves they are half of a
    25 MB page, so their deflate is kept here (`deflated`, filled by `web.gzip_parts`) and
    a read compresses only the rest."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.deflated: dict[str, tuple[tuple[bytes, ...], Deflated]] = {}


@dataclass(frozen=True, slots=True)
class KeptLines:
    """A family's lines formatted elsewhere, as a page's part: where their compressed copy
    is kept (`deflated`, by family, beside the pieces it is of; None when the mapping keeps
    none)."""

    family: str
    pieces: tuple[bytes, ...]
    deflated: dict[str, tuple[tuple[bytes, ...], Deflated]] | None


FAMILIES_PER_PART = 6  # how much of the page a worker joins and compresses at a time


@dataclass(frozen=True, slots=True)
class Settings:
    """The families of an endpoint that change seldom (its configuration's), formatted again
    only when `key` of its snapshot is no longer `same` as when they were formatted."""

    samples: EndpointSamples
    key: Callable[[EndpointSnapshot], tuple[object, ...]]
    same: Callable[[tuple[object, ...], tuple[object, ...]], bool]


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Template:
    """The lines of an endpoint's samples, for the names and labels they had, with holes:
    `families` are (family's index in FAMILY_NAMES, its lines as one `%`-format, its first
    and last hole), and `holes` picks the hole's texts, in order, from the samples' values
    formatted, the endpoint's name escaped after them. Endpoints whose samples differ only
    by their name share one."""

    families: tuple[tuple[int, str, int, int], ...]
    holes: Callable[[Sequence[str]], tuple[str, ...]]
    # The families' formats joined by NUL, to fill in one call and split the encoded page at
    # the NULs (half the cost of a call per family); None if a label value holds a NUL.
    joined: str | None


def _joined(families: Sequence[tuple[int, str, int, int]]) -> str | None:
    formats = [template for _, template, _, _ in families]
    return None if any(map(_has_nul, formats)) else "\x00".join(formats)


def _has_nul(text: str) -> bool:
    return "\x00" in text


@dataclass(frozen=True, slots=True)
class Shape:
    """What an endpoint's last samples were (their family names and label values, without
    the values), the template they fill, and the endpoint's name escaped."""

    names: tuple[str, ...]
    labels: tuple[tuple[str, ...], ...]
    template: Template
    escaped_name: str
    joined: str | None  # the template's, unless the endpoint's name holds a NUL

    @classmethod
    def of(
        cls,
        names: tuple[str, ...],
        labels: tuple[tuple[str, ...], ...],
        template: Template,
        endpoint: str,
    ) -> Shape:
        escaped = escape_label_value(endpoint)
        return cls(names, labels, template, escaped, None if _has_nul(escaped) else template.joined)


@dataclass(frozen=True, slots=True)
class Page:
    """A page to serve: its generation (the same number, the same bytes) and its bytes a
    few families at a time. The blocks are made from immutable pieces only, so they can be
    joined in a worker thread while the event loop goes on, and the page need never be
    whole (25 MB at 2,000 endpoints with a day of curves): `web.py` compresses it block by
    block, the lines formatted elsewhere (`KeptLines`) once."""

    generation: int
    blocks: Iterable[bytes | KeptLines]

    @property
    def parts(self) -> Iterator[bytes]:
        """The page's bytes in order (once: the blocks are read as they are made)."""
        for block in self.blocks:
            if isinstance(block, KeptLines):
                yield from block.pieces
            else:
                yield block


class TextEncoder:
    """Renders the page from what it formatted per endpoint; keeps the last page's key (the
    snapshots it was made of), so that an unchanged page keeps its generation, until an
    endpoint's snapshot changes (in fleet mode, between windows, every read)."""

    def __init__(self, endpoint_samples: EndpointSamples, settings: Settings | None = None):
        """`endpoint_samples` writes an endpoint's lines, but for `settings`' families."""
        self._endpoint_samples = endpoint_samples
        self._settings = settings
        self._fragments_by_endpoint: dict[str, tuple[EndpointSnapshot, Fragments]] = {}
        # each endpoint's settings families, encoded, with the key they were formatted at
        self._settings_by_endpoint: dict[str, tuple[tuple[object, ...], SettingsLines]] = {}
        self._shapes: dict[str, Shape] = {}
        # by family names and label values (None where the endpoint's name is)
        self._templates: weakref.WeakValueDictionary[tuple[object, ...], Template] = (
            weakref.WeakValueDictionary()
        )
        self._last_key: tuple[str, Callable[[], object], list[EndpointSnapshot]] | None = None
        # Pages of one generation are the same: what a cache of the page's gzip compares,
        # so that it need not hold the page itself.
        self.generation = 0

    def render(
        self,
        spectax_samples: Callable[[AddSample], None],
        snapshots: Mapping[str, EndpointSnapshot],
        formatted: Formatted | None = None,
    ) -> Page:
        """The whole page: spectax's own samples (`spectax_samples`, cheap, formatted every
        time), lines formatted once elsewhere (`formatted`, by family: the load curves, a
        new mapping each time they change) and the endpoints' (formatted when their
        snapshot changed). Only the pieces are gathered here; the blocks join them as they
        are read (`Page`)."""
        spectax_lines: dict[str, list[str]] = {}
        spectax_samples(line_writer(spectax_lines))
        by_name = sorted(snapshots.items())
        formatted = formatted if formatted is not None else _NOTHING_FORMATTED
        key = (repr(spectax_lines), _reference(formatted), [snap for _, snap in by_name])
        fragments = [self.fragments(name, snap) for name, snap in by_name]
        self._fragments_by_endpoint = {
            name: self._fragments_by_endpoint[name]
            for name, _ in by_name
            if name in self._fragments_by_endpoint
        }
        if len(self._settings_by_endpoint) > len(by_name):  # endpoints removed by a reload
            self._settings_by_endpoint = {
                name: self._settings_by_endpoint[name]
                for name, _ in by_name
                if name in self._settings_by_endpoint
            }
        if len(self._shapes) > len(by_name):
            self._shapes = {name: self._shapes[name] for name, _ in by_name if name in self._shapes}
        last = self._last_key
        if (
            last is None
            or last[0] != key[0]
            or last[1]() is not formatted
            or not _same(last[2], key[2])
        ):
            self.generation += 1
        self._last_key = key
        # Pieces, not joined here: the formatted lines are up to ~10 MB at 2,000 endpoints
        # (the load curves), too much to copy on the event loop at every read.
        deflated = formatted.deflated if isinstance(formatted, FormattedLines) else None
        heads = [
            (
                HEADERS[family] + "".join(spectax_lines.get(family, ())).encode(),
                KeptLines(family, formatted[family], deflated) if family in formatted else None,
            )
            for family in FAMILY_NAMES
        ]
        return Page(self.generation, _blocks(heads, fragments))

    def fragments(self, name: str, snap: EndpointSnapshot) -> Fragments:
        """The endpoint's lines per family, encoded: a request joins bytes, no 6 MB str."""
        cached = self._fragments_by_endpoint.get(name)
        if cached is not None and cached[0] is snap:
            return cached[1]
        # A snapshot changed, so the last page's key is stale: let it go now rather than
        # at the next read (in direct mode every scrape changes one, and the key would keep
        # 2,000 old snapshots alive until then).
        self._last_key = None
        samples: list[Sample] = []
        self._endpoint_samples(recorder(samples), name, snap)
        lines = self._lines(name, samples)
        for index, text in self._settings_lines(name, snap):
            lines[index] = text
        fragment = tuple(lines)
        self._fragments_by_endpoint[name] = (snap, fragment)
        return fragment

    def _lines(self, name: str, samples: list[Sample]) -> list[bytes | None]:
        """The endpoint's samples as lines, by family: the template of their names and labels
        filled with their values (`format_value`'s text: repr, Go's infinities)."""
        lines: list[bytes | None] = [None] * len(FAMILY_NAMES)
        if not samples:
            return lines
        names, labels, values = zip(*samples, strict=True)
        shape = self._shapes.get(name)
        if shape is None or shape.names != names or shape.labels != labels:
            shape = Shape.of(names, labels, self._template(name, names, labels), name)
            self._shapes[name] = shape
        texts = list(map(repr, map(float, values)))
        if math.inf in values or -math.inf in values:
            texts = list(map(format_value, values))
        texts.append(shape.escaped_name)
        filled = shape.template.holes(texts)
        families = shape.template.families
        if shape.joined is not None:
            pieces = (shape.joined % filled).encode().split(b"\x00")
            for (index, _, _, _), piece in zip(families, pieces, strict=True):
                lines[index] = piece
        else:
            for index, template, start, stop in families:
                lines[index] = (template % filled[start:stop]).encode()
        return lines

    def _template(
        self, endpoint: str, names: tuple[str, ...], labels: tuple[tuple[str, ...], ...]
    ) -> Template:
        """The template of these samples, shared by the endpoints whose samples have the same
        names and labels but for their own name (a fleet's replicas of a model)."""
        key = (names, tuple(tuple(None if v == endpoint else v for v in ls) for ls in labels))
        template = self._templates.get(key)
        if template is None:
            template = self._templates[key] = template_of(*key)
        return template

    def _settings_lines(self, name: str, snap: EndpointSnapshot) -> SettingsLines:
        """The endpoint's settings families, encoded: formatted again only when changed."""
        if self._settings is None:
            return ()
        key = self._settings.key(snap)
        kept = self._settings_by_endpoint.get(name)
        if kept is None or not self._settings.same(kept[0], key):
            lines: dict[str, list[str]] = {}
            self._settings.samples(line_writer(lines), name, snap)
            encoded = tuple(
                (FAMILY_INDEX[family], "".join(text).encode()) for family, text in lines.items()
            )
            kept = (key, encoded)
            self._settings_by_endpoint[name] = kept
        return kept[1]


# An endpoint's settings families as (index in FAMILY_NAMES, their lines encoded).
SettingsLines = tuple[tuple[int, bytes], ...]


def recorder(samples: list[Sample]) -> AddSample:
    """An `AddSample` that keeps the samples it is given (None and NaN: none) in `samples`."""
    append = samples.append

    def add(name: str, labels: tuple[str, ...], value: float | None) -> None:
        if value is not None and value == value:  # noqa: PLR0124 (False for NaN alone)
            append((name, labels, value))

    return add


def template_of(names: tuple[str, ...], labels: tuple[tuple[str | None, ...], ...]) -> Template:
    """The template of samples with these family names and label values, None where the
    endpoint's name goes: a family's lines in the order they came, the families in
    FAMILY_NAMES' order. Hole k < len(names) is the k-th sample's value, hole len(names)
    the endpoint's name."""
    name_hole = len(names)
    by_family: dict[int, list[tuple[str, list[int]]]] = {}
    for k, (name, values) in enumerate(zip(names, labels, strict=True)):
        family = FAMILIES[name]
        pairs = ",".join(
            f'{key}="%s"'
            if value is None
            else f'{key}="{escape_label_value(value).replace("%", "%%")}"'
            for key, value in zip(family.labels, values, strict=True)
        )
        line = f"{name}{{{pairs}}} %s\n" if pairs else f"{name} %s\n"
        holes = [name_hole for value in values if value is None]
        holes.append(k)
        by_family.setdefault(FAMILY_INDEX[name], []).append((line, holes))
    families: list[tuple[int, str, int, int]] = []
    order: list[int] = []
    for index, lines in sorted(by_family.items()):
        start = len(order)
        for _, holes in lines:
            order.extend(holes)
        families.append((index, "".join(line for line, _ in lines), start, len(order)))
    if len(order) == 1:
        only = order[0]
        return Template(tuple(families), lambda texts: (texts[only],), _joined(families))
    return Template(tuple(families), itemgetter(*order), _joined(families))


def _blocks(
    heads: list[tuple[bytes, KeptLines | None]], fragments: list[Fragments]
) -> Iterator[bytes | KeptLines]:
    """The page in blocks of FAMILIES_PER_PART families: each family's header and spectax's
    own lines, the lines formatted elsewhere (a block of their own, kept whole), then
    every endpoint's lines in it. `zip(*fragments)` turns the endpoints' tuples into the
    families' columns in C. ~1 MB blocks at 2,000 endpoints, one in memory at a time, not
    one a family: a worker thread joining a page without gzip waits for the GIL each time
    it comes back from C, up to the switch interval (5 ms) while the scrapes hold it, and
    ~10 returns cost a read less of that than ~100 (bench/README "Direct mode's memory")."""
    columns = zip(*fragments, strict=True) if fragments else (() for _ in heads)
    batch: list[bytes] = []
    for k, ((head, kept), column) in enumerate(zip(heads, columns, strict=True), 1):
        batch.append(head)
        if kept is not None:
            yield b"".join(batch)
            yield kept
            batch = []
        batch.extend(filter(None, column))
        if k % FAMILIES_PER_PART == 0 or k == len(heads):
            yield b"".join(batch)
            batch = []


def _reference(formatted: Formatted) -> Callable[[], object]:
    """What the last page's key keeps of the lines formatted elsewhere: a weak reference
    where the mapping takes one (the load curves' `FormattedLines`), so that the key does
    not keep the last curves' ~18 MB alive after a refresh replaced them; a page's lines
    that are gone are not the next page's (the reference gives None)."""
    try:
        return weakref.ref(formatted)
    except TypeError:  # a plain dict: kept
        return lambda: formatted


def _same(a: list[EndpointSnapshot], b: list[EndpointSnapshot]) -> bool:
    """The same snapshot objects (snapshots are replaced, never changed, so `is` suffices)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def line_writer(lines: dict[str, list[str]]) -> AddSample:
    """An `AddSample` that formats exposition lines into `lines[family name]`."""

    def add(name: str, labels: tuple[str, ...], value: float | None) -> None:
        if value is None or math.isnan(value):
            return
        escaped = _ESCAPED.get(labels)
        if escaped is None:
            escaped = _escaped(labels)
        line = LINE_TEMPLATES[name] % (*escaped, format_value(value))
        if (family := lines.get(name)) is None:
            lines[name] = [line]
        else:
            family.append(line)

    return add


# Label tuples escaped so far: every endpoint formats the same few tuples (its name, its
# models, the metric and percentile names) at every scrape; escaping each value each time
# was a third of formatting an endpoint's ~65 lines (issue 31). Bounded: a fleet's label
# values are its endpoints' and models' names, a few per endpoint.
_ESCAPED: dict[tuple[str, ...], tuple[str, ...]] = {}
_MAX_ESCAPED = 65536


def _escaped(labels: tuple[str, ...]) -> tuple[str, ...]:
    escaped = tuple(map(escape_label_value, labels))
    if len(_ESCAPED) < _MAX_ESCAPED:
        _ESCAPED[labels] = escaped
    return escaped


def format_value(value: float) -> str:
    """A sample value as the text format writes it (shortest round-trip repr, Go's infinities)."""
    return _INFINITIES.get(value) or repr(float(value))


_INFINITIES = {math.inf: "+Inf", -math.inf: "-Inf"}


def escape_label_value(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value
