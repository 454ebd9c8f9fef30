"""Regenerate the dashboards' JSON from their grafanalib sources.

    python dashboards/generate.py           # rewrite dashboards/*.json
    python dashboards/generate.py --check   # exit 1 if a committed JSON is out of date

Each ``NAME.dashboard.py`` defines ``dashboard``; its JSON goes to ``NAME.json`` next to
it, exactly as grafanalib's ``generate-dashboards`` would write it (same loader, same
encoder, sorted keys, two-space indent). tests/test_dashboards.py runs the same
:func:`render` and fails on any difference from the committed files.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from grafanalib._gen import loader, write_dashboard

HERE = Path(__file__).resolve().parent
SUFFIX = ".dashboard.py"


def sources() -> list[Path]:
    return sorted(HERE.glob(f"*{SUFFIX}"))


def json_path(source: Path) -> Path:
    return source.with_name(source.name[: -len(SUFFIX)] + ".json")


def render(source: Path) -> str:
    """The JSON text grafanalib writes for one source file."""
    stream = io.StringIO()
    write_dashboard(loader(str(source)), stream)
    return stream.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args(argv)
    stale = []
    for source in sources():
        target = json_path(source)
        text = render(source)
        if target.exists() and target.read_text(encoding="utf-8") == text:
            continue
        stale.append(target.name)
        if not args.check:
            target.write_text(text, encoding="utf-8")
    verb = "out of date" if args.check else "written"
    print(f"{verb}: {', '.join(stale)}" if stale else "dashboards up to date")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
