"""The billing-source registry: a config `type:` to its settings model and its source class.

Adding a source is one module plus one line in `SOURCES` (and `BillingConfig`).
`resolve_billing` checks the `billing:` section beyond what its models can
(names, interval floors, the endpoints it maps to, secrets from the
environment or files) and reports every problem with its path, like the rest
of the configuration. `price_table`, the estimate, is always on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from spectax.billing.prices import (
    EstimateReader,
    PriceTableSource,
    PriceTableSourceConfig,
)
from spectax.billing.sources.aws_cost_explorer import AwsCostExplorerConfig, AwsCostExplorerSource
from spectax.billing.sources.focus import FocusConfig, FocusSource
from spectax.billing.sources.opencost import OpenCostConfig, OpenCostSource
from spectax.billing.sources.runpod import RunpodConfig, RunpodSource
from spectax.billing.types import BillingError, Source, SourceConfig
from spectax.credentials import CredentialError, build_target_auth, resolve

SOURCES: dict[str, tuple[type[SourceConfig], type[Source]]] = {
    "price_table": (PriceTableSourceConfig, PriceTableSource),
    "aws_cost_explorer": (AwsCostExplorerConfig, AwsCostExplorerSource),
    "runpod": (RunpodConfig, RunpodSource),
    "opencost": (OpenCostConfig, OpenCostSource),
    "focus": (FocusConfig, FocusSource),
}

BillingConfig = Annotated[
    PriceTableSourceConfig | AwsCostExplorerConfig | RunpodConfig | OpenCostConfig | FocusConfig,
    Field(discriminator="type"),
]


@dataclass(frozen=True)
class SourceSpec:
    """A validated source: its settings and its resolved secrets (never shown)."""

    config: SourceConfig
    secrets: dict[str, str | None] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.config.source_name

    @property
    def kind(self) -> str:
        return self.config.type

    def build(self, estimate: EstimateReader | None = None) -> Source:
        """The source object (it opens its connections lazily, on its first read)."""
        cfg = self.config
        if isinstance(cfg, PriceTableSourceConfig):
            return PriceTableSource(cfg, estimate)
        if isinstance(cfg, AwsCostExplorerConfig):
            return AwsCostExplorerSource(cfg, dict(self.secrets))
        if isinstance(cfg, RunpodConfig):
            return RunpodSource(cfg, self.secrets.get("api_key"))
        if isinstance(cfg, OpenCostConfig):
            auth, problems = build_target_auth(
                cfg.bearer_token, cfg.bearer_token_file, cfg.basic_auth, cfg.tls
            )
            if problems:
                raise BillingError("; ".join(f"{key}: {message}" for key, message in problems))
            return OpenCostSource(cfg, auth.headers, auth.ssl)
        if isinstance(cfg, FocusConfig):
            return FocusSource(cfg)
        raise BillingError(f"unknown billing source type {cfg.type!r}")


def default_specs() -> list[SourceSpec]:
    return [SourceSpec(PriceTableSourceConfig(type="price_table"))]


def resolve_billing(
    configs: Sequence[SourceConfig], endpoints: Sequence[str]
) -> tuple[list[SourceSpec], list[str]]:
    """The sources to run (price_table first, always) and the problems found."""
    problems: list[str] = []
    specs: list[SourceSpec] = []
    if not any(c.type == "price_table" for c in configs):
        specs.extend(default_specs())
    names = [c.source_name for c in configs]
    billed_by: dict[str, str] = {}
    for i, cfg in enumerate(configs):
        where = f"billing[{i}]"
        if names.count(cfg.source_name) > 1 and names.index(cfg.source_name) != i:
            problems.append(f"{where}.name: {cfg.source_name!r} is used by an earlier source")
        floor = type(cfg).min_interval
        if cfg.interval < floor:
            why = " (each GetCostAndUsage request costs USD 0.01)" if floor >= 3600 else ""
            problems.append(f"{where}.interval: at least {floor:g} s{why}")
        for j, rule in enumerate(cfg.map):
            if rule.endpoint not in endpoints:
                problems.append(f"{where}.map[{j}].endpoint: no endpoint named {rule.endpoint!r}")
        if cfg.type != "price_table":
            for endpoint in dict.fromkeys(rule.endpoint for rule in cfg.map):
                other = billed_by.setdefault(endpoint, cfg.source_name)
                if other != cfg.source_name:
                    problems.append(
                        f"{where}.map: endpoint {endpoint!r} is billed by {other!r} already"
                        " (one source per endpoint, or its spend would count twice)"
                    )
        secrets, secret_problems = _secrets(cfg)
        problems += [f"{where}.{message}" for message in secret_problems]
        problems += [f"{where}.{message}" for message in _checks(cfg, secrets)]
        specs.append(SourceSpec(cfg, secrets))
    return specs, problems


def _secrets(cfg: SourceConfig) -> tuple[dict[str, str | None], list[str]]:
    resolved: dict[str, str | None] = {}
    problems: list[str] = []
    for name in getattr(type(cfg), "secret_fields", ()):
        if "." in name:
            continue  # nested (basic_auth.password): resolved by build_target_auth
        inline, file = getattr(cfg, name), getattr(cfg, f"{name}_file")
        try:
            resolved[name] = resolve(inline, file)
        except CredentialError as exc:
            problems.append(f"{name}{'_file' if file else ''}: {exc}")
    return resolved, problems


def _checks(cfg: SourceConfig, secrets: dict[str, str | None]) -> list[str]:
    problems: list[str] = []
    if isinstance(cfg, RunpodConfig) and cfg.api_key is None and cfg.api_key_file is None:
        problems.append("api_key: required (or api_key_file)")
    if isinstance(cfg, OpenCostConfig):
        _, auth_problems = build_target_auth(
            cfg.bearer_token, cfg.bearer_token_file, cfg.basic_auth, cfg.tls
        )
        problems += [f"{key}: {message}" for key, message in auth_problems]
    if isinstance(cfg, AwsCostExplorerConfig):
        try:
            import boto3  # noqa: F401
        except ImportError:
            problems.append("type: aws_cost_explorer needs boto3: pip install 'spectax[aws]'")
        given = [n for n in ("access_key_id", "secret_access_key") if secrets.get(n)]
        if len(given) == 1:
            problems.append("secret_access_key: access_key_id and secret_access_key go together")
    if isinstance(cfg, FocusConfig):
        from pathlib import Path

        from spectax.credentials import expand_path

        try:
            if not Path(expand_path(cfg.path)).exists():
                problems.append(f"path: {cfg.path} does not exist")
        except CredentialError as exc:
            problems.append(f"path: {exc}")
    return problems


def describe(spec: SourceSpec) -> dict[str, Any]:
    """What `check-config` may show of a source: never a secret."""
    cfg = spec.config
    shown: dict[str, Any] = {"type": cfg.type, "interval": cfg.interval, "maps": len(cfg.map)}
    return shown
