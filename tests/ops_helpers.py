"""Helpers for the operations tests: test certificates, scrape targets, a `spectax run` process."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import os
import signal
import socket
import ssl
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from conftest import page

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
PAGES = ("spec_ngram_0_before_traffic.txt", "spec_ngram_2_mid.txt", "spec_ngram_3_after.txt")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------ certificates


@dataclass
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # an unrelated CA
    rogue_cert: Path  # a client certificate from the unrelated CA
    rogue_key: Path


def make_certs(directory: Path) -> Certs:
    """A CA, a server certificate for 127.0.0.1/localhost, and client certificates."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return path

    def write_cert(cert: x509.Certificate, path: Path) -> Path:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    def ca(common: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name(common))
            .issuer_name(name(common))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        return cert, key

    def leaf(
        issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
        common: str,
        sans: list[x509.GeneralName],
        usage: x509.ObjectIdentifier,
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name(common))
            .issuer_name(issuer[0].subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer[1].public_key()),
                critical=False,
            )
            .sign(issuer[1], hashes.SHA256())
        )
        return cert, key

    root = ca("spectax test CA")
    other = ca("unrelated CA")
    server = leaf(
        root,
        "localhost",
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
        ExtendedKeyUsageOID.SERVER_AUTH,
    )
    client = leaf(
        root, "prometheus", [x509.DNSName("prometheus.test")], ExtendedKeyUsageOID.CLIENT_AUTH
    )
    rogue = leaf(
        other, "prometheus", [x509.DNSName("prometheus.test")], ExtendedKeyUsageOID.CLIENT_AUTH
    )
    d = directory
    return Certs(
        ca=write_cert(root[0], d / "ca.crt"),
        server_cert=write_cert(server[0], d / "server.crt"),
        server_key=write_key(server[1], d / "server.key"),
        client_cert=write_cert(client[0], d / "client.crt"),
        client_key=write_key(client[1], d / "client.key"),
        other_ca=write_cert(other[0], d / "other-ca.crt"),
        rogue_cert=write_cert(rogue[0], d / "rogue.crt"),
        rogue_key=write_key(rogue[1], d / "rogue.key"),
    )


def client_context(
    ca: Path | None, cert: Path | None = None, key: Path | None = None
) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca) if ca else None)
    if cert and key:
        context.load_cert_chain(str(cert), str(key))
    return context


# ------------------------------------------------------------------ targets

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Targets:
    """An aiohttp server on loopback with one route per target name."""

    def __init__(self) -> None:
        self.app = web.Application()
        self.runner: web.AppRunner | None = None
        self.port = free_port()
        self.requests: dict[str, int] = {}
        self.seen_headers: dict[str, list[dict[str, str]]] = {}

    def url(self, name: str, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/{name}/metrics"

    def add(self, name: str, handler: Handler) -> None:
        async def counted(request: web.Request) -> web.StreamResponse:
            self.requests[name] = self.requests.get(name, 0) + 1
            self.seen_headers.setdefault(name, []).append(dict(request.headers))
            return await handler(request)

        self.app.router.add_get(f"/{name}/metrics", counted)

    def add_pages(self, name: str, pages: tuple[str, ...] = PAGES) -> None:
        """Recorded vLLM pages in order, then the last one again and again."""
        texts = [page(p) for p in pages]

        async def serve(request: web.Request) -> web.Response:
            n = self.requests[name] - 1
            return web.Response(text=texts[min(n, len(texts) - 1)])

        self.add(name, serve)

    async def start(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.runner = web.AppRunner(self.app, shutdown_timeout=0.2)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port, ssl_context=ssl_context).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.shutdown()
            await self.runner.cleanup()


# ------------------------------------------------------------------ the daemon


def write_config(directory: Path, port: int, endpoints: list[dict[str, Any]], **extra: Any) -> Path:
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

    async def start(self) -> None:
        env = {**os.environ, **(self.env or {})}
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "spectax",
            *self.global_args,
            "run",
            "--config",
            str(self.config),
            *self.run_args,
            stdout=self.stdout.open("ab"),
            stderr=self.stderr.open("ab"),
            env=env,
        )

    @property
    def log(self) -> str:
        return self.stderr.read_text(errors="replace")

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

    async def wait_for(self, predicate: Callable[[Samples], Any], timeout: float = 30.0) -> Samples:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None and self.process.returncode is None, self.log[-3000:]
            try:
                m = await self.metrics()
                if predicate(m):
                    return m
            except (aiohttp.ClientError, AssertionError, OSError):
                pass
            await asyncio.sleep(0.2)
        raise AssertionError(f"timed out; log:\n{self.log[-3000:]}")

    async def wait_log(self, text: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log:
                return
            assert self.process is not None and self.process.returncode is None, self.log[-3000:]
            await asyncio.sleep(0.1)
        raise AssertionError(f"{text!r} not logged; log:\n{self.log[-3000:]}")

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    async def stop(self, timeout: float = 20.0) -> int:
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.process.wait(), timeout)

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


def value(metrics: Samples, name: str, **labels: str) -> float | None:
    for (sample, sample_labels), v in metrics.items():
        if sample == name and all((k, val) in sample_labels for k, val in labels.items()):
            return v
    return None
