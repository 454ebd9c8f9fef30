"""Running `spectax run` as a real process in tests, and reading its /metrics."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Spectax:
    """A `spectax run` process and its /metrics."""

    def __init__(self, config: Path, port: int):
        self.config, self.url = config, f"http://127.0.0.1:{port}"
        self.process: asyncio.subprocess.Process | None = None
        self.log = config.parent / "spectax.log"

    async def start(self, preexec_fn: Callable[[], None] | None = None) -> None:
        """`preexec_fn` runs in the child before spectax starts (e.g. to lower a limit)."""
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "spectax",
            "run",
            "--config",
            str(self.config),
            stdout=self.log.open("ab"),
            stderr=asyncio.subprocess.STDOUT,
            preexec_fn=preexec_fn,
        )

    async def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        async with aiohttp.ClientSession() as session, session.get(f"{self.url}/metrics") as r:
            text = await r.text()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    async def wait_for(self, predicate: Any, timeout: float = 40.0) -> dict[Any, float]:
        deadline = time.monotonic() + timeout
        last: dict[Any, float] = {}
        while time.monotonic() < deadline:
            assert self.process is not None and self.process.returncode is None, (
                self.log.read_text()
            )
            try:
                last = await self.metrics()
                if predicate(last):
                    return last
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.5)
        raise AssertionError(f"timed out; log:\n{self.log.read_text()[-3000:]}")

    async def stop(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.process.wait(), 20)


def value(metrics: dict[Any, float], name: str, **labels: str) -> float | None:
    for (sample, sample_labels), v in metrics.items():
        if sample == name and all((k, val) in sample_labels for k, val in labels.items()):
            return v
    return None


def write_config(
    tmp_path: Path, port: int, endpoints: list[dict[str, Any]], **settings: Any
) -> Path:
    """A configuration for fast tests: 1 s scrapes, 6 s windows, state under tmp_path."""
    config = {
        "listen": f"127.0.0.1:{port}",
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "window": "6s",
        "state_directory": str(tmp_path / "state"),
        "endpoints": endpoints,
        **settings,
    }
    path = tmp_path / "spectax.yml"
    path.write_text(yaml.safe_dump(config))
    return path
