"""Running spectax as a real process in tests: the one command line that starts it
(`spectax_command`), a command run to its end (`run_spectax`), and `spectax run` or
`spectax demo` kept running (`Spectax`: its configuration, /metrics, log, signals)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import socket
import sqlite3
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def spectax_command(*args: str) -> list[str]:
    """This checkout's spectax with `args`: the test run's interpreter, `-m spectax`. Every
    test that starts spectax in a process of its own starts it with this command line."""
    return [sys.executable, "-m", "spectax", *args]


def run_spectax(
    *args: str, cwd: Path | None = None, timeout: float = 120, **options: Any
) -> subprocess.CompletedProcess[str]:
    """`spectax args...` run to its end, without a terminal or stdin: its exit code, and
    stdout and stderr as text. `options` go to subprocess.run (env, start_new_session)."""
    return subprocess.run(
        spectax_command(*args),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **options,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(directory: Path, port: int, endpoints: list[dict[str, Any]], **extra: Any) -> Path:
    """A configuration for fast tests: 1 s scrapes, 4 s windows, state under `directory`;
    `extra` adds or overrides settings."""
    config = {
        "listen": f"127.0.0.1:{port}",
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "window": "4s",
        "state_directory": str(directory / "state"),
        "endpoints": endpoints,
        **extra,
    }
    path = directory / "spectax.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


class Spectax:
    """A `spectax ... run` process: its /metrics, its log, SIGHUP and SIGTERM."""

    name = "spectax"

    def __init__(
        self,
        config: Path,
        port: int,
        *,
        run_args: tuple[str, ...] = (),
        global_args: tuple[str, ...] = (),
        scheme: str = "http",
        env: dict[str, str] | None = None,
    ):
        self.config, self.port = config, port
        self.url = f"{scheme}://127.0.0.1:{port}"
        self.run_args, self.global_args = run_args, global_args
        self.env = env
        self.process: asyncio.subprocess.Process | None = None
        self.stdout = config.parent / "spectax.stdout"
        self.stderr = config.parent / "spectax.stderr"
        self.ssl: ssl.SSLContext | bool = True
        self.auth: str | None = None  # an Authorization header value

    async def start(self, preexec_fn: Callable[[], None] | None = None) -> None:
        """`preexec_fn` runs in the child before spectax starts (e.g. to lower a limit)."""
        env = {**os.environ, "PYTHONFAULTHANDLER": "1", **(self.env or {})}
        # The child keeps its own copies of the log files; the parent's close here.
        with self.stdout.open("ab") as stdout, self.stderr.open("ab") as stderr:
            self.process = await asyncio.create_subprocess_exec(
                *spectax_command(
                    *self.global_args, "run", "--config", str(self.config), *self.run_args
                ),
                stdout=stdout,
                stderr=stderr,
                env=env,
                preexec_fn=preexec_fn,
            )

    async def start_demo(self, cwd: Path, listen_flag: str = "--web.listen-address") -> None:
        """`spectax demo` (the embedded default: simulated servers, SQLite under `cwd`) on
        this instance's port, named by `listen_flag` (or its `--listen` alias), its output
        in the log.

        The demo's simulated servers bind ephemeral ports before spectax listens, and one
        can take the port `free_port` found free (CI: "address already in use", 1 run in
        4): then the demo is started again on another port, at most three times."""
        for _ in range(3):
            with self.stderr.open("wb") as log:
                self.process = await asyncio.create_subprocess_exec(
                    *spectax_command("demo", listen_flag, f"127.0.0.1:{self.port}"),
                    cwd=cwd,
                    stdout=log,
                    stderr=asyncio.subprocess.STDOUT,
                )
            for _ in range(600):  # until it listens (its guide is printed then) or exits
                if self.process.returncode is not None or "spectax status page" in self.log:
                    break
                await asyncio.sleep(0.1)
            if self.process.returncode is None or "address already in use" not in self.log:
                return
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> str:
        """What spectax logged (its stderr); empty before it has started."""
        return self.stderr.read_text(errors="replace") if self.stderr.exists() else ""

    def log_tail(self, chars: int = 3000) -> str:
        return self.log[-chars:]

    def check_alive(self) -> None:
        assert self.process is not None and self.process.returncode is None, (
            f"spectax exited; log:\n{self.log_tail()}"
        )

    async def get(self, path: str = "/metrics", **kwargs: Any) -> tuple[int, str]:
        kwargs.setdefault("ssl", self.ssl)
        if self.auth:
            kwargs.setdefault("headers", {"Authorization": self.auth})
        timeout = aiohttp.ClientTimeout(total=10)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(f"{self.url}{path}", **kwargs) as r,
        ):
            return r.status, await r.text()

    async def post(self, path: str) -> tuple[int, str]:
        timeout = aiohttp.ClientTimeout(total=30)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(
                f"{self.url}{path}",
                ssl=self.ssl,
                headers={"Authorization": self.auth} if self.auth else None,
            ) as r,
        ):
            return r.status, await r.text()

    async def metrics(self) -> Samples:
        status, text = await self.get()
        assert status == 200, text
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    async def wait_for(self, predicate: Callable[[Samples], Any], timeout: float = 40.0) -> Samples:
        """The first /metrics page that `predicate` accepts."""

        async def accepted() -> Samples | None:
            with contextlib.suppress(aiohttp.ClientError, AssertionError, OSError):
                m = await self.metrics()
                if predicate(m):
                    return m
            return None

        page: Samples = await wait_until(accepted, timeout, "a /metrics page to match", [self])
        return page

    async def wait_ready(self, timeout: float = 40.0) -> None:
        """Until `/-/ready` says so: a reload before then is refused ("still starting"), so
        a test of what a reload does waits for this, not for a scrape."""

        async def ready() -> bool:
            with contextlib.suppress(aiohttp.ClientError, OSError):
                return (await self.get("/-/ready"))[0] == 200
            return False

        await wait_until(ready, timeout, "/-/ready", [self])

    async def wait_log(self, text: str, timeout: float = 20.0) -> None:
        await wait_until(lambda: text in self.log, timeout, f"{text!r} in the log", [self])

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    async def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, and the exit code (killed, and its negative code, if it does not stop
        within `timeout`); None if it never started."""
        if self.process is None:
            return None
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.process.wait(), timeout)
        except TimeoutError:
            # SIGABRT first: faulthandler (PYTHONFAULTHANDLER, set at start) writes every
            # thread's stack to the log, so a stop that hangs says where.
            self.process.send_signal(signal.SIGABRT)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.process.wait(), 2.0)
            if self.process.returncode is None:
                self.process.kill()
            await self.process.wait()
            return -signal.SIGKILL

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


