"""The daemon's malloc arenas (spectax.allocator): one, so that what a worker thread frees
serves the event loop's next allocation instead of staying in the thread's own arena."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = [
    pytest.mark.e2e,  # a Python process of its own per probe
    pytest.mark.skipif(
        platform.libc_ver()[0] != "glibc", reason="glibc's arenas: other C libraries have none"
    ),
]

# A thread that allocates, then the process's reserved-but-inaccessible regions of more
# than a megabyte: glibc maps each new arena's heap as 64 MiB, most of it PROT_NONE (a
# thread stack's guard page is 4 KiB).
PROBE = textwrap.dedent(
    """
    import sys, threading
    from spectax.allocator import one_malloc_arena
    print(one_malloc_arena() if sys.argv[1] == "one" else False)
    def work():
        kept = [bytearray(200_000), [bytes(1000) for _ in range(1000)]]
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    reserved = 0
    for line in open("/proc/self/maps"):
        span, perms = line.split()[:2]
        start, end = (int(x, 16) for x in span.split("-"))
        if perms == "---p" and end - start > 2**20 and len(line.split()) < 6:
            reserved += 1
    print(reserved)
    """
)


def arenas_beyond_the_main_one(mode: str, env: dict[str, str]) -> tuple[bool, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0] == "True", int(out[1])


def test_a_thread_that_allocates_gets_no_arena_of_its_own() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    set_, arenas = arenas_beyond_the_main_one("default", env)
    assert not set_ and arenas >= 1  # glibc's own way: the thread's arena
    assert arenas_beyond_the_main_one("one", env) == (True, 0)


def test_an_operators_malloc_arena_max_is_left_in_force() -> None:
    env = {**os.environ, "MALLOC_ARENA_MAX": "4"}
    set_, arenas = arenas_beyond_the_main_one("one", env)
    assert not set_ and arenas >= 1
