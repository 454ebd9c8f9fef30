"""The text exposition format (0.0.4), written directly: what Prometheus scrapes, fast.

prometheus_client's generic encoder builds a metric object per sample and
formats all of them on every request: with 2,000 endpoints that took about a
second. Here each endpoint's sample lines are formatted once per snapshot and
kept as bytes; a request only joins them under their families' headers, and
while nothing changed it gets the same bytes again. The collector's
`collect()` stays the reference (OpenMetrics goes through it); tests check
that both say the same, sample for sample.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

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
Fragments = tuple[bytes | None, ...]


class TextEncoder:
    """Renders the page and keeps what it formatted: per endpoint, and the last whole body
    until an endpoint's snapshot changes (in fleet mode, between windows, every read)."""

    def __init__(self, endpoint_samples: EndpointSamples):
        self._endpoint_samples = endpoint_samples
        self._fragments_by_endpoint: dict[str, tuple[EndpointSnapshot, Fragments]] = {}
        self._last_body: tuple[tuple[str, list[EndpointSnapshot]] | None, bytes] = (None, b"")
        # Bodies of one generation are the same: what a cache of the body's gzip compares,
        # so that it need not hold the body itself (two 9 MB bodies at once otherwise, the
        # old one kept for the comparison while the new one is joined).
        self.generation = 0

    def render(
        self,
        spectax_samples: Callable[[AddSample], None],
        snapshots: Mapping[str, EndpointSnapshot],
    ) -> bytes:
        """The whole page: spectax's own samples (`spectax_samples`, cheap, formatted every
        time) and the endpoints' (formatted when their snapshot changed)."""
        spectax_lines: dict[str, list[str]] = {}
        spectax_samples(line_writer(spectax_lines))
        by_name = sorted(snapshots.items())
        key = (repr(spectax_lines), [snap for _, snap in by_name])
        last_key, last_body = self._last_body
        if last_key is not None and last_key[0] == key[0] and _same(last_key[1], key[1]):
            return last_body
        del last_key, last_body
        fragments = [self.fragments(name, snap) for name, snap in by_name]
        self._fragments_by_endpoint = {
            name: self._fragments_by_endpoint[name]
            for name, _ in by_name
            if name in self._fragments_by_endpoint
        }
        out: list[bytes] = []
        for i, family in enumerate(FAMILY_NAMES):
            out.append(HEADERS[family])
            out.extend(line.encode() for line in spectax_lines.get(family, ()))
            for fragment in fragments:
                lines = fragment[i]
                if lines is not None:
                    out.append(lines)
        self._last_body = (None, b"")  # the old body can go before the new one is joined
        body = b"".join(out)
        self._last_body = (key, body)
        self.generation += 1
        return body

    def fragments(self, name: str, snap: EndpointSnapshot) -> Fragments:
        """The endpoint's lines per family, encoded: a request joins bytes, no 6 MB str."""
        cached = self._fragments_by_endpoint.get(name)
        if cached is not None and cached[0] is snap:
            return cached[1]
        # A snapshot changed, so the kept body is stale: let it go now rather than at the
        # next read (in direct mode every scrape changes one, and the body, 9 MB at 2,000
        # endpoints, and its key's 2,000 old snapshots, would wait for the next join).
        self._last_body = (None, b"")
        lines: dict[str, list[str]] = {}
        self._endpoint_samples(line_writer(lines), name, snap)
        fragment = tuple(
            "".join(text).encode() if (text := lines.get(family)) else None
            for family in FAMILY_NAMES
        )
        self._fragments_by_endpoint[name] = (snap, fragment)
        return fragment


def _same(a: list[EndpointSnapshot], b: list[EndpointSnapshot]) -> bool:
    """The same snapshot objects (snapshots are replaced, never changed, so `is` suffices)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def line_writer(lines: dict[str, list[str]]) -> AddSample:
    """An `AddSample` that formats exposition lines into `lines[family name]`."""

    def add(name: str, labels: tuple[str, ...], value: float | None) -> None:
        if value is None or math.isnan(value):
            return
        line = LINE_TEMPLATES[name] % (*map(escape_label_value, labels), format_value(value))
        lines.setdefault(name, []).append(line)

    return add


def format_value(value: float) -> str:
    """A sample value as the text format writes it (shortest round-trip repr, Go's infinities)."""
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    return repr(float(value))


def escape_label_value(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value
