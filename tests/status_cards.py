"""The status page read back: each endpoint's card, for tests of what the page shows."""

from __future__ import annotations

import re
from html import unescape


def cards(html: str) -> dict[str, str]:
    """Each endpoint's card (its section of the page), by endpoint name."""
    found = re.findall(r'(<section class="[^"]*" data-endpoint="([^"]*)".*?</section>)', html, re.S)
    return {unescape(name): section for section, name in found}
