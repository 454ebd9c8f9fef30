"""glibc's malloc held to one arena: the daemon's threads are few, and mostly idle.

glibc gives a thread that allocates while another holds the main arena an arena of its
own (up to eight a core), and each arena keeps what its thread freed for that thread.
spectax's other threads are SQLite's, the resolver's and a worker that joins a `/metrics`
page for a client that takes no gzip (web.py; the gzip itself is on the event loop since
2026-12-05, when the worker compressed every page): at 2,000 endpoints their arenas held
~5 MiB of the daemon's peak memory that the main arena would have reused (bench/README
"Under 150 MiB"). One arena costs them no lock worth the name: the event loop allocates
while it holds the GIL, and the other threads mostly wait. It is what `MALLOC_ARENA_MAX=1`
does; an operator's own setting of that variable is left in force.
"""

from __future__ import annotations

import ctypes
import os
import platform

M_ARENA_MAX = -8  # glibc's malloc.h


def one_malloc_arena() -> bool:
    """Ask glibc for one arena before the daemon starts threads; whether it was set (not
    off glibc, nor when the environment says MALLOC_ARENA_MAX)."""
    if "MALLOC_ARENA_MAX" in os.environ or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_ARENA_MAX, 1))
