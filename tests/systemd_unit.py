"""The shipped systemd unit and environment file, and reading their directives."""

from __future__ import annotations

from pathlib import Path

SYSTEMD = Path(__file__).parent.parent / "systemd"
UNIT = SYSTEMD / "spectax.service"
ENV = SYSTEMD / "spectax.env"
INSTALLED = "/opt/spectax/bin/spectax"


def directives(text: str) -> dict[str, list[str]]:
    """Each directive of a unit or environment file with its values, in order (sections
    and comments aside)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found
