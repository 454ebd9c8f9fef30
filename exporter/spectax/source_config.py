"""The `sources:` block of the configuration: where a fleet's counters already are.

Its own room below spectax.config (one field there), beside spectax.endpoint_config whose
settings every discovered endpoint gets: the configuration and the fleet's readers
(spectax.sources) both import it, and it imports neither. Validated strictly like the
rest; the credentials go through the same machinery as a target's (spectax.credentials),
so a token is read from `${ENV}` or a file and is blanked in every log line.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from spectax import logs
from spectax.credentials import BasicAuthConfig, TargetAuth, TLSClientConfig, build_target_auth
from spectax.endpoint_config import EndpointConfig
from spectax.units import NAME, Duration, StrictModel

_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


#: Headers whose values are credentials (an API gateway's key or token), blanked like any
#: configured secret. Others (`X-Scope-OrgID: production-1`, Mimir's tenant) are names an
#: operator must see in a message: blanking any 8 of their characters would hide ordinary
#: words ("producti") everywhere and refuse endpoint and model names that hold them.
_CREDENTIAL_HEADER = re.compile(r"auth|token|key|secret|cookie|passw|session", re.IGNORECASE)


class PrometheusSource(StrictModel):
    """A Prometheus HTTP API (Prometheus, Thanos Query, Mimir) holding the engines' series.

    `endpoint_labels` says which labels make one endpoint: every series with the same
    values of them is summed into it, as the engine sums its data-parallel ranks.
    `endpoint` holds the endpoint settings (gpu, price, speculation, ...) every
    discovered endpoint gets.
    """

    type: Literal["prometheus"] = "prometheus"
    url: str  # with any path prefix: https://mimir.example/prometheus
    selector: str = ""  # PromQL label matchers, e.g. namespace="prod",job="vllm"
    endpoint_labels: list[str] = Field(min_length=1)
    name_prefix: str = ""
    headers: dict[str, str] = Field(default_factory=dict, repr=False)  # X-Scope-OrgID
    bearer_token: SecretStr | None = None
    bearer_token_file: str | None = None
    basic_auth: BasicAuthConfig | None = None
    tls: TLSClientConfig | None = None
    # How long after a window's end it is read: Prometheus must have scraped (and a
    # remote-write pipeline delivered) the samples up to the boundary.
    delay: Duration = 30.0
    # How far before a window's start a series' sample must lie for Prometheus to sum the
    # series; one without is read raw and counts from its sample before the gap, up to
    # promql.horizon back (the windows do not depend on it: only what is read raw does).
    lookback: Duration = 300.0
    timeout: Duration = 30.0
    endpoint: dict[str, Any] = Field(default_factory=dict)
    _auth: TargetAuth = PrivateAttr(default_factory=TargetAuth)
    _endpoint: EndpointConfig | None = PrivateAttr(default=None)  # what every endpoint gets

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("endpoint_labels")
    @classmethod
    def _labels(cls, value: list[str]) -> list[str]:
        for label in value:
            if not _LABEL.match(label):
                raise ValueError(f"{label!r} is not a Prometheus label name")
        return value

    @field_validator("selector")
    @classmethod
    def _matchers(cls, value: str) -> str:
        if any(c in value for c in "{}[]"):
            raise ValueError('give the label matchers only, without braces: job="vllm"')
        return value.strip().strip(",")

    @model_validator(mode="after")
    def _resolve(self) -> PrometheusSource:
        """The credentials read (a bad one is a problem of the file, not of the run), the
        endpoint settings checked once as every discovered endpoint will get them."""
        auth, problems = build_target_auth(
            self.bearer_token, self.bearer_token_file, self.basic_auth, self.tls
        )
        if {"name", "url"} & self.endpoint.keys():
            problems.append(("endpoint", "name and url come from the source, not from here"))
        if problems:
            raise ValueError("; ".join(f"{key}: {message}" for key, message in problems))
        for header, value in self.headers.items():
            if _CREDENTIAL_HEADER.search(header):  # a gateway's token, never a tenant's name
                logs.register_secret(value)
        self._auth = TargetAuth({**self.headers, **auth.headers}, auth.ssl)
        try:
            self._endpoint = EndpointConfig(name="endpoint", url=self.url, **self.endpoint)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ValueError(f"endpoint.{where}: {first['msg']}") from None
        return self

    @property
    def auth(self) -> TargetAuth:
        """The headers every query sends (auth and `headers`) and the TLS context."""
        return self._auth

    def endpoint_config(self, name: str) -> EndpointConfig:
        """The configuration of one discovered endpoint: the `endpoint:` block validated once,
        under the endpoint's name (a name made by `endpoint_name`, label-safe), its price
        and speculation objects shared by every endpoint of the source (at 20,000
        endpoints, ~1.3 kB each)."""
        if self._endpoint is None or not NAME.match(name):
            return EndpointConfig(name=name, url=self.url, **self.endpoint)  # says what is wrong
        return self._endpoint.model_copy(update={"name": name})
