"""The `spectax` command line: one module per command, wired in `spectax.cli.main`."""

from spectax.cli.main import main

__all__ = ["main"]