class Watched(Protocol):
    """A process that a wait keeps an eye on (spectax, Prometheus, ...)."""

    name: str

    def check_alive(self) -> None: ...  # raises AssertionError once it has exited

    def log_tail(self) -> str: ...


async def wait_until(
    probe: Callable[[], Any],
    timeout: float,
    what: str,
    check: Sequence[Watched] = (),
    interval: float = 0.2,
) -> Any:
    """Poll `probe` (plain or async) until it returns something truthy, and return that:
    a test waits on the condition it needs, never sleeps for a guess. Fails at once when a
    process in `check` has exited, and after `timeout` s naming `what`, with their logs."""
    deadline = time.monotonic() + timeout
    while True:
        last = probe()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        for process in check:
            process.check_alive()
        if time.monotonic() >= deadline:
            logs = "".join(f"\n{process.name} log:\n{process.log_tail()}" for process in check)
            raise AssertionError(
                f"timed out after {timeout} s waiting for {what}; last: {last!r}{logs}"
            )
        await asyncio.sleep(interval)


def value(metrics: Samples, name: str, **labels: str) -> float | None:
    for (sample, sample_labels), v in metrics.items():
        if sample == name and all((k, val) in sample_labels for k, val in labels.items()):
            return v
    return None


def stored_windows(state: Path, endpoint: str) -> tuple[int, float]:
    """(rows, output tokens) of `endpoint` in the windows table of the SQLite store under
    `state`; read only, so that it never creates the file before spectax does."""
    uri = f"file:{state / 'spectax.sqlite'}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        rows, tokens = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(output_tokens), 0) FROM windows WHERE endpoint = ?",
            (endpoint,),
        ).fetchone()
    return int(rows), float(tokens)
