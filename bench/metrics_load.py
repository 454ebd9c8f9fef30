"""Load on spectax's /metrics: N concurrent clients for S seconds, against a real `spectax run`.

The daemon watches the demo's simulated mixed fleet (spectax.simulate) at a
1 s scrape interval, so scraping and serving compete for the same event loop. Reported:
request latency p50 / p99 / max, requests per second, errors, and whether scraping kept
its schedule: the largest lag of `spectax_last_scrape_success_timestamp_seconds` behind
the wall clock seen by a probe twice a second (on schedule: at most one interval plus the
scrape's own duration). The lag is taken when the probe sends its request: the page is
collected after that, so this is a lower bound that leaves out the probe's own wait behind
the other clients; the bound taken at the response is printed too.

    PYTHONPATH=exporter python bench/metrics_load.py [--clients 100] [--seconds 20]
        [--interval 1] [--basic-auth]

--basic-auth puts /metrics behind bcrypt basic auth (the web config's cache at work).
Prints one JSON object. tests/test_load.py runs a shorter version of it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

from spectax.credentials import basic_auth_header
from spectax.simulate import DEMO_PROFILES
from spectax.simulate.demo_fleet import demo_endpoints


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SIMULATOR = """
import asyncio, json
from spectax.simulate import DEMO_PROFILES, start_simulated_servers

async def main():
    async with await start_simulated_servers(DEMO_PROFILES) as fleet:
        print(json.dumps(dict(fleet.urls)), flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


def _lags(text: str, now: float) -> list[float]:
    return [
        now - sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "spectax_last_scrape_success_timestamp_seconds"
        for sample in family.samples
    ]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


#: Clients sharing one source address: under spectax's cap of 32 connections per address.
CLIENTS_PER_ADDRESS = 16


async def run(
    clients: int = 100, seconds: float = 20.0, interval: float = 1.0, basic_auth: bool = False
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="spectax-load-") as tmp:
        directory = Path(tmp)
        headers: dict[str, str] = {}
        config: dict[str, Any] = {}
        if basic_auth:
            import bcrypt

            password = "load-test-password"
            hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(10)).decode()
            (directory / "web.yml").write_text(
                yaml.safe_dump({"basic_auth_users": {"prometheus": hashed}})
            )
            config["web_config_file"] = str(directory / "web.yml")
            headers["Authorization"] = basic_auth_header("prometheus", password)
        # The simulated servers get a process of their own, so that the load generator's
        # CPU use cannot make them (and so spectax's scrapes) late.
        simulator = await asyncio.create_subprocess_exec(
            sys.executable, "-c", SIMULATOR, stdout=asyncio.subprocess.PIPE
        )
        try:
            assert simulator.stdout is not None
            urls = json.loads(await asyncio.wait_for(simulator.stdout.readline(), 30))
            port = _free_port()
            config.update(
                {
                    "listen": f"127.0.0.1:{port}",
                    "scrape_interval": f"{interval}s",
                    "scrape_timeout": f"{interval}s",
                    "window": f"{max(10 * interval, 2 * interval)}s",
                    "state_directory": str(directory / "state"),
                    "endpoints": demo_endpoints(urls, DEMO_PROFILES),
                }
            )
            (directory / "spectax.yml").write_text(yaml.safe_dump(config))
            log = (directory / "spectax.log").open("wb")
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "spectax",
                "run",
                "--config",
                str(directory / "spectax.yml"),
                stdout=log,
                stderr=log,
                env={**os.environ},
            )
            url = f"http://127.0.0.1:{port}/metrics"
            try:
                sessions = _client_sessions(clients)
                try:
                    return await _drive(process, url, headers, clients, seconds, interval, sessions)
                finally:
                    for own in sessions:
                        await own.close()
            finally:
                process.send_signal(signal.SIGTERM)
                code = await asyncio.wait_for(process.wait(), 30)
                log.close()
                if code != 0:
                    print((directory / "spectax.log").read_text()[-3000:], file=sys.stderr)
        finally:
            simulator.send_signal(signal.SIGTERM)
            await simulator.wait()


