"""The hardened unit: `systemd-analyze verify` silent, `security --offline=yes` exposure <= 2.0.

No systemd runs here (not PID 1), but systemd-analyze checks a unit file offline. `verify`
exits 0 on unknown keys or bad values and only prints them, so any output at all fails.
It also wants the ExecStart binary to exist: the test checks a copy of the unit whose
ExecStart points at the `spectax` script of the environment running the tests (the
shipped unit names /opt/spectax/bin/spectax, the README's install location).
CI installs systemd-analyze with .ci/install-systemd-tools.sh.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spectax.cli.main import _parser
from systemd_unit import ENV, INSTALLED, UNIT, directives

MAX_EXPOSURE = 2.0

ANALYZE = shutil.which("systemd-analyze")
if ANALYZE is None and os.environ.get("SPECTAX_CI"):
    pytest.fail("systemd-analyze is missing: run .ci/install-systemd-tools.sh", pytrace=False)
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")


def spectax_script() -> str:
    script = Path(sys.executable).parent / "spectax"
    found = str(script) if script.exists() else shutil.which("spectax")
    assert found, "the spectax console script is not installed"
    return found


def unit_copy(tmp_path: Path, extra: str = "") -> Path:
    text = UNIT.read_text().replace(INSTALLED, spectax_script())
    if extra:
        text = text.replace("[Service]\n", f"[Service]\n{extra}\n")
    path = tmp_path / "spectax.service"
    path.write_text(text)
    return path


def analyze(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    return subprocess.run(
        [ANALYZE, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.e2e  # runs systemd-analyze
@needs_analyze
def test_unit_verifies_without_a_word(tmp_path: Path) -> None:
    result = analyze("verify", "./spectax.service", cwd=unit_copy(tmp_path).parent)
    assert result.returncode == 0
    assert result.stdout + result.stderr == ""


@pytest.mark.e2e  # runs systemd-analyze
@needs_analyze
def test_verify_would_catch_a_bad_key(tmp_path: Path) -> None:
    """The rule 'any output fails' is what catches typos: verify still exits 0 on them."""
    result = analyze(
        "verify", "./spectax.service", cwd=unit_copy(tmp_path, "ProtectSystm=strict").parent
    )
    assert "ProtectSystm" in result.stdout + result.stderr


@pytest.mark.e2e  # runs systemd-analyze
@needs_analyze
def test_exposure_is_at_most_two(tmp_path: Path) -> None:
    result = analyze(
        "security",
        "--offline=yes",
        "--no-pager",
        "./spectax.service",
        cwd=unit_copy(tmp_path).parent,
    )
    match = re.search(r"Overall exposure level for spectax\.service: ([0-9.]+)", result.stdout)
    assert match, result.stdout + result.stderr
    exposure = float(match.group(1))
    print(f"systemd-analyze security exposure: {exposure}")
    assert exposure <= MAX_EXPOSURE


def test_unit_has_the_hardening_and_lifecycle_the_issue_asks_for() -> None:
    d = directives(UNIT.read_text())
    expected = {
        "DynamicUser": "yes",
        "StateDirectory": "spectax",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "CapabilityBoundingSet": "",
        "Restart": "on-failure",
        "ExecReload": "/bin/kill -HUP $MAINPID",
    }
    for key, value in expected.items():
        assert value in d.get(key, []), key
    assert d["RestrictAddressFamilies"] == ["AF_INET AF_INET6 AF_UNIX"]
    assert "@system-service" in d["SystemCallFilter"]
    assert any(v.startswith("spectax:/etc/spectax/credentials") for v in d["LoadCredential"])
    assert d["ExecStart"][0].startswith(INSTALLED + " ")


def test_exec_start_is_a_valid_command_line() -> None:
    """ExecStart, with the variables of the shipped environment file, parses as `spectax run`."""
    env = {**directives(ENV.read_text())}
    values = {k: v[-1] for k, v in env.items()}
    for default in directives(UNIT.read_text())["Environment"]:
        for pair in shlex.split(default):
            key, _, value = pair.partition("=")
            values.setdefault(key, value)
    command = directives(UNIT.read_text())["ExecStart"][0]
    referenced = set(re.findall(r"\$\{?([A-Z_]+)\}?", command))
    assert referenced <= set(values), referenced - set(values)
    words = []
    for word in command.split():
        if re.fullmatch(r"\$[A-Z_]+", word):  # unbraced: split into words, dropped when empty
            words += values[word[1:]].split()
        else:
            words.append(re.sub(r"\$\{([A-Z_]+)\}", lambda m: values[m.group(1)], word))
    args = _parser().parse_args(words[1:])
    assert args.command == "run"
    assert str(args.config) == "/etc/spectax/spectax.yml"
    assert args.log_format in ("text", "json")
