"""Credentials toward scrape targets (bearer token, basic auth, TLS), from files or env.

A secret is written in the configuration in one of three ways:

- inline: `bearer_token: abc` (discouraged: the file is then a secret too);
- from the environment: `bearer_token: ${VLLM_TOKEN}` (the whole value, nothing around it);
- from a file: `bearer_token_file: ${CREDENTIALS_DIRECTORY}/spectax_vllm-token`, where
  `${NAME}` in a path is replaced from the environment (systemd's `LoadCredential=` puts
  the files in `$CREDENTIALS_DIRECTORY`). The file's content is stripped of surrounding
  whitespace, like Prometheus does.

Files are read when the configuration is loaded, so `spectax check-config` finds a missing
one and a reload (SIGHUP) picks up a rotated one. Every resolved value is registered with
`spectax.logs`, whose filter blanks it (and any 8 characters of it in a row) out of any log
line as a last line of defence; the messages spectax writes itself never include one in
the first place. A secret shorter than 8 characters is a configuration error.
"""

from __future__ import annotations

import base64
import os
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import SecretStr

from spectax import logs
from spectax.units import StrictModel

_ENV_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_PATH_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
MAX_SECRET_FILE_BYTES = 64 * 1024


class CredentialError(ValueError):
    """A secret that cannot be resolved. The message names the source, never the value."""


class BasicAuthConfig(StrictModel):
    username: str
    password: SecretStr | None = None
    password_file: str | None = None


class TLSClientConfig(StrictModel):
    """How spectax checks a target's certificate (and which one it shows, for mTLS)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    insecure_skip_verify: bool = False


@dataclass(frozen=True)
class TargetAuth:
    """What a scrape of one endpoint sends: headers (Authorization) and the TLS context."""

    headers: dict[str, str] = field(default_factory=dict, repr=False)
    ssl: ssl.SSLContext | None = field(default=None, repr=False)


def expand_path(path: str) -> str:
    """`${NAME}` in a path replaced from the environment; an unset variable is an error."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise CredentialError(f"environment variable {name} is not set")
        return os.environ[name]

    return _PATH_VAR.sub(value, path)


def read_secret_file(path: str) -> str:
    """The stripped content of a secret file. Errors name the path, not the content."""
    expanded = expand_path(path)
    try:
        with Path(expanded).open("rb") as f:
            data = f.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as exc:
        raise CredentialError(f"cannot read {expanded}: {exc.strerror}") from None
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise CredentialError(f"{expanded} is larger than {MAX_SECRET_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise CredentialError(f"{expanded} is not UTF-8 text") from None
    if not text:
        raise CredentialError(f"{expanded} is empty")
    return text


def resolve(inline: SecretStr | None, file: str | None, *, register: bool = True) -> str | None:
    """The secret given inline (or as `${ENV}`) or in a file; None when neither is given.
    `register=False` for a value that is not itself the secret (a storage URL: its host and
    database name would blank ordinary text; its password is registered on its own)."""
    if inline is not None and file is not None:
        raise CredentialError("give the value or the _file, not both")
    if file is not None:
        value = read_secret_file(file)
    elif inline is not None:
        value = inline.get_secret_value()
        match = _ENV_REF.match(value)
        if match:
            name = match.group(1)
            if not os.environ.get(name):
                raise CredentialError(f"environment variable {name} is not set or empty")
            value = os.environ[name]
    else:
        return None
    return register_secret(value) if register else value


def register_secret(value: str, what: str = "the secret") -> str:
    """`value`, registered to be blanked; a CredentialError (naming no value) when it is
    too short to tell its fragments from ordinary text (logs.MIN_SECRET_LENGTH)."""
    if len(value) < logs.MIN_SECRET_LENGTH:
        raise CredentialError(
            f"{what} is shorter than {logs.MIN_SECRET_LENGTH} characters: spectax cannot "
            "keep so short "
            "a secret out of its output (it would blank ordinary words); use a longer one"
        )
    logs.register_secret(value)
    return value


# TLS settings -> the client context made of them, or the problem: one per configuration load.
TLSContexts = dict[TLSClientConfig, tuple[ssl.SSLContext | None, tuple[str, str] | None]]


def build_target_auth(
    bearer_token: SecretStr | None,
    bearer_token_file: str | None,
    basic_auth: BasicAuthConfig | None,
    tls: TLSClientConfig | None,
    contexts: TLSContexts | None = None,
) -> tuple[TargetAuth, list[tuple[str, str]]]:
    """The auth of one endpoint, and its problems as (key, message) pairs. Endpoints given
    the same `contexts` share one TLS context per equal `tls` block: a context with the
    system's CAs is ~0.8 MiB, 1.6 GB for 2,000 endpoints that each made their own."""
    problems: list[tuple[str, str]] = []
    headers: dict[str, str] = {}
    if (bearer_token is not None or bearer_token_file is not None) and basic_auth is not None:
        problems.append(("basic_auth", "give bearer_token(_file) or basic_auth, not both"))
    try:
        token = resolve(bearer_token, bearer_token_file)
    except CredentialError as exc:
        problems.append(("bearer_token_file" if bearer_token_file else "bearer_token", str(exc)))
        token = None
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if basic_auth is not None:
        try:
            password = resolve(basic_auth.password, basic_auth.password_file) or ""
            if ":" in basic_auth.username:
                raise ValueError("a ':' in the user name")
            header = basic_auth_header(basic_auth.username, password)
            logs.register_secret(header.removeprefix("Basic "))
            headers["Authorization"] = header
        except CredentialError as exc:
            problems.append(("basic_auth.password", str(exc)))
        except ValueError:
            problems.append(("basic_auth.username", "must not contain ':'"))
    context: ssl.SSLContext | None = None
    if tls is not None:
        made = contexts.get(tls) if contexts is not None else None
        if made is None:
            made = _client_context(tls)
            if contexts is not None:
                contexts[tls] = made
        context, problem = made
        if problem:
            problems.append(problem)
    return TargetAuth(headers, context), problems


def basic_auth_header(username: str, password: str) -> str:
    """The `Authorization` value for HTTP basic auth (RFC 7617, UTF-8)."""
    token = base64.b64encode(f"{username}:{password}".encode()).decode("ascii")
    return f"Basic {token}"


def _client_context(tls: TLSClientConfig) -> tuple[ssl.SSLContext | None, tuple[str, str] | None]:
    if (tls.cert_file is None) != (tls.key_file is None):
        return None, ("tls", "cert_file and key_file go together")
    key = "tls.ca_file"
    try:
        cafile = expand_path(tls.ca_file) if tls.ca_file else None
        context = ssl.create_default_context(cafile=cafile)
        if tls.insecure_skip_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if tls.cert_file and tls.key_file:
            key = "tls.cert_file"
            context.load_cert_chain(expand_path(tls.cert_file), expand_path(tls.key_file))
    except CredentialError as exc:
        return None, (key, str(exc))
    except (ssl.SSLError, OSError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return None, (key, f"cannot load: {reason}")
    return context, None
