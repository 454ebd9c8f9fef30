"""A connection flood on spectax's own server: N TLS clients each holding 7 KB of a header.

Starts a real `spectax run` with TLS and basic auth (certificates made here), opens
`--connections` TLS connections from 127.0.0.1 that each send an unfinished 7 KB request
header and nothing more, and opens a new one whenever spectax closes one, for `--seconds`
(a reconnecting slowloris). Meanwhile a normal client from another address, 127.0.0.2
(Linux routes all of 127/8 to loopback), asks for /metrics every 0.5 s with a 5 s timeout.
Reports spectax's RSS before, during and after, how many connections spectax closed at
once (past its caps) and how long it held the others, and how many of the normal client's
requests were answered in the first 10 s and over the whole flood. A flood connection gives
up after `--give-up` s (the old server held them for an hour).

    PYTHONPATH=exporter python bench/web_flood.py [--connections 2000] [--seconds 35]

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import resource
import signal
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bcrypt
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from e2e import Spectax, free_port, wait_until, write_config
from ops_helpers import client_context, make_certs

PARTIAL_HEADER = b"GET /metrics HTTP/1.1\r\nHost: spectax\r\nX-Padding: " + b"a" * 7000


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError("no VmRSS")


async def flood_slot(
    port: int, context: ssl.SSLContext, give_up: float, until: float, results: list[float | None]
) -> None:
    """One flood connection, opened again each time spectax closes it, until `until`."""
    while time.monotonic() < until:
        held = await held_for(port, context, min(give_up, max(until - time.monotonic(), 0.1)))
        results.append(held)
        if held is None:
            await asyncio.sleep(0.05)  # refused at accept: try again, as a flood would


async def normal_client(
    url: str, context: ssl.SSLContext, auth: str, until: float, answers: list[tuple[float, bool]]
) -> None:
    """A Prometheus from 127.0.0.2: GET /metrics every 0.5 s, 5 s each; (when, answered)."""
    import aiohttp

    started = time.monotonic()
    connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0), ssl=context, force_close=True)
    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        while time.monotonic() < until:
            asked = time.monotonic() - started
            try:
                async with session.get(url, headers={"Authorization": auth}) as response:
                    await response.read()
                    answers.append((asked, response.status == 200))
            except (aiohttp.ClientError, TimeoutError, ssl.SSLError, OSError):
                answers.append((asked, False))
            await asyncio.sleep(max(0.0, 0.5 - (time.monotonic() - started - asked)))


async def held_for(port: int, context: ssl.SSLContext, give_up: float) -> float | None:
    """Seconds until spectax closed the connection; None if it was refused before the header
    went out, `give_up` if it was still open then."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        writer.write(PARTIAL_HEADER)
        await writer.drain()
    except (ConnectionError, ssl.SSLError, OSError):
        return None
    started = time.monotonic()
    try:
        await asyncio.wait_for(reader.read(), give_up)
    except (ConnectionError, ssl.SSLError):
        pass
    except TimeoutError:
        return give_up
    finally:
        writer.close()
    return time.monotonic() - started


async def run(connections: int, seconds: float, give_up: float) -> dict[str, Any]:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, connections + 512), hard))
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        certs = make_certs(directory)
        hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()
        web = directory / "web.yml"
        web.write_text(
            yaml.safe_dump(
                {
                    "tls_server_config": {
                        "cert_file": str(certs.server_cert),
                        "key_file": str(certs.server_key),
                    },
                    "basic_auth_users": {"prometheus": hashed},
                }
            )
        )
        port = free_port()
        config = write_config(
            directory, port, [{"name": "down", "url": "http://127.0.0.1:1/metrics"}]
        )
        spectax = Spectax(config, port, run_args=("--web.config.file", str(web)), scheme="https")
        spectax.ssl = client_context(certs.ca)
        await spectax.start()
        assert spectax.process is not None
        pid = spectax.process.pid
        try:
            await spectax.wait_log("spectax listening")
            before = rss_mib(pid)
            context = client_context(certs.ca)
            peak = before

            async def sample() -> None:
                nonlocal peak
                while True:
                    peak = max(peak, rss_mib(pid))
                    await asyncio.sleep(0.1)

            sampler = asyncio.create_task(sample())
            started = time.monotonic()
            until = started + seconds
            results: list[float | None] = []
            answers: list[tuple[float, bool]] = []
            auth = "Basic " + base64.b64encode(b"prometheus:secret").decode()
            await asyncio.gather(
                normal_client(f"{spectax.url}/metrics", context, auth, until, answers),
                *(flood_slot(port, context, give_up, until, results) for _ in range(connections)),
            )
            elapsed = time.monotonic() - started
            sampler.cancel()
            after = rss_mib(pid)
            status, _ = await spectax.get(headers={})  # answers (401: no password) after
            held = sorted(r for r in results if r is not None and r > 1.0)
            first = [ok for asked, ok in answers if asked < 10.0]
            return {
                "connections": connections,
                "flood_connections_opened": len(results),
                "rss_mib_before": before,
                "rss_mib_peak_during": peak,
                "rss_mib_after": after,
                "closed_within_1s": sum(1 for r in results if r is not None and r <= 1.0),
                "refused_before_the_header": sum(1 for r in results if r is None),
                "held": len(held),
                "held_seconds_max": round(held[-1], 1) if held else 0.0,
                "still_open_when_the_client_gave_up": sum(1 for r in results if r == give_up),
                "normal_client_answered_first_10s": f"{sum(first)} of {len(first)}",
                "normal_client_answered": f"{sum(ok for _, ok in answers)} of {len(answers)}",
                "flood_seconds": round(elapsed, 1),
                "status_after": status,
            }
        finally:
            spectax.signal(signal.SIGTERM)
            await wait_until(lambda: spectax.process.returncode is not None, 30, "spectax to stop")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=35.0)
    parser.add_argument("--give-up", type=float, default=30.0)
    args = parser.parse_args()
    result = asyncio.run(run(args.connections, args.seconds, args.give_up))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
