"""`--web.config.file`: TLS and basic auth for spectax's own HTTP server.

The file has the format of the Prometheus exporter-toolkit's `web-config.yml`, so the
files operators already have for node_exporter or blackbox_exporter work here:

```yaml
tls_server_config:
  cert_file: /etc/spectax/tls/server.crt
  key_file: /etc/spectax/tls/server.key
  min_version: TLS12                      # TLS10 | TLS11 | TLS12 (default) | TLS13
  max_version: TLS13
  client_auth_type: RequireAndVerifyClientCert   # mutual TLS
  client_ca_file: /etc/spectax/tls/clients-ca.crt
  client_allowed_sans: [prometheus.example.internal]
  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]   # TLS 1.2 and older only
  curve_preferences: [X25519]             # spectax honours one curve
  prefer_server_cipher_suites: true
http_server_config:
  headers: {Strict-Transport-Security: max-age=31536000}
basic_auth_users:                         # user: bcrypt hash (htpasswd -nBC 10 "" | tr -d ':')
  prometheus: $2y$10$...
```

Strict like the toolkit: an unknown key, a certificate without its key or a client CA
without a client auth type is an error. Differences, because Python's TLS is OpenSSL's:
`client_auth_type` `RequestClientCert` and `RequireAnyClientCert` (client certificates
accepted unverified) are refused; `curve_preferences` takes one curve; `http2` is
accepted and ignored (spectax speaks HTTP/1.1); a client certificate outside
`client_allowed_sans` gets 403 after the handshake rather than a handshake failure.

The file is read here; `spectax.web.WebGuard` applies it to every request (basic auth
with bcrypt, the client SANs, the headers) and takes a reloaded one.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, SecretStr, ValidationError

from spectax import yamlfile
from spectax.credentials import CredentialError, expand_path
from spectax.units import InvalidFile, StrictModel

TLSVersion = Literal["TLS10", "TLS11", "TLS12", "TLS13"]
ClientAuthType = Literal[
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "RequireClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
]
_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# Go's names (crypto/tls) -> OpenSSL's. TLS 1.3 suites are not configurable, in Go either.
_CIPHERS = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}
_TLS13_SUITES = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
_CURVES = {
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519": "X25519",
}
# The headers the toolkit lets http_server_config set.
_HEADERS = {
    "strict-transport-security",
    "x-frame-options",
    "x-content-type-options",
    "x-xss-protection",
    "content-security-policy",
}
_BCRYPT = re.compile(r"^\$2[aby]?\$\d\d\$[./A-Za-z0-9]{53}$")


class WebConfigError(InvalidFile):
    """An invalid web config file; `problems` lists each one with its path."""


class TLSServerConfig(StrictModel):
    cert_file: str | None = None
    key_file: str | None = None
    cert: str | None = None
    key: SecretStr | None = None
    client_auth_type: ClientAuthType | None = None
    client_ca_file: str | None = None
    client_allowed_sans: list[str] | None = None
    min_version: TLSVersion = "TLS12"
    max_version: TLSVersion | None = None
    cipher_suites: list[str] | None = None
    prefer_server_cipher_suites: bool | None = None
    curve_preferences: list[str] | None = None


class HTTPServerConfig(StrictModel):
    http2: bool = True
    headers: dict[str, str] = Field(default_factory=dict)


class _WebConfigFile(StrictModel):
    tls_server_config: TLSServerConfig | None = None
    http_server_config: HTTPServerConfig | None = None
    basic_auth_users: dict[str, SecretStr] | None = None


@dataclass(frozen=True)
class WebConfig:
    """A validated web config: the server TLS context (or None), users, headers."""

    ssl: ssl.SSLContext | None = field(default=None, repr=False)
    users: dict[str, bytes] = field(default_factory=dict, repr=False)
    headers: dict[str, str] = field(default_factory=dict)
    allowed_sans: frozenset[str] | None = None


def load_web_config(path: Path | str | None) -> WebConfig:
    """Read and validate a web config file; None gives plain HTTP without auth."""
    if path is None:
        return WebConfig()
    source = str(path)
    try:
        raw, duplicates = yamlfile.load(Path(path).read_text(encoding="utf-8"))
        raw = raw or {}
    except OSError as exc:
        raise WebConfigError(source, [f"cannot read: {exc.strerror}"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise WebConfigError(source, [f"{where}not valid YAML"]) from None
    if not isinstance(raw, dict):
        raise WebConfigError(source, ["the top level must be a mapping"])
    problems: list[str] = list(duplicates)
    try:
        parsed = _WebConfigFile.model_validate(raw)
    except ValidationError as exc:
        # The other top-level sections are still checked, so that one run lists every
        # problem: a bad key used to hide a bad hash until it was fixed (issue 17).
        problems += [_describe(e) for e in exc.errors()]
        bad = {e["loc"][0] for e in exc.errors() if e["loc"]}
        try:
            parsed = _WebConfigFile.model_validate({k: v for k, v in raw.items() if k not in bad})
        except ValidationError:
            raise WebConfigError(source, problems) from None
    users: dict[str, bytes] = {}
    for user, hashed in (parsed.basic_auth_users or {}).items():
        value = hashed.get_secret_value()
        if not _BCRYPT.match(value):
            problems.append(f"basic_auth_users.{user}: not a bcrypt hash ($2a$, $2b$ or $2y$)")
        users[user] = value.encode("ascii", "replace")
    headers: dict[str, str] = {}
    http = parsed.http_server_config
    for name, value in (http.headers if http else {}).items():
        if name.lower() not in _HEADERS:
            problems.append(f"http_server_config.headers.{name}: a header spectax may not set")
        headers[name] = value
    context: ssl.SSLContext | None = None
    allowed: frozenset[str] | None = None
    tls = parsed.tls_server_config
    if tls is not None and not _tls_empty(tls):
        context = _server_context(tls, problems)
        if tls.client_allowed_sans:
            if tls.client_auth_type != "RequireAndVerifyClientCert":
                problems.append(
                    "tls_server_config.client_allowed_sans: needs client_auth_type "
                    "RequireAndVerifyClientCert"
                )
            allowed = frozenset(tls.client_allowed_sans)
    if problems:
        raise WebConfigError(source, problems)
    return WebConfig(context, users, headers, allowed)


def _tls_empty(tls: TLSServerConfig) -> bool:
    return not (tls.cert_file or tls.key_file or tls.cert or tls.key or tls.client_ca_file) and (
        tls.client_auth_type in (None, "NoClientCert")
    )


def _server_context(tls: TLSServerConfig, problems: list[str]) -> ssl.SSLContext | None:
    where = "tls_server_config"
    start = len(problems)
    if tls.cert_file and tls.cert:
        problems.append(f"{where}: give cert_file or cert, not both")
    if tls.key_file and tls.key:
        problems.append(f"{where}: give key_file or key, not both")
    if not (tls.cert_file or tls.cert):
        problems.append(f"{where}.cert_file: missing")
    if not (tls.key_file or tls.key):
        problems.append(f"{where}.key_file: missing")
    auth = tls.client_auth_type or "NoClientCert"
    if auth in ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert"):
        problems.append(
            f"{where}.client_auth_type: {auth} (unverified client certificates) is not "
            "supported by spectax; use VerifyClientCertIfGiven or RequireAndVerifyClientCert"
        )
    if tls.client_ca_file and auth == "NoClientCert":
        problems.append(f"{where}.client_ca_file: given without a client_auth_type")
    if auth in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert") and not tls.client_ca_file:
        problems.append(f"{where}.client_ca_file: {auth} needs the CA of the client certificates")
    ciphers = []
    for suite in tls.cipher_suites or []:
        if suite in _CIPHERS:
            ciphers.append(_CIPHERS[suite])
        elif suite not in _TLS13_SUITES:
            problems.append(f"{where}.cipher_suites: unknown suite {suite!r}")
    curves = tls.curve_preferences or []
    if len(curves) > 1:
        problems.append(f"{where}.curve_preferences: spectax honours one curve, got {len(curves)}")
    if curves and curves[0] not in _CURVES:
        problems.append(f"{where}.curve_preferences: unknown curve {curves[0]!r}")
    if len(problems) > start:
        return None

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _VERSIONS[tls.min_version]
    if tls.max_version:
        context.maximum_version = _VERSIONS[tls.max_version]
    if ciphers:
        context.set_ciphers(":".join(ciphers))
    if tls.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    if curves:
        context.set_ecdh_curve(_CURVES[curves[0]])
    try:
        _load_chain(context, tls)
    except EncryptedKeyError:
        problems.append(
            f"{where}.{'key_file' if tls.key_file else 'key'}: the key is encrypted (it has a "
            "pass phrase); spectax reads unencrypted keys only: decrypt it with `openssl pkey "
            "-in KEY -out PLAIN` and give the result, readable by spectax alone"
        )
        return None
    except CredentialError as exc:
        problems.append(f"{where}: {exc}")
        return None
    except (ssl.SSLError, OSError) as exc:
        problems.append(f"{where}: cannot load the certificate and key: {_ssl_reason(exc)}")
        return None
    if tls.client_ca_file:
        try:
            context.load_verify_locations(cafile=expand_path(tls.client_ca_file))
        except (CredentialError, ssl.SSLError, OSError) as exc:
            problems.append(f"{where}.client_ca_file: cannot load: {_ssl_reason(exc)}")
            return None
        context.verify_mode = (
            ssl.CERT_REQUIRED if auth == "RequireAndVerifyClientCert" else ssl.CERT_OPTIONAL
        )
    return context


class EncryptedKeyError(Exception):
    """The key asks for a pass phrase."""


def _no_pass_phrase() -> str:
    """Without a callback, OpenSSL asks `Enter PEM pass phrase:` on the terminal and blocks
    start-up (or a reload) until someone types; spectax refuses the key instead."""
    raise EncryptedKeyError


def _load_chain(context: ssl.SSLContext, tls: TLSServerConfig) -> None:
    if tls.cert_file and tls.key_file:
        context.load_cert_chain(
            expand_path(tls.cert_file), expand_path(tls.key_file), password=_no_pass_phrase
        )
        return
    # Inline PEM: OpenSSL loads from files only, so through a private temporary file.
    import os
    import tempfile

    cert = tls.cert or Path(expand_path(tls.cert_file or "")).read_text()
    key = (
        tls.key.get_secret_value() if tls.key else Path(expand_path(tls.key_file or "")).read_text()
    )
    fd, name = tempfile.mkstemp(prefix="spectax-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(cert + "\n" + key + "\n")
        context.load_cert_chain(name, password=_no_pass_phrase)
    finally:
        os.unlink(name)


def _ssl_reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError) and exc.strerror:
        return exc.strerror
    return str(exc)


def _describe(error: Any) -> str:
    path = ".".join(str(p) for p in error["loc"]) or "<top>"
    if error["type"] == "extra_forbidden":
        return f"{path}: unknown key"
    return f"{path}: {error['msg']}"
