"""Regenerate the dashboards' JSON from their grafanalib sources.

    python dashboards/generate.py           # rewrite dashboards/*.json
    python dashboards/generate.py --check   # exit 1 if a committed JSON is out of date
    python dashboards/generate.py --runbook-url https://wiki.example.com/spectax-runbook \
        --out /var/lib/grafana/dashboards/spectax   # for your Grafana, links to your runbook

Each ``NAME.dashboard.py`` defines ``dashboard``; its JSON goes to ``NAME.json`` next to
it, exactly as grafanalib's ``generate-dashboards`` would write it (same loader, same
encoder, sorted keys, two-space indent). tests/test_dashboards.py runs the same
:func:`render` and fails on any difference from the committed files.
"""

from __future__ import annotations

import argparse
import io
import json
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


def with_runbook_url(text: str, base: str) -> str:
    """The dashboard JSON with its `runbook_url` variable (every panel's runbook link) set."""
    data = json.loads(text)
    (variable,) = [v for v in data["templating"]["list"] if v["name"] == "runbook_url"]
    variable["query"] = base
    variable["current"] = {"selected": True, "text": base, "value": base}
    return json.dumps(data, sort_keys=True, indent=2) + "\n"  # as grafanalib writes it


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    parser.add_argument(
        "--runbook-url",
        help="base URL of the runbook the panels link to (the alerts' install.py --runbook-url)",
    )
    parser.add_argument(
        "--out", type=Path, help="write the JSON here instead of beside the sources"
    )
    args = parser.parse_args(argv)
    if args.runbook_url and not args.out:
        parser.error("--runbook-url needs --out: the committed JSON keeps the default runbook")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    stale = []
    for source in sources():
        target = json_path(source) if args.out is None else args.out / json_path(source).name
        text = render(source)
        if args.runbook_url:
            text = with_runbook_url(text, args.runbook_url)
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
