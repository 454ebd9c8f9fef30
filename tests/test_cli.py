"""The command line as a newcomer meets it: the listen address, empty configurations, help."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e import Spectax, free_port, value, write_config
from spectax.cli.main import main

SIMULATED = [{"name": "gone", "url": "http://127.0.0.1:1/metrics"}]


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another process holds: a real listening socket."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield int(held.getsockname()[1])


def spectax(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spectax", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.e2e
@pytest.mark.parametrize("command", ["demo", "run"])
def test_a_taken_port_is_one_line_naming_the_address_and_the_flag_and_exit_2(
    tmp_path: Path, taken_port: int, command: str
) -> None:
    args = ["--web.listen-address", f"127.0.0.1:{taken_port}"]
    if command == "run":
        args += ["--config", str(write_config(tmp_path, free_port(), SIMULATED))]
    done = spectax(command, *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    line = next(x for x in done.stderr.splitlines() if "cannot listen" in x)
    assert f"127.0.0.1:{taken_port}" in line and "address already in use" in line
    assert "--web.listen-address HOST:PORT" in line


@pytest.mark.e2e
async def test_run_listens_where_the_flag_says_and_still_reloads(tmp_path: Path) -> None:
    """The flag wins over the file's `listen`, and a reload of the file does not take
    the file's `listen` for a change that needs a restart."""
    port = free_port()
    config = write_config(tmp_path, free_port(), SIMULATED)
    process = Spectax(config, port, run_args=("--web.listen-address", f"127.0.0.1:{port}"))
    await process.start()
    try:
        await process.wait_for(lambda m: value(m, "spectax_endpoint_up", endpoint="gone") == 0)
        await process.wait_log(f"spectax listening on http://127.0.0.1:{port}")
        process.signal(signal.SIGHUP)
        await process.wait_log("configuration reloaded")
        m = await process.metrics()
        assert value(m, "spectax_config_last_reload_successful") == 1
    finally:
        assert await process.stop() == 0


def test_a_bad_listen_address_is_refused_naming_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--web.listen-address", "9837"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--web.listen-address" in err and "must be HOST:PORT" in err
