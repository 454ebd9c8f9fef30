"""Helpers for the operations tests: test certificates, scrape targets, and a vLLM whose
counter grows at every scrape."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from e2e import free_port
from recorded_pages import page

PAGES = ("spec_ngram_0_before_traffic.txt", "spec_ngram_2_mid.txt", "spec_ngram_3_after.txt")


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


# ------------------------------------------------------------------ a counting vLLM

COUNTER = 'vllm:generation_tokens_total{engine="0",model_name="tiny-llama"} 0.0'
TOKENS_PER_SCRAPE = 137


class CountingVllm:
    """A vLLM whose output-token counter grows by TOKENS_PER_SCRAPE at each scrape while
    `growing`; `restart()` is a new process (new start time, counters from zero). `seen`
    is what its pages showed, per process: what spectax must store, to the token."""

    def __init__(self) -> None:
        self.pages = [page("spec_ngram_0_before_traffic.txt")]
        self.tokens = 0
        self.growing = False
        self.seen = [0]

    def restart(self) -> None:
        self.pages.append(page("spec_ngram_restart_0_before_traffic.txt"))
        self.tokens = 0
        self.seen.append(0)

    def next_page(self) -> str:
        if self.growing:
            self.tokens += TOKENS_PER_SCRAPE
        self.seen[-1] = self.tokens
        return self.pages[-1].replace(COUNTER, COUNTER.replace(" 0.0", f" {self.tokens}.0"))

    async def serve(self, _request: web.Request) -> web.Response:
        return web.Response(text=self.next_page())
