"""The command line as a newcomer meets it: the listen address, empty configurations, help."""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e import Spectax, free_port, run_spectax, spectax_command, value, write_config
from spectax.cli.main import _parser, main

SIMULATED = [{"name": "gone", "url": "http://127.0.0.1:1/metrics"}]


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another process holds: a real listening socket."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield int(held.getsockname()[1])


@pytest.mark.e2e
@pytest.mark.parametrize("command", ["demo", "run"])
def test_a_taken_port_is_one_line_naming_the_address_and_the_flag_and_exit_2(
    tmp_path: Path, taken_port: int, command: str
) -> None:
    args = ["--web.listen-address", f"127.0.0.1:{taken_port}"]
    if command == "run":
        args += ["--config", str(write_config(tmp_path, free_port(), SIMULATED))]
    done = run_spectax(command, *args, cwd=tmp_path)
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


@pytest.mark.e2e
@pytest.mark.parametrize("given", ["an empty file", "no file"])
def test_run_refuses_to_watch_nothing_and_says_the_simulator_is_the_demos(
    tmp_path: Path, given: str
) -> None:
    """Before, `run` without endpoints quietly served the simulated servers' gauges,
    fake figures into a real Prometheus."""
    config = tmp_path / "spectax.yml"
    config.write_text(f"state_directory: {tmp_path / 'state'}\n")
    done = run_spectax(
        "run", *(["--config", str(config)] if given == "an empty file" else []), cwd=tmp_path
    )
    assert done.returncode == 2, done.stderr
    assert "no endpoints" in done.stderr and "`spectax demo`" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "state").exists() and not (tmp_path / "spectax-state").exists()


