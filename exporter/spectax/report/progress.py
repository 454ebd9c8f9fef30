"""A one-line progress bar on stderr, drawn only when stderr is a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 30


class Progress:
    """Steps of known count; `advance()` one, `stage()` to name what runs now.

    Silent unless the stream is a TTY (or `enabled` says so), so logs, pipes
    and CI output stay clean. Redraws at most every 50 ms; `close()` clears the line.
    """

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total = max(total, 1)
        self.done = 0
        self.label = ""
        self._drawn = 0.0
        self._width = 0

    def add_steps(self, count: int) -> None:
        self.total += count

    def stage(self, label: str) -> None:
        self.label = label
        self._draw(force=True)

    def advance(self, count: int = 1, label: str | None = None) -> None:
        self.done = min(self.total, self.done + count)
        if label is not None:
            self.label = label
        self._draw()

    def close(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
        self._width = 0

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._drawn < 0.05 and self.done < self.total:
            return
        self._drawn = now
        filled = round(WIDTH * self.done / self.total)
        line = (
            f"\rreport [{'#' * filled}{'.' * (WIDTH - filled)}] "
            f"{100 * self.done // self.total:3d}% {self.label}"
        )
        padding = max(0, self._width - len(line))
        self.stream.write(line + " " * padding)
        self.stream.flush()
        self._width = len(line)
