"""The billing-source registry: a config `type:` to its settings model, one line per source.

A source's settings model carries everything the registry needs: its `type`
literal, the keys holding secrets, its floor on `interval`, its own `checks`
and the `build` of its source. Adding a source is one module under
`billing/sources/` plus one line in `SOURCES`; the configuration's
discriminated union (`BillingConfig`) follows from it.

`resolve_billing` checks the `billing:` section beyond what the models can
(names, interval floors, the endpoints it maps to, secrets from the
environment or files) and reports every problem with its path, like the rest
of the configuration. `price_table`, the estimate, is always on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Union, get_args

from pydantic import Field

from spectax.billing.prices import PriceTableConfig
from spectax.billing.sources.aws_cost_explorer import AwsCostExplorerConfig
from spectax.billing.sources.focus import FocusConfig
from spectax.billing.sources.opencost import OpenCostConfig
from spectax.billing.sources.runpod import RunpodConfig
from spectax.billing.types import Source, SourceConfig


def _by_type(*models: type[SourceConfig]) -> dict[str, type[SourceConfig]]:
    """Each model under the value of its `type: Literal[...]` field."""
    return {get_args(model.model_fields["type"].annotation)[0]: model for model in models}


#: Every billing source type, in the order the configuration's errors list them.
SOURCES: dict[str, type[SourceConfig]] = _by_type(
    PriceTableConfig,  # the estimate, always on
    AwsCostExplorerConfig,
    RunpodConfig,
    OpenCostConfig,
    FocusConfig,
)

if TYPE_CHECKING:
    BillingConfig = SourceConfig
else:  # one entry of `billing:`, told apart by its `type`
    BillingConfig = Annotated[Union[tuple(SOURCES.values())], Field(discriminator="type")]  # noqa: UP007


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

    @property
    def is_estimate(self) -> bool:
        """`price_table`: spectax's own estimate, which no provider is read for."""
        return self.config.estimate

    def build(self) -> Source:
        """The source object (it opens its connections lazily, on its first read)."""
        return self.config.build(self.secrets)


def default_specs() -> list[SourceSpec]:
    return [SourceSpec(PriceTableConfig(type="price_table"))]


def resolve_billing(
    configs: Sequence[SourceConfig],
    endpoints: Sequence[str],
    positions: Sequence[int] | None = None,
) -> tuple[list[SourceSpec], list[str]]:
    """The sources to run (price_table first, always) and the problems found.

    `positions` is each config's index in the file's `billing:` list, when some entries
    failed their own validation and were left out (the paths name the file's entries).
    """
    problems: list[str] = []
    specs: list[SourceSpec] = []
    if not any(c.estimate for c in configs):
        specs.extend(default_specs())
    names = [c.source_name for c in configs]
    billed_by: dict[str, str] = {}
    for n, cfg in enumerate(configs):
        where = f"billing[{positions[n] if positions is not None else n}]"
        if names.count(cfg.source_name) > 1 and names.index(cfg.source_name) != n:
            problems.append(f"{where}.name: {cfg.source_name!r} is used by an earlier source")
        if cfg.interval < cfg.min_interval:
            why = f" ({cfg.min_interval_reason})" if cfg.min_interval_reason else ""
            problems.append(f"{where}.interval: at least {cfg.min_interval:g} s{why}")
        for j, rule in enumerate(cfg.map):
            if rule.endpoint not in endpoints:
                problems.append(f"{where}.map[{j}].endpoint: no endpoint named {rule.endpoint!r}")
        if not cfg.estimate:
            for endpoint in dict.fromkeys(rule.endpoint for rule in cfg.map):
                other = billed_by.setdefault(endpoint, cfg.source_name)
                if other != cfg.source_name:
                    problems.append(
                        f"{where}.map: endpoint {endpoint!r} is billed by {other!r} already"
                        " (one source per endpoint, or its spend would count twice)"
                    )
        secrets, secret_problems = cfg.resolve_secrets()
        problems += [f"{where}.{message}" for message in secret_problems]
        problems += [f"{where}.{message}" for message in cfg.checks(secrets)]
        specs.append(SourceSpec(cfg, secrets))
    return specs, problems
