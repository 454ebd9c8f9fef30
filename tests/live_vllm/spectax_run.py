"""`spectax run` as a process for the live tiers (vLLM, llama.cpp): its configuration,
start, /metrics read by prometheus_client, waiting on it, SIGTERM; and what the tiers'
modules share (skipping when the servers cannot run, a line in pytest's report, running
a scenario with every log printed on a failure).

Synchronous, as the live scenarios are: they pace real servers with wall-clock sleeps.
"""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from e2e import spectax_command
from live_vllm import servers as live
from live_vllm.servers import VllmServer

SCRAPE = 1.0  # spectax scrape_interval and scrape_timeout, seconds
WINDOW = 15.0  # spectax window: sliding window and history window length


class Metrics(dict[tuple[str, tuple[tuple[str, str], ...]], float]):
    """spectax's /metrics, parsed by prometheus_client."""

    @classmethod
    def parse(cls, text: str) -> Metrics:
        return cls(
            {
                (s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text)
                for s in family.samples
            }
        )

    def value(self, name: str, **labels: str) -> float | None:
        for (sample, sample_labels), v in self.items():
            if sample == name and all((k, val) in sample_labels for k, val in labels.items()):
                return v
        return None

    def total(self, name: str, **labels: str) -> float | None:
        """Sum over every sample of `name` with these labels (None when there is none)."""
        found = [
            v
            for (sample, sample_labels), v in self.items()
            if sample == name and all((k, val) in sample_labels for k, val in labels.items())
        ]
        return sum(found) if found else None

    def labels_of(self, name: str, **labels: str) -> list[dict[str, str]]:
        return [
            dict(sample_labels)
            for (sample, sample_labels) in self
            if sample == name and all((k, v) in sample_labels for k, v in labels.items())
        ]


class SpectaxRun:
    """A `spectax run` process; a tier's subclass configures its endpoints in `__init__`."""

    def configure(
        self, workdir: Path, endpoints: list[dict[str, Any]], window: float = WINDOW
    ) -> None:
        """The run's files in `workdir`, and its configuration: these endpoints, scraped every
        SCRAPE seconds, in windows of `window` seconds."""
        self.port = live.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workdir = workdir
        self.log = workdir / "spectax.log"
        self.state = workdir / "spectax-state"
        self.config = workdir / "spectax.yml"
        self._config = {
            "listen": f"127.0.0.1:{self.port}",
            "scrape_interval": f"{SCRAPE}s",
            "scrape_timeout": f"{SCRAPE}s",
            "window": f"{window}s",
            "state_directory": str(self.state),
            "endpoints": endpoints,
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # The port is picked now, not when the fixture was built: the vLLM servers started
        # in between bind ephemeral ports too, and once took the one picked earlier.
        self.port = live.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._config["listen"] = f"127.0.0.1:{self.port}"
        self.config.write_text(yaml.safe_dump(self._config, sort_keys=False))
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                spectax_command("run", "--config", str(self.config)),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def metrics(self) -> Metrics:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=5) as r:
            return Metrics.parse(r.read().decode())

    def wait_for(self, predicate: Callable[[Metrics], bool], timeout: float, what: str) -> Metrics:
        deadline = time.monotonic() + timeout
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"spectax exited {self.process.returncode}:\n{self.tail()}")
            try:
                last = self.metrics()
                if predicate(last):
                    return last
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"spectax: no {what} within {timeout:.0f} s")
            time.sleep(0.2)

    def scraped_after(self, t: float, names: list[str], timeout: float = 20.0) -> Metrics:
        """Wait until each endpoint had a successful scrape that *started* after wall time t.

        A scrape's timestamp is taken when it succeeds, at most scrape_timeout after it
        started; so a timestamp past t + scrape_timeout belongs to a scrape begun after t.
        """

        def fresh(m: Metrics) -> bool:
            return all(
                (m.value("spectax_last_scrape_success_timestamp_seconds", endpoint=n) or 0)
                > t + SCRAPE
                for n in names
            )

        return self.wait_for(fresh, timeout, f"scrape after {t:.1f} for {names}")

    def stop(self) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
            return None

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


def skip_unless_available(tier: str, servers: int, workdir: Path) -> None:
    """Skip the tier (fail it in CI, where the install is run first) unless `servers` vLLM
    processes can run here."""
    reason = live.why_unavailable(servers, workdir / "setup.log")
    if reason is not None:
        if live.in_ci():
            pytest.fail(f"{tier} cannot run in CI: {reason}", pytrace=False)
        pytest.skip(f"{tier}: {reason}")


def say(request: pytest.FixtureRequest, line: str) -> None:
    """A line in pytest's own report (seen without -s), and on stdout."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
    print(line)


def run_watched(
    servers: list[VllmServer],
    spectax: SpectaxRun,
    timings: dict[str, float],
    scenario: Callable[[], None],
) -> tuple[int | None, str]:
    """Start the servers, run `scenario` (which starts spectax), then stop spectax and the
    servers; spectax's exit code and log. Times go to `timings`; on a failure the logs of
    all of them are printed."""
    started = time.monotonic()
    try:
        with live.running(servers) as ready:
            timings["servers_ready"] = round(ready, 1)
            try:
                scenario()
            finally:
                exit_code, log = spectax.stop(), spectax.tail(200_000)
        timings["total"] = round(time.monotonic() - started, 1)
    except Exception:
        spectax.stop()
        logs = "\n".join(f"--- {s.name}\n{s.tail(1500)}" for s in servers)
        print(f"spectax log:\n{spectax.tail()}\n{logs}")
        raise
    return exit_code, log


def tpot(d: dict[str, float]) -> float:
    return d["tpot_sum"] / d["tpot_count"]
