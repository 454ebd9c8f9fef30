"""The pages spectax serves beside the status page: the alerts' runbook (`/runbook`) and
the economics (`/docs/economics`), rendered from the Markdown files users read elsewhere.

A runbook link must open from wherever the alert or the card is read: a `file://` URL
does not open from an http page, and the file was not where the link said. So spectax
serves the runbook itself, behind the same web-config auth as `/metrics`. The Markdown
files are the repository's own (`alerts/runbook.md`, `docs/economics.md`; `pages/` holds
links to them, which a wheel carries as copies): one text, rendered once per process, when
it is first asked for (Markdown and the XML it builds with, ~1 MiB of a daemon's imports,
are loaded only then).
Headings get GitHub's anchors (`## SpeculationIsATax` -> `#speculationisatax`), which
the alerts' `runbook_url` and the status page's links name.
"""

from __future__ import annotations

import functools
import re
from html import escape
from pathlib import Path
from typing import Final

PAGES_DIR: Final = Path(__file__).resolve().parent / "pages"
#: The path spectax serves each page at -> its Markdown file and title.
PAGES: Final = {
    "/runbook": ("runbook.md", "spectax runbook"),
    "/docs/economics": ("economics.md", "The economics spectax computes"),
}
RUNBOOK_PATH: Final = "/runbook"
ECONOMICS_PATH: Final = "/docs/economics"

_STYLE: Final = """
body{font:15px/1.5 system-ui,sans-serif;max-width:52rem;margin:1.5rem auto;padding:0 1rem;
color:#1b1f24;background:#fff}
code,pre{font:13px ui-monospace,monospace;background:#f3f4f6;border-radius:3px}
pre{padding:.6rem;overflow-x:auto}code{padding:0 .2rem}
table{border-collapse:collapse}td,th{border:1px solid #d0d4d9;padding:.25rem .5rem;
vertical-align:top}
a{color:#0b57d0}h2{border-top:1px solid #d0d4d9;padding-top:1rem}
@media (prefers-color-scheme:dark){body{color:#e6e8eb;background:#15171a}
code,pre{background:#24272c}a{color:#8ab4f8}td,th,h2{border-color:#3a3f45}}
"""


# A link between the two files, as the docs site or the repository writes it, goes to the
# page spectax serves.
_SERVED: Final = {name.removesuffix(".md"): path for path, (name, _) in PAGES.items()}
_LINK: Final = re.compile(r'href="(?:\.\./)*(?:docs/|alerts/)?(runbook|economics)\.md')


def _slug(text: str, separator: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to `-`."""
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", separator)


def is_served(path: str) -> bool:
    """Whether spectax serves a page at `path` (its Markdown file is in this install)."""
    found = PAGES.get(path)
    return found is not None and (PAGES_DIR / found[0]).is_file()


@functools.cache
def page_html(path: str) -> str | None:
    """The page served at `path` as a whole HTML document; None for a path spectax does not
    serve or whose file this install lacks."""
    found = PAGES.get(path)
    if found is None:
        return None
    name, title = found
    try:
        text = (PAGES_DIR / name).read_text(encoding="utf-8")
    except OSError:
        return None
    import markdown  # here, not at the top: see the module's docstring

    body = markdown.markdown(
        text,
        extensions=["tables", "fenced_code", "toc"],
        extension_configs={"toc": {"slugify": _slug}},
        output_format="html",
    )
    body = _LINK.sub(lambda m: f'href="{_SERVED[m.group(1)]}', body)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>"
        '<p><a href="/">status</a> · <a href="/runbook">runbook</a> · '
        f'<a href="/docs/economics">economics</a></p>{body}</body></html>'
    )


__all__ = ["ECONOMICS_PATH", "PAGES", "RUNBOOK_PATH", "is_served", "page_html"]
