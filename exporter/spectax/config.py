"""The configuration file: YAML in, validated settings out, every problem reported at once.

Strict like blackbox_exporter: an unknown key is an error (a typo must not silently fall
back to a default). Errors carry their path (`endpoints[1].speculation.method: ...`) and
are collected, not raised one by one, so `spectax check-config` lists everything wrong.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import yaml
from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from spectax import logs, yamlfile
from spectax.billing.prices import PriceTable, PriceTableError
from spectax.billing.registry import BillingConfig, SourceSpec, resolve_billing
from spectax.credentials import (
    TargetAuth,
    TLSContexts,
    build_target_auth,
    register_secret,
    resolve,
)
from spectax.economics import (
    SPECULATIVE_METHODS,
    draft_cost_floor,
    draft_cost_ratio_for,
    step_overhead_floor,
)
from spectax.endpoint_config import EndpointConfig, PriceConfig
from spectax.source_config import PrometheusSource
from spectax.store.database import database_url
from spectax.tariffs import pricing_of
from spectax.units import Duration, InvalidFile, StrictModel, parse_duration

DEFAULT_LISTEN = "127.0.0.1:9837"
DEFAULT_STATE_DIRECTORY = "./spectax-state"


class ConfigError(InvalidFile):
    """An invalid configuration; `problems` lists each one with its path."""


class RetentionConfig(StrictModel):
    """How long each granularity of history is kept; null keeps it forever."""

    windows: Duration | None = 14 * 86400.0
    hourly: Duration | None = 400 * 86400.0
    daily: Duration | None = None


class LoadCurveConfig(StrictModel):
    """The load curve on /metrics (docs/economics.md, "The load curve and the K schedule"):
    the history of the last `lookback` (the hourly rollup's load bins, and the windows of the
    hours not rolled yet), binned again every `refresh_interval`. The bins are kept as long
    as the hourly rows (`retention.hourly`), so a lookback of a week or a month is read
    from them as a day is."""

    lookback: Duration = 86400.0
    # 5 minutes, a default window: a refresh more often finds no new window to bin.
    refresh_interval: Duration = 300.0


class Config(StrictModel):
    listen: str = DEFAULT_LISTEN
    scrape_interval: Duration = 15.0
    scrape_timeout: Duration = 10.0  # default: 10 s, or the interval when that is shorter
    window: Duration = 300.0
    max_body_bytes: int = Field(default=10 * 1024 * 1024, gt=0)
    state_directory: str = Field(
        default_factory=lambda: os.environ.get("STATE_DIRECTORY", DEFAULT_STATE_DIRECTORY)
    )
    storage_url: str | None = Field(default=None, repr=False)
    storage_url_file: str | None = None
    web_config_file: str | None = None
    price_table: str | None = None
    store_queue_max_rows: int = Field(default=10_000, ge=1)
    rollup_interval: Duration = 300.0
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    load_curve: LoadCurveConfig = Field(default_factory=LoadCurveConfig)
    endpoints: list[EndpointConfig] = Field(default_factory=list)
    billing: list[BillingConfig] = Field(default_factory=list)  # see spectax.billing
    sources: list[PrometheusSource] = Field(default_factory=list)  # fleet mode: spectax.sources
    _database_url: str | None = PrivateAttr(default=None)  # storage_url resolved (${ENV}, _file)

    @model_validator(mode="before")
    @classmethod
    def _timeout_within_interval(cls, data: Any) -> Any:
        """Like Prometheus: the default timeout is 10 s, but never longer than the interval."""
        if isinstance(data, dict) and "scrape_timeout" not in data and "scrape_interval" in data:
            try:
                interval = float(parse_duration(data["scrape_interval"]))
            except (TypeError, ValueError):
                return data  # the field's own validation reports it
            return {**data, "scrape_timeout": min(10.0, interval)}
        return data

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        _, colon, port = value.rpartition(":")
        if not colon or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                "must be HOST:PORT, for example 127.0.0.1:9837 (or :9837 for every interface)"
            )
        return value

    @property
    def listen_host(self) -> str:
        """The host to bind: "" (Prometheus' `:9837`, every interface) is asyncio's too."""
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def listen_port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    @property
    def database_url(self) -> str:
        if self._database_url:
            return self._database_url
        if self.storage_url:
            return self.storage_url
        return f"sqlite+aiosqlite:///{Path(self.state_directory) / 'spectax.sqlite'}"

    def endpoint(self, name: str) -> EndpointConfig:
        return next(e for e in self.endpoints if e.name == name)


@dataclass
class Settings:
    """A validated configuration with its prices resolved: what the daemon runs on. By
    endpoint name: the price (spectax.tariffs), what its scrapes send; the billing sources
    with their secrets resolved (price_table first)."""

    config: Config
    prices: PriceTable
    usd_per_hour: dict[str, Decimal]
    target_auth: dict[str, TargetAuth] = field(default_factory=dict)
    billing: list[SourceSpec] = field(default_factory=list)


def load_config(path: Path | str | None, listen: str | None = None) -> Settings:
    """Read, validate and resolve a configuration file (None: the defaults); `listen` wins."""
    source = str(path) if path is not None else "<defaults>"
    raw: Any = {}
    duplicates: list[str] = []
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(source, [f"cannot read: {exc.strerror}"]) from None
        try:
            raw, duplicates = yamlfile.load(text)
            raw = raw or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise ConfigError(source, [f"{where}not valid YAML: {problem}"]) from None
    raw = {**raw, "listen": listen} if listen and type(raw) is dict else raw
    if not duplicates:
        return validate(raw, source)
    try:  # the rest is checked too (as YAML reads it: the last of each key), in one report
        validate(raw, source)
    except ConfigError as exc:
        raise ConfigError(source, duplicates + exc.problems) from None
    raise ConfigError(source, duplicates)


def validate(raw: Any, source: str = "<config>") -> Settings:
    with logs.collected_secrets() as secrets:
        return _validate(raw, source, secrets)


def _validate(raw: Any, source: str, secrets: set[str]) -> Settings:
    """`validate`, `secrets` collecting those the file configures as they are resolved."""
    if not isinstance(raw, dict):
        raise ConfigError(source, ["the top level must be a mapping of settings"])
    problems: list[str] = []
    config, valid = _validate_fields(raw, problems)
    if config is None:
        raise ConfigError(source, problems)
    field_errors = len(problems)  # the cross-field problems follow
    # Every name as written, even of an endpoint with a bad field: a reference to it is good.
    names = [_name(e) for e in _list(raw.get("endpoints"))]  # by position in the file
    prices = PriceTable.load(None)
    if config.price_table:
        try:
            prices = PriceTable.load(Path(config.price_table))
        except PriceTableError as exc:
            problems.append(f"price_table: {exc}")

    for i, entry in enumerate(_list(raw.get("endpoints"))):
        name, control = names[i], entry.get("control") if isinstance(entry, dict) else None
        if name and names.index(name) != i:
            problems.append(f"endpoints[{i}].name: {name!r} is used by an earlier endpoint")
        if isinstance(control, str) and control == name:
            problems.append(f"endpoints[{i}].control: an endpoint cannot be its own control")
        elif isinstance(control, str) and control not in names:
            problems.append(f"endpoints[{i}].control: no endpoint named {control!r}")
    usd_per_hour: dict[str, Decimal] = {}
    for i, endpoint in zip(valid.endpoints, config.endpoints, strict=True):
        where = f"endpoints[{i}]"
        spec = endpoint.speculation
        if (
            spec is not None
            and spec.draft_cost_ratio is None
            and draft_cost_ratio_for(spec.method, spec.draft_params, spec.target_params) is None
        ):
            problems.append(
                f"{where}.speculation.draft_cost_ratio: required for method draft_model "
                "(or give draft_params and target_params)"
            )
        floor = step_overhead_floor(spec.method if spec else None)
        explicit = "step_overhead_ratio" in endpoint.model_fields_set
        if spec is not None and explicit and endpoint.step_overhead_ratio < floor:
            problems.append(
                f"{where}.step_overhead_ratio: {endpoint.step_overhead_ratio:g} is below "
                f"{floor:g}, the least a {spec.method} step can cost beyond a plain one "
                "(docs/economics.md, the floor under h)"
            )
        least_c = draft_cost_floor(spec.draft_params, spec.target_params) if spec else 0.0
        if (
            spec is not None
            and spec.draft_cost_ratio is not None
            and spec.draft_cost_ratio < least_c
        ):
            problems.append(
                f"{where}.speculation.draft_cost_ratio: {spec.draft_cost_ratio:g} is below "
                f"{least_c:.3g}, draft_params / target_params: each drafting pass reads the "
                "drafter's weights (docs/economics.md, the floor under h)"
            )
        pricing = pricing_of(endpoint, prices)
        if pricing.problem and "price_table" not in valid.dropped:
            problems.append(f"{where}.price: {pricing.problem}")
        elif pricing.usd_per_hour is not None:
            usd_per_hour[endpoint.name] = pricing.usd_per_hour
    target_auth = _target_auth(valid.endpoints, config.endpoints, problems)
    try:
        url = resolve(
            SecretStr(config.storage_url) if config.storage_url else None,
            config.storage_url_file,
            register=False,
        )
        password = _url_password(url)
        if password:  # as written in the URL and decoded, as a driver's message may say it
            register_secret(unquote(password), "its password")
            logs.register_secret(password)
        config._database_url = database_url(url) if url else None
    except ValueError as exc:  # a CredentialError, or a URL `run` would die on
        problems.append(f"storage_url{'_file' if config.storage_url_file else ''}: {exc}")
    billing, billing_problems = resolve_billing(config.billing, names, valid.billing)
    problems += billing_problems + _echoing_a_secret(config, valid, secrets)
    timing = {"scrape_interval", "scrape_timeout", "window"} & valid.dropped
    if not timing and config.scrape_timeout > config.scrape_interval:
        problems.append("scrape_timeout: must not be longer than scrape_interval")
    if not timing and config.window < 2 * config.scrape_interval:
        problems.append("window: must hold at least two scrape intervals")
    problems[field_errors:] = [
        p for p in problems[field_errors:] if not valid.follows_from_a_dropped_field(p)
    ]
    if problems:
        raise ConfigError(source, problems)
    return Settings(_shared_parts(config), prices, usd_per_hour, target_auth, billing)


def _echoing_a_secret(config: Config, valid: _Validated, secrets: set[str]) -> list[str]:
    """The names of the file that hold 8 characters in a row of one of its `secrets`: each
    becomes a label, a row or a line of the status page, where a fragment of a credential
    must never be shown (issue 30). The value is never said."""
    windows = logs.windows_of(secrets)
    named: list[tuple[str, str | None]] = []
    for i, e in zip(valid.endpoints, config.endpoints, strict=True):
        price = e.price or PriceConfig()
        for key, text in {
            "name": e.name,
            "gpu": e.gpu,
            "profile": e.profile,
            "control": e.control,
            "price.provider": price.provider,
            "price.product": price.product,
            "price.gpu": price.gpu,
        }.items():
            named.append((f"endpoints[{i}].{key}", text))
    for i, b in zip(valid.billing, config.billing, strict=True):
        named.append((f"billing[{i}].name", b.name))
    for i, s in zip(valid.sources, config.sources, strict=True):
        named.append((f"sources[{i}].name_prefix", s.name_prefix))
    return [
        f"{path}: holds 8 or more characters in a row of a configured secret; it "
        "would be shown in /metrics, the status page and the store: choose another"
        for path, value in named
        if value and logs.holds_secret(value, windows)
    ]


def _shared_parts(config: Config) -> Config:
    """`config` with endpoints that say the same price or speculation sharing one object of
    it, as the replicas of a fleet do (frozen models, equal by value): each object with its
    dict and field set is ~0.6 kB, ~2.6 MB at 2,000 endpoints."""
    shared: dict[object, Any] = {}

    def one(part: Any) -> Any:
        return shared.setdefault(part, part)

    endpoints = [
        endpoint.model_copy(
            update={
                field: one(part)
                for field in ("price", "speculation")
                if (part := getattr(endpoint, field)) is not None
            }
        )
        for endpoint in config.endpoints
    ]
    return config.model_copy(update={"endpoints": endpoints})


@dataclass(frozen=True)
class _Validated:
    """What validated: the file's index of each endpoint and source, the top-level keys
    dropped, and the paths of the fields dropped from an entry kept without them (for
    `endpoints[2].price`: `endpoints[2].price` and what depends on it)."""

    endpoints: list[int]
    billing: list[int]
    dropped: set[str]
    fields: tuple[str, ...] = ()
    sources: tuple[int, ...] = ()

    def follows_from_a_dropped_field(self, problem: str) -> bool:
        """Whether a cross-field problem is about a field dropped for its own error, so only
        a false problem (a `required` for a value that is there but invalid)."""
        return any(problem.startswith((f"{path}:", f"{path}.")) for path in self.fields)


# Values a required field takes while the entry's other fields are checked; never reported.
_PLACEHOLDERS: dict[str, dict[str, Any]] = {
    "endpoints": {"name": "invalid-entry", "url": "http://invalid.invalid"},
    "sources": {"url": "http://invalid.invalid", "endpoint_labels": ["invalid"]},
}
_DEPENDS = {"gpu": ("price",)}  # a dropped gpu: the price looked up for it is not checked
_LISTS = ("endpoints", "billing", "sources")


def _target_auth(
    indexes: Iterable[int], endpoints: Iterable[EndpointConfig], problems: list[str]
) -> dict[str, TargetAuth]:
    """Each endpoint's credentials and TLS context, by name; what is wrong with them into
    `problems`, under the endpoint's index in the file."""
    target_auth: dict[str, TargetAuth] = {}
    contexts: TLSContexts = {}  # endpoints with equal `tls` blocks share one context
    for i, endpoint in zip(indexes, endpoints, strict=True):
        auth, auth_problems = build_target_auth(
            endpoint.bearer_token,
            endpoint.bearer_token_file,
            endpoint.basic_auth,
            endpoint.tls,
            contexts,
        )
        problems += [f"endpoints[{i}].{key}: {message}" for key, message in auth_problems]
        target_auth[endpoint.name] = auth
    return target_auth


def _validate_fields(raw: dict[str, Any], problems: list[str]) -> tuple[Config | None, _Validated]:
    """The field errors, and a Config of what validated for the cross-field checks (issue 16).

    An entry of `endpoints`, `billing` or `sources` with a bad field is kept without that
    field (a required one takes a placeholder), so that its other checks (credentials,
    prices, a source's own check) still run: one error no longer hides another of the same
    entry (issue 30). A check a model makes only once its fields are valid may find more;
    an entry still failing then is left out."""
    lists: dict[str, list[Any]] = {key: _list(raw.get(key)) for key in _LISTS}
    where = {key: list(range(len(lists[key]))) for key in _LISTS}  # the file's index of each
    pruned, dropped, fields = dict(raw), set[str](), set[str]()
    for _ in range(3):
        try:
            config = Config.model_validate(pruned)
        except ValidationError as exc:
            errors = exc.errors()
        else:
            lists_of = where["endpoints"], where["billing"]
            return config, _Validated(*lists_of, dropped, tuple(fields), tuple(where["sources"]))
        bad: dict[tuple[str, int], set[str] | None] = {}  # by entry: bad fields, None: all
        for error in errors:
            loc = error["loc"]
            if loc and loc[0] in _LISTS and len(loc) > 1 and isinstance(loc[1], int):
                key, n = str(loc[0]), loc[1]
                field = _field_of(lists[key][n], loc)
                path = f"{key}[{where[key][n]}].{field}"
                said = _describe({**error, "loc": (key, where[key][n], *loc[2:])})
                if path not in fields and said not in problems:  # not a field dropped here
                    problems.append(said)
                if field is None or (
                    error["type"] == "missing" and field not in _PLACEHOLDERS.get(key, {})
                ):
                    bad[(key, n)] = None
                elif (names := bad.setdefault((key, n), set())) is not None:
                    names.add(field)
            elif loc:
                problems.append(_describe(error))
                dropped.add(str(loc[0]))
            else:
                problems.append(_describe(error))
        pruned = {key: value for key, value in pruned.items() if key not in dropped}
        for key in _LISTS:
            if key in pruned:
                lists[key], where[key] = _kept(key, lists[key], where[key], bad, fields)
                pruned[key] = lists[key]
    return None, _Validated([], [], dropped)


def _field_of(entry: Any, loc: tuple[Any, ...]) -> str | None:
    """The entry's own key an error is under (a billing entry's after its type tag)."""
    if not isinstance(entry, dict) or len(loc) < 3:
        return None
    if len(loc) >= 4 and loc[2] == entry.get("type") and loc[2] not in entry:
        return str(loc[3])
    return str(loc[2])


def _kept(
    key: str,
    entries: list[Any],
    where: list[int],
    bad: dict[tuple[str, int], set[str] | None],
    fields: set[str],
) -> tuple[list[Any], list[int]]:
    """The entries of list `key` without their bad fields (or left out), and their indices
    in the file; `fields` gets the paths of the fields dropped and of what depends on them."""
    kept: list[Any] = []
    indices: list[int] = []
    for n, entry in enumerate(entries):
        names = bad.get((key, n), set())
        if names is None:
            continue
        placeholder = _PLACEHOLDERS.get(key, {})
        kept.append(
            {k: v for k, v in entry.items() if k not in names}
            | {k: placeholder[k] for k in names if k in placeholder}
            if names
            else entry
        )
        indices.append(where[n])
        for name in names:
            fields.update(f"{key}[{where[n]}].{part}" for part in (name, *_DEPENDS.get(name, ())))
    return kept, indices


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _name(endpoint: Any) -> str:
    return str(endpoint.get("name") or "") if isinstance(endpoint, dict) else ""


def _url_password(url: str | None) -> str | None:
    if not url:
        return None
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def _describe(error: Any) -> str:
    path = ""
    for part in error["loc"]:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    message = error["msg"]
    if error["type"] == "extra_forbidden":
        message = "unknown key (check the spelling; see docs/configuration.md)"
    elif error["type"] == "literal_error":
        message = f"{message}, got {error.get('input')!r}"
    return f"{path or '<top>'}: {message}"


__all__ = [
    "SPECULATIVE_METHODS",
    "Config",
    "ConfigError",
    "EndpointConfig",
    "Settings",
    "load_config",
    "validate",
]