def test_check_config_passes_a_file_without_endpoints_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "spectax.yml"
    config.write_text("scrape_interval: 15s\n")
    assert main(["check-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "OK, 0 endpoint(s)" in out
    assert f"warning: {config}: no endpoints" in out and "`spectax run` refuses" in out


def all_commands() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by its full name (`db upgrade`), the top level as ``."""
    found, todo = {}, [("", _parser())]
    while todo:
        name, parser = todo.pop()
        found[name] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(f"{name} {sub}".strip(), p) for sub, p in action.choices.items()]
    return found


def test_the_top_level_help_lists_every_command_with_what_it_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    commands = [name for name in all_commands() if name and " " not in name]
    assert len(commands) == 10
    for command in commands:
        assert re.search(rf"^\s+{command}\s+\w", out, re.MULTILINE), f"{command}:\n{out}"


def test_every_argument_of_every_command_says_what_it_is_for() -> None:
    silent = [
        f"spectax {name}: {action.dest}"
        for name, parser in all_commands().items()
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction) and not action.help
    ]
    assert not silent, silent


def test_check_config_takes_config_like_every_other_command_and_the_file_still(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, free_port(), SIMULATED)
    assert main(["check-config", "--config", str(config)]) == 0
    assert f"{config}: OK, 1 endpoint(s)" in capsys.readouterr().out
    assert main(["check-config", str(config)]) == 0
    assert f"{config}: OK, 1 endpoint(s)" in capsys.readouterr().out
    assert main(["check-config"]) == 2
    assert "--config FILE" in capsys.readouterr().err


def test_db_alone_shows_its_commands_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db"]) == 2
    err = capsys.readouterr().err
    assert "upgrade" in err and "migrate the database" in err
    assert "error:" not in err


@pytest.mark.e2e
async def test_the_live_demo_calibrates_from_its_own_windows_not_from_demo_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, `demo --history` wrote into the live demo's SQLite file, and the live demo
    resumed from the simulated history: its spend counter started at the history's total
    ($670 after 7 days), and its ridge batch could be fitted on it (B* = 89.6 in issue 17).
    The history has its own file, which `report` reads by default."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    assert await asyncio.to_thread(main, ["demo", "--history", "1d"]) == 0
    month = re.search(r"spectax report --month (\d{4}-\d{2})", capsys.readouterr().out)
    assert month is not None
    assert (
        await asyncio.to_thread(main, ["report", "--month", month.group(1), "--out", "r.md"]) == 0
    )
    report = (tmp_path / "r.md").read_text()
    assert "code-assistant" in report  # the README's two commands
    # The demo's windows carry the daemon's verdicts and bases: the report says how each was
    # reached (chat-creative on its control's plain curve, code-assistant on the profile a
    # simulated sweep of its model taught, as in the live demo, the summarizer on defaults).
    assert "| chat-creative | calibrated 100.0% | control |" in report
    assert "| code-assistant | profile 100.0% | sweep |" in report
    assert "| summarizer | default 100.0% | configured |" in report
    assert not (tmp_path / "spectax-state" / "spectax.sqlite").exists()

    port = free_port()
    live = Spectax(tmp_path / "unused.yml", port)
    await live.start_demo(tmp_path)
    try:
        m = await live.wait_for(
            lambda m: (
                value(m, "spectax_ridge_batch_requests", endpoint="code-assistant")
                and value(m, "spectax_spend_usd_total", endpoint="code-assistant") is not None
            )
        )
        # A day of the simulated history is ~$95 of it; a fresh demo's first scrapes, cents.
        assert value(m, "spectax_spend_usd_total", endpoint="code-assistant") < 1
        assert value(m, "spectax_ridge_batch_requests", source="calibrated") is None
        assert "resuming from" not in live.log  # nor any cursor of the simulated history
    finally:
        assert await live.stop() == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--log-level", "debug", "--log-format", "json"],
        ["--log-level", "debug", "--log-format", "json", "run"],
        ["run", "--log.level", "debug", "--log.format=json"],
        ["db", "upgrade", "--log.level=debug", "--log-format", "json"],
    ],
)
def test_the_global_flags_go_before_or_after_the_command_with_prometheus_spellings(
    argv: list[str],
) -> None:
    """An exporter's operator types `spectax run --log-level debug`, or Prometheus'
    `--log.level`: both were refused ("unrecognized arguments", or an error that pointed
    at the wrong flag)."""
    args = _parser().parse_args(argv)
    assert (args.log_level, args.log_format) == ("debug", "json")


def test_a_flag_before_the_command_is_not_undone_by_the_commands_default() -> None:
    args = _parser().parse_args(["--log-level", "warning", "check-config"])
    assert args.log_level == "warning" and args.log_format == "text"


def test_version_after_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("spectax ")


def test_no_flag_is_taken_for_a_longer_one_it_abbreviates(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--acceptance 0.6` passed silently for `--acceptance-length 0.6` (argparse's
    allow_abbrev): a different quantity, a different answer."""
    with pytest.raises(SystemExit) as exited:
        main(["model", "predict", "--concurrency", "8", "--acceptance-len", "2.0"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --acceptance-len" in capsys.readouterr().err


def test_the_all_interfaces_form_of_the_listen_address_is_taken() -> None:
    """Prometheus' `--web.listen-address=:9090` means every interface; spectax refused it."""
    args = _parser().parse_args(["demo", "--web.listen-address", ":9837"])
    assert args.listen_address == ":9837"
    from spectax.config import validate

    config = validate({"listen": ":9837"}, "test").config
    assert (config.listen_host, config.listen_port) == ("", 9837)


@pytest.mark.e2e
def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    """`spectax assess ... | head` ended in a BrokenPipeError traceback."""
    levels = ",".join(map(str, range(1, 3000)))
    predict = ["model", "predict", "--acceptance", "0.6", "--num-speculative-tokens", "3"]
    reader = subprocess.Popen(
        spectax_command(*predict, "--concurrency", levels),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert reader.stdout is not None and reader.stderr is not None
    reader.stdout.readline()
    reader.stdout.close()  # what `head -1` does once it has its line
    err = reader.stderr.read().decode()
    assert reader.wait(timeout=60) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_debug_logging_is_spectaxs_lines_not_its_drivers_statements() -> None:
    """`--log-level debug` flooded with aiosqlite's line per statement."""
    import logging

    from spectax import logs

    try:
        logs.setup("debug")
        assert logging.getLogger("spectax.monitor").isEnabledFor(logging.DEBUG)
        for chatty in ("aiosqlite", "asyncpg", "aiohttp.access"):
            assert not logging.getLogger(chatty).isEnabledFor(logging.DEBUG), chatty
            assert logging.getLogger(chatty).isEnabledFor(logging.INFO), chatty
    finally:
        logs.setup("info")
