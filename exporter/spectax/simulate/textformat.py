"""Numbers and label values written as prometheus_client writes them in the text format.

The simulated page must read like the real server's, byte for byte where it can.
"""

from __future__ import annotations

import math
from functools import lru_cache

__all__ = ["escape_label", "format_int", "format_value"]


def format_value(d: float) -> str:
    """Render a float the way prometheus_client does (Go-style exponents)."""
    if d == math.inf:
        return "+Inf"
    if d == -math.inf:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(float(d))
    dot = s.find(".")
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


@lru_cache(maxsize=8192)
def format_int(n: int) -> str:
    """format_value(float(n)) for an integer, without going through repr."""
    if -1_000_000 < n < 1_000_000:
        return f"{n}.0"
    if n < 0 or n >= 1 << 53:
        return format_value(float(n))
    t = str(n)
    return f"{t[0]}.{t[1:]}".rstrip("0.") + f"e+{len(t) - 1:02d}"


def escape_label(v: str) -> str:
    """A label value escaped as the text format wants it."""
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
