"""Install the spectax rule files and runbook, with every runbook_url under your base URL.

    python alerts/install.py --out /etc/prometheus/spectax
    python alerts/install.py --out /etc/prometheus/spectax \\
        --runbook-url https://wiki.example.com/oncall/spectax-runbook

Writes spectax.rules.yml, spectax.alerts.yml and runbook.md into --out. Each alert's
runbook_url is the base followed by its section's anchor (``#speculationisatax``...), so
the operator sets the base once, here, instead of editing nine annotations. Without
--runbook-url the base is the runbook spectax serves at /runbook on localhost:9837, what
the committed rule files carry: give the address others reach spectax at, or a wiki page.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
RULE_FILES = ("spectax.rules.yml", "spectax.alerts.yml")
DEFAULT_OUT = Path("/etc/prometheus/spectax")
#: spectax serves the runbook itself (a file:// link does not open from a browser's http page).
DEFAULT_RUNBOOK_URL = "http://localhost:9837/runbook"
KEY = "runbook_url: "


def rebase(text: str, base: str) -> str:
    """The rule file's text with the committed runbook base replaced by `base`."""
    old = f"{KEY}{DEFAULT_RUNBOOK_URL}#"
    for line in text.splitlines():
        if KEY in line and old not in line:
            raise ValueError(f"a runbook_url not under {DEFAULT_RUNBOOK_URL}: {line.strip()}")
    return text.replace(old, f"{KEY}{base}#")


def check_base(base: str) -> str:
    """The base URL, or an error saying what is wrong with it and what is wanted."""
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https", "file") or not (parts.netloc or parts.path):
        raise ValueError(
            f"--runbook-url {base!r}: want an http(s):// or file:// URL of the runbook page,"
            " e.g. https://wiki.example.com/spectax-runbook"
        )
    if parts.fragment:
        raise ValueError(f"--runbook-url {base!r}: leave out the '#...': each alert adds its own")
    return base


def install(out: Path, base: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in RULE_FILES:
        target = out / name
        target.write_text(rebase((HERE / name).read_text(encoding="utf-8"), base), "utf-8")
        written.append(target)
    written.append(Path(shutil.copyfile(HERE / "runbook.md", out / "runbook.md")))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory to write")
    parser.add_argument(
        "--runbook-url",
        help="base URL of the runbook page (default: spectax's own /runbook on"
        f" localhost:9837, {DEFAULT_RUNBOOK_URL}; give the address others reach it at)",
    )
    args = parser.parse_args(argv)
    out = args.out.resolve()
    try:
        base = check_base(args.runbook_url or DEFAULT_RUNBOOK_URL)
        written = install(out, base)
    except (ValueError, OSError) as error:
        print(f"install.py: {error}", file=sys.stderr)
        return 2
    print(f"runbook_url base {base}; written: {', '.join(map(str, written))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
