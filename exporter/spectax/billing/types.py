"""What every billing source shares: the normalised line, the mapping to endpoints, the errors.

A source reads its provider's own protocol and hands back a `Fetched`: the
`BillingLine`s it found, each already mapped to a configured endpoint (or to
none), and the `Period`s it covered. A period is a span the provider answered
for completely, whether or not it billed anything in it, and whether that
answer is final. Absent lines in a covered period mean "nothing was billed",
which is how a serverless endpoint's idle hour looks on every provider.

Money is `Decimal`, time is timezone-aware UTC, and a line's key is
(source, resource, start, end): a revised line replaces its earlier value.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar

from pydantic import Field, field_validator, model_validator

from spectax.credentials import CredentialError, resolve
from spectax.units import NAME, Duration, StrictModel, parse_time


class BillingError(Exception):
    """A failed read of a billing source. The message never holds a credential.

    `retryable`: worth another attempt (throttling, 5xx, timeouts, truncated answers);
    `retry_after`: the seconds the provider asked us to wait, when it said so.
    """

    def __init__(self, message: str, retryable: bool = False, retry_after: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class BillingLine:
    """One amount a provider billed (or, for `price_table`, that spectax estimates).

    `tags` are the provider's tags or labels on the line, kept for mapping and for
    `spectax billing fetch`; they are not stored.
    """

    source: str
    resource: str
    endpoint: str | None
    start: datetime
    end: datetime
    amount: Decimal
    currency: str
    final: bool
    fetched_at: datetime
    tags: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def key(self) -> tuple[str, str, datetime, datetime]:
        return (self.source, self.resource, self.start, self.end)


@dataclass(frozen=True, slots=True)
class Period:
    """A span the source answered for completely; `final` once the provider says it is."""

    start: datetime
    end: datetime
    final: bool


@dataclass(frozen=True, slots=True)
class Fetched:
    lines: list[BillingLine]
    periods: list[Period]


class MapRule(StrictModel):
    """Lines of `resource`, or carrying every tag in `tags`, belong to `endpoint`."""

    endpoint: str
    resource: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _something_to_match(self) -> MapRule:
        if self.resource is None and not self.tags:
            raise ValueError("give resource, tags, or both")
        return self

    def matches(self, resource: str, tags: Mapping[str, str]) -> bool:
        if self.resource is not None and self.resource != resource:
            return False
        return all(tags.get(key) == value for key, value in self.tags.items())


class SourceConfig(StrictModel):
    """Settings every source has. Each source module subclasses it with its own keys.

    `interval`: how often the source is read; `lookback`: how far back each read goes
    (providers revise recent periods, so each read covers them again); `timeout`: the
    whole read, retries included; `map`: which lines belong to which endpoint.
    """

    type: str
    name: str | None = None
    interval: Duration = 900.0
    lookback: Duration = 86400.0
    timeout: Duration = 120.0
    map: list[MapRule] = Field(default_factory=list)

    # What the registry needs of a source type, declared on its model so that adding a
    # source is its module plus one registry line: a floor on `interval` and why (API cost),
    # the keys that hold secrets (each with its `*_file`), and `checks` and `build` below.
    min_interval: ClassVar[float] = 1.0
    min_interval_reason: ClassVar[str] = ""
    secret_fields: ClassVar[tuple[str, ...]] = ()
    # True for `price_table` alone: spectax's own estimate, read from no provider.
    estimate: ClassVar[bool] = False

    @field_validator("name")
    @classmethod
    def _label_safe(cls, value: str | None) -> str | None:
        if value is not None and not NAME.match(value):
            raise ValueError("must be 1-63 letters, digits, '_', '.' or '-', starting alphanumeric")
        return value

    @property
    def source_name(self) -> str:
        return self.name or self.type

    def resolve_secrets(self) -> tuple[dict[str, str | None], list[str]]:
        """Each of `secret_fields` from its inline value, `${ENV}` or `*_file`, and the
        problems found, each with its key. Nested ones (`basic_auth.password`) are left to
        `credentials.build_target_auth`."""
        resolved: dict[str, str | None] = {}
        problems: list[str] = []
        for name in self.secret_fields:
            if "." in name:
                continue
            inline, file = getattr(self, name), getattr(self, f"{name}_file")
            try:
                resolved[name] = resolve(inline, file)
            except CredentialError as exc:
                problems.append(f"{name}{'_file' if file else ''}: {exc}")
        return resolved, problems

    def checks(self, secrets: Mapping[str, str | None]) -> list[str]:
        """Problems its model cannot see (a required secret, a missing file, an extra to
        install), each as `key: message`; `secrets` are the resolved `secret_fields`."""
        return []

    def build(self, secrets: Mapping[str, str | None]) -> Source:
        """The source these settings describe; it opens its connections on its first read."""
        raise BillingError(f"{self.type} is read from no provider")


class Mapper:
    """First matching rule wins; a line no rule matches belongs to no endpoint."""

    def __init__(self, rules: Iterable[MapRule]):
        self.rules = list(rules)

    def endpoint_for(self, resource: str, tags: Mapping[str, str]) -> str | None:
        for rule in self.rules:
            if rule.matches(resource, tags):
                return rule.endpoint
        return None

    @property
    def endpoints(self) -> list[str]:
        """The endpoints this source bills, in rule order, each once."""
        return list(dict.fromkeys(rule.endpoint for rule in self.rules))

    def tag_values(self, key: str) -> list[str]:
        """Values the rules ask of tag `key` (what to filter a provider's query by)."""
        return list(dict.fromkeys(r.tags[key] for r in self.rules if key in r.tags))


class Source(ABC):
    """A billing source: `fetch(since, until)` reads the provider and normalises."""

    def __init__(self, config: SourceConfig):
        self.config = config
        self.name = config.source_name
        self.mapper = Mapper(config.map)

    @abstractmethod
    async def fetch(self, since: datetime, until: datetime) -> Fetched:
        """Lines and covered periods for [since, until), or raise BillingError."""

    async def close(self) -> None:  # noqa: B027 (most sources hold nothing)
        """Release what the source holds (HTTP sessions, clients)."""

    def line(
        self,
        resource: str,
        start: datetime,
        end: datetime,
        amount: Decimal,
        currency: str,
        final: bool,
        fetched_at: datetime,
        tags: Mapping[str, str] | None = None,
    ) -> BillingLine:
        tags = dict(tags or {})
        return BillingLine(
            source=self.name,
            resource=resource,
            endpoint=self.mapper.endpoint_for(resource, tags),
            start=start,
            end=end,
            amount=amount,
            currency=currency.upper() if currency else "USD",
            final=final,
            fetched_at=fetched_at,
            tags=tags,
        )


# ---------------------------------------------------------------- helpers


def provider_time(text: str) -> datetime:
    """A provider's date or date-time (see `units.parse_time`), or a BillingError naming it."""
    try:
        return parse_time(text)
    except ValueError:
        raise BillingError(f"not a date or time: {text[:40]!r}") from None


def decimal(value: Any, what: str) -> Decimal:
    """A provider's number as an exact Decimal (floats go through their repr, not binary)."""
    if isinstance(value, bool) or value is None:
        raise BillingError(f"{what}: expected a number, got {value!r}"[:200])
    try:
        result = Decimal(repr(value)) if isinstance(value, float) else Decimal(str(value).strip())
    except InvalidOperation:
        raise BillingError(f"{what}: not a number: {str(value)[:40]!r}") from None
    if not result.is_finite():
        raise BillingError(f"{what}: not a finite number")
    return result
