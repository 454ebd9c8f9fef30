"""The `/metrics` page's gzip (`web.gzip_parts`) is one gzip member of the page, whatever
its layout: the load curves' lines are deflated once and kept (`FormattedLines`), laid
between the rest's streams, the CRC-32 combined. A client reads it with any gzip reader,
including a single-member one (Go's, which Prometheus uses, and curl's), first from a
fresh deflate, then from the kept one, and never from a kept deflate of other lines."""

from __future__ import annotations

import gzip
import zlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spectax import web
from spectax.exposition.text import FAMILY_NAMES, FormattedLines, KeptLines, Page, TextEncoder

TEXT = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda s, n: s * n, st.binary(min_size=1, max_size=8), st.integers(1, 20_000)),
)
PIECES = st.lists(TEXT, max_size=5).map(tuple)
BLOCK = st.one_of(TEXT, st.tuples(PIECES, st.booleans()))


def served(blocks: list[bytes | KeptLines]) -> bytes:
    """The gzip of `blocks`, checked as every reader takes it: whole, one member, its CRC."""
    expected = b"".join(Page(0, blocks).parts)
    gzipped = web.gzip_parts(iter(blocks))
    assert gzip.decompress(gzipped) == expected
    single = zlib.decompressobj(16 + zlib.MAX_WBITS)
    assert single.decompress(gzipped) == expected and single.eof and not single.unused_data
    assert int.from_bytes(gzipped[-8:-4], "little") == zlib.crc32(expected)
    return expected


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(BLOCK, max_size=8))
def test_any_layout_of_blocks_is_one_gzip_member_of_the_page(
    layout: list[bytes | tuple[tuple[bytes, ...], bool]],
) -> None:
    """Kept lines first, last, side by side or empty, empty plain blocks between: read
    twice, the second time from the kept deflate."""
    kept: dict[str, tuple[tuple[bytes, ...], tuple[bytes, int, int]]] = {}
    blocks: list[bytes | KeptLines] = [
        KeptLines(f"f{i}", b[0], kept if b[1] else None) if isinstance(b, tuple) else b
        for i, b in enumerate(layout)
    ]
    assert served(blocks) == served(blocks)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(FAMILY_NAMES), PIECES, max_size=12), st.booleans())
def test_a_page_with_lines_formatted_anywhere_is_served_whole(
    chosen: dict[str, tuple[bytes, ...]], keeps: bool
) -> None:
    """Through the text encoder's own blocks, with the formatted families anywhere in the
    page, kept (`FormattedLines`) or not (a plain mapping)."""
    encoder = TextEncoder(lambda add, name, snap: None)
    formatted = FormattedLines(chosen) if keeps else dict(chosen)
    for _ in range(2):
        page = encoder.render(lambda add: None, {}, formatted)
        assert served(list(page.blocks)) == b"".join(
            encoder.render(lambda add: None, {}, formatted).parts
        )


def test_a_kept_deflate_is_never_served_for_other_lines() -> None:
    """The kept stream is the pieces it was made of: lines given other pieces under the
    same family are deflated again, not served the last ones' bytes."""
    kept: dict[str, tuple[tuple[bytes, ...], tuple[bytes, int, int]]] = {}
    assert b"old" in served([b"head\n", KeptLines("f", (b"old\n",), kept)])
    assert b"new" in served([b"head\n", KeptLines("f", (b"new\n",), kept)])
