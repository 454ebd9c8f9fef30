"""The documentation site (docs/, mkdocs.yml) builds, and what points into it lands.

The README is the first hour; the rest moved into docs/. A moved section leaves links behind
(in the README, in the pages, in messages and comments of the code), so these build the site
as CI does, strict, and check that MkDocs' own link checks are on and that every mention of
a page, or of a README section, names one that is there."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
DOCS = REPOSITORY / "docs"
README = REPOSITORY / "README.md"
# Where code, rules, dashboards, units and the example configuration name docs pages or
# README sections: an operator reads these in a message, a comment or a panel.
POINTERS = [
    REPOSITORY / "exporter" / "spectax",
    REPOSITORY / "alerts",
    REPOSITORY / "dashboards",
    REPOSITORY / "systemd",
    REPOSITORY / "spectax.example.yml",
]


def build(config_dir: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict`, as .ci/run runs it, into `site` (never into the tree)."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner, not a warning
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        check=False,
        cwd=config_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = build(REPOSITORY, out)
    assert done.returncode == 0, done.stderr + done.stdout
    return out


def anchors_of(site: Path, page: str) -> set[str]:
    """The ids of a built page: the anchors a link `page.md#id` may name."""
    html = site / ("index.html" if page == "index" else f"{page}/index.html")
    assert html.is_file(), f"docs/{page}.md is not in the built site"
    return set(re.findall(r'\bid="([^"]+)"', html.read_text(encoding="utf-8")))


@pytest.mark.e2e
def test_the_site_builds_strict_and_shows_the_canonical_runbook(site: Path) -> None:
    """docs/runbook.md is a link to alerts/runbook.md (what alerts/install.py installs), not
    a copy that could drift: the site shows every section of that file."""
    link = DOCS / "runbook.md"
    assert link.is_symlink()
    assert link.resolve() == (REPOSITORY / "alerts" / "runbook.md").resolve()
    ids = anchors_of(site, "runbook")
    alerts = re.findall(r"^## (\w+)$", link.read_text(encoding="utf-8"), re.M)
    assert len(alerts) >= 10
    assert {a.lower() for a in alerts} <= ids


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("link", "no-such-page.md"),
        ("anchor", "no-such-anchor"),
        ("omitted", "left-out.md"),
    ],
)
def test_a_dead_link_or_a_page_left_out_fails_the_build(
    tmp_path: Path, change: str, said: str
) -> None:
    """The checks are on (mkdocs.yml `validation:`), so strict mode fails on what they find:
    by default MkDocs only logs a missing anchor or a page outside the nav as info."""
    shutil.copy(REPOSITORY / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(DOCS, tmp_path / "docs", symlinks=False)  # the runbook's text, copied
    page = tmp_path / "docs" / "metrics.md"
    if change == "link":
        page.write_text(page.read_text() + "\nSee [it](no-such-page.md).\n")
    elif change == "anchor":
        page.write_text(page.read_text() + "\nSee [it](ha.md#no-such-anchor).\n")
    else:
        (tmp_path / "docs" / "left-out.md").write_text("# Not in the nav\n")
    done = build(tmp_path, tmp_path / "site")
    assert done.returncode != 0
    assert said in done.stderr + done.stdout


@pytest.mark.e2e
def test_the_readme_links_land(site: Path) -> None:
    """The README's links into docs/ (and anywhere in the repository) name a file that is
    there and, for a docs page, an anchor the built page has."""
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [x for x in links if not re.match(r"[a-z]+:", x)]
    assert any(x.startswith("docs/") for x in local)
    for link in local:
        path, _, anchor = link.partition("#")
        assert path, f"the README links to an anchor of its own ({link}): it moved to docs/"
        assert (REPOSITORY / path).exists(), link
        if path.startswith("docs/") and anchor:
            assert anchor in anchors_of(site, path.removeprefix("docs/").removesuffix(".md")), link


def pointer_files() -> list[Path]:
    files: list[Path] = []
    for root in POINTERS:
        found = [root] if root.is_file() else sorted(root.rglob("*"))
        files += [
            f
            for f in found
            if f.is_file()
            and f.suffix in {".py", ".yml", ".yaml", ".md", ".env", ".service"}
            and "__pycache__" not in f.parts
        ]
    return files


@pytest.mark.e2e
def test_code_and_config_point_at_docs_pages_that_exist(site: Path) -> None:
    """A message, comment or panel naming `docs/PAGE.md` (or `docs/PAGE.md#anchor`) names
    a page of the site, and an anchor it has."""
    seen = 0
    for file in pointer_files():
        for page, anchor in re.findall(
            r"\bdocs/([a-z0-9-]+)\.md(?:#([a-z0-9-]+))?", file.read_text(encoding="utf-8")
        ):
            seen += 1
            assert (DOCS / f"{page}.md").is_file(), f"{file}: docs/{page}.md"
            if anchor:
                assert anchor in anchors_of(site, page), f"{file}: docs/{page}.md#{anchor}"
    assert seen >= 5


def test_code_and_config_name_only_readme_sections_that_are_there() -> None:
    """`README "Fleet mode"`, `(README, High availability)`: once a section moves to docs/,
    such a mention sends an operator to a README that no longer has it."""
    headings = [
        h.strip("`").lower()
        for h in re.findall(r"^#+ (.+)$", README.read_text(encoding="utf-8"), re.M)
    ]
    mention = re.compile(r"""(?<![/\w.])README(?:'s)?,? ["'“]?([A-Z][A-Za-z `*:-]+?)["'”),.]""")
    for file in pointer_files():
        for section in mention.findall(file.read_text(encoding="utf-8")):
            assert any(h.startswith(section.strip().lower()) for h in headings), (
                f"{file} sends the reader to the README's {section!r}, which is not there"
            )


def test_the_pages_state_the_defaults_the_code_has() -> None:
    """`assess --step-overhead-ratio` was once documented as defaulting to 0; it is the
    daemon's default h, as `model predict`'s and the configuration's."""
    from spectax.economics.step_model import DEFAULT_STEP_OVERHEAD_RATIO as H

    assess = (DOCS / "assess.md").read_text(encoding="utf-8")
    assert f"`--step-overhead-ratio h` (default {H:g}," in assess
    model = (DOCS / "model.md").read_text(encoding="utf-8")
    assert f"B\\* defaults to 32 and h to {H:g}, as in `assess`" in model
    configuration = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert f"step_overhead_ratio: {H:g}      # h assumed when no profile gives it" in configuration
    assert f"`step_overhead_ratio: H` (default {H:g}," in configuration


# The README's first two ```sh blocks, as a newcomer pastes them; .ci/run runs the second.
SET_UP = (
    "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/spectax demo",
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"
    ' -n 2 -m "not live_vllm and not live_llamacpp"'
    ' && .venv/bin/python -m pytest -m "live_vllm or live_llamacpp"',
)


@pytest.mark.e2e  # runs .ci/run's awk in bash
def test_the_readme_is_the_first_hour() -> None:
    """At most 400 lines (it was 1,174: fifty minutes of reading before the on-call part),
    opening with the two set-up commands, then the quick start; the rest is in docs/."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 400
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", text, re.M | re.S)
    assert [(lang, body.strip()) for lang, body in blocks[:2]] == [("sh", c) for c in SET_UP]
    ci = (REPOSITORY / ".ci" / "run").read_text(encoding="utf-8")
    awk = re.search(r"test_command=\$\((awk .*? README\.md)\)", ci)
    assert awk is not None, "where .ci/run reads the test command"
    read = subprocess.run(
        ["bash", "-c", awk.group(1)], cwd=REPOSITORY, capture_output=True, text=True, check=True
    )
    assert read.stdout.strip() == SET_UP[1]
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[0] == "On-call quick start", headings