def _client_sessions(clients: int) -> list[aiohttp.ClientSession]:
    """spectax takes at most 32 connections from one client address (webserver.Limits): the
    clients come from addresses of 127/8, CLIENTS_PER_ADDRESS each, as many Prometheus
    servers and dashboards would, and the probe from one of its own."""
    timeout = aiohttp.ClientTimeout(total=10)
    addresses = [f"127.0.0.{2 + i}" for i in range(-(-clients // CLIENTS_PER_ADDRESS))]
    return [
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=CLIENTS_PER_ADDRESS + 2, local_addr=(address, 0)),
            timeout=timeout,
        )
        for address in addresses
    ]


async def _drive(
    process: asyncio.subprocess.Process,
    url: str,
    headers: dict[str, str],
    clients: int,
    seconds: float,
    interval: float,
    sessions: list[aiohttp.ClientSession],
) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=10)
    session = sessions[0]
    # Ready: every endpoint scraped once.
    deadline = time.monotonic() + 30
    while True:
        assert process.returncode is None, "spectax exited"
        try:
            async with session.get(url, headers=headers) as r:
                text = await r.text()
                if r.status == 200 and len(_lags(text, time.time())) == len(DEMO_PROFILES):
                    break
        except aiohttp.ClientError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("spectax did not get ready")
        await asyncio.sleep(0.2)

    latencies: list[float] = []
    errors: dict[str, int] = {}
    lags: list[float] = []
    upper: list[float] = []
    end = time.monotonic() + seconds

    async def client(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < end:
            began = time.perf_counter()
            try:
                async with session.get(url, headers=headers) as r:
                    await r.read()
                    if r.status != 200:
                        errors[f"HTTP {r.status}"] = errors.get(f"HTTP {r.status}", 0) + 1
                        continue
            except (aiohttp.ClientError, TimeoutError) as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                continue
            latencies.append(time.perf_counter() - began)

    async def probe() -> None:
        probe_from = aiohttp.TCPConnector(local_addr=("127.0.0.1", 0))
        async with aiohttp.ClientSession(connector=probe_from, timeout=timeout) as own:
            while time.monotonic() < end:
                await asyncio.sleep(0.5)
                sent = time.time()  # the page is collected after this, so the lag
                try:  # measured from here is a lower bound, free of the queueing delay
                    async with own.get(url, headers=headers) as r:
                        text = await r.text()
                    lags.extend(_lags(text, sent))
                    upper.extend(_lags(text, time.time()))
                except aiohttp.ClientError:
                    errors["probe"] = errors.get("probe", 0) + 1

    started = time.monotonic()
    await asyncio.gather(
        probe(), *(client(sessions[i // CLIENTS_PER_ADDRESS]) for i in range(clients))
    )
    elapsed = time.monotonic() - started
    return {
        "clients": clients,
        "seconds": round(elapsed, 1),
        "requests": len(latencies),
        "requests_per_second": round(len(latencies) / elapsed, 1),
        "errors": errors,
        "latency_p50_ms": round(1000 * statistics.median(latencies), 1) if latencies else None,
        "latency_p99_ms": round(1000 * _percentile(latencies, 0.99), 1) if latencies else None,
        "latency_max_ms": round(1000 * max(latencies), 1) if latencies else None,
        "scrape_interval_seconds": interval,
        "scrape_lag_max_seconds": round(max(lags), 2) if lags else None,
        "scrape_lag_p99_seconds": round(_percentile(lags, 0.99), 2) if lags else None,
        "scrape_lag_max_with_response_time_seconds": round(max(upper), 2) if upper else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--basic-auth", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(run(args.clients, args.seconds, args.interval, args.basic_auth))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
