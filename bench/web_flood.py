"""A connection flood on spectax's own server: N TLS clients each holding 7 KB of a header.

Starts a real `spectax run` with TLS and basic auth (certificates made here), opens
`--connections` TLS connections that each send an unfinished 7 KB request header and
nothing more, and reports spectax's RSS before, while they are open, and after they are
gone, how many spectax closed at once (past its connection cap) and how long it held the
others. A client gives up after `--give-up` s (the old server held them for an hour).

    PYTHONPATH=exporter python bench/web_flood.py [--connections 2000] [--give-up 30]

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
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


async def run(connections: int, give_up: float) -> dict[str, Any]:
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
            results = await asyncio.gather(
                *(held_for(port, context, give_up) for _ in range(connections))
            )
            elapsed = time.monotonic() - started
            sampler.cancel()
            after = rss_mib(pid)
            status, _ = await spectax.get(headers={})  # answers (401: no password) after
            held = sorted(r for r in results if r is not None and r > 1.0)
            return {
                "connections": connections,
                "rss_mib_before": before,
                "rss_mib_peak_during": peak,
                "rss_mib_after": after,
                "retained_kib_per_connection": round((after - before) * 1024 / connections, 1),
                "closed_within_1s": sum(1 for r in results if r is not None and r <= 1.0),
                "refused_before_the_header": sum(1 for r in results if r is None),
                "held": len(held),
                "held_seconds_max": round(held[-1], 1) if held else 0.0,
                "still_open_when_the_client_gave_up": sum(1 for r in results if r == give_up),
                "flood_seconds": round(elapsed, 1),
                "status_after": status,
            }
        finally:
            spectax.signal(signal.SIGTERM)
            await wait_until(lambda: spectax.process.returncode is not None, 30, "spectax to stop")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--give-up", type=float, default=30.0)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.connections, args.give_up)), indent=2))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
