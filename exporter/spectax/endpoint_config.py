"""The settings of one endpoint: where it is, what it runs on, what it costs, how it speculates.

Its own room because two kinds of configuration make endpoints: the `endpoints:` list
of the file (spectax.config) and each fleet source's `endpoint:` block, given to every
endpoint the source discovers (spectax.source_config).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import TYPE_CHECKING, Literal

from pydantic import Field, SecretStr, field_validator

from spectax.credentials import BasicAuthConfig, TLSClientConfig
from spectax.economics import (
    DEFAULT_RIDGE_BATCH,
    DEFAULT_STEP_OVERHEAD_RATIO,
    draft_cost_ratio_for,
)
from spectax.economics.calibration import MIN_WINDOWS
from spectax.economics.k_schedule import schedule_problem
from spectax.engines import ENGINES
from spectax.slo import LatencySLO
from spectax.units import NAME, Duration, StrictModel

# Loading weights from local NVMe into GPU memory; network volumes are slower (configurable).
DEFAULT_WEIGHT_LOAD_BYTES_PER_SECOND = 1e9

if TYPE_CHECKING:
    EngineName = str
else:  # the engine registry's names: an engine added there is accepted here
    EngineName = Literal[tuple(ENGINES)]


class PriceConfig(StrictModel):
    """Either a rate per GPU-hour, or a row of the price table."""

    usd_per_hour: Decimal | None = Field(default=None, ge=0)
    provider: str | None = None
    product: str | None = None
    gpu: str | None = None


class SpeculationConfig(StrictModel):
    method: Literal["ngram", "eagle", "eagle3", "mtp", "medusa", "draft_model"]
    draft_cost_ratio: float | None = Field(default=None, ge=0, le=10)
    draft_weight_bytes: int | None = Field(default=None, ge=0)
    draft_params: float | None = Field(default=None, gt=0)
    target_params: float | None = Field(default=None, gt=0)
    #: The K schedule the engine runs, as vLLM's `num_speculative_tokens_per_batch_size`
    #: ([[first batch, last batch, K], ...]): the load curve flags the bins that straddle
    #: one of its boundaries (their windows ran two K).
    schedule: tuple[tuple[int, int, int], ...] | None = None

    @field_validator("schedule")
    @classmethod
    def _vllm_schedule(
        cls, value: tuple[tuple[int, int, int], ...] | None
    ) -> tuple[tuple[int, int, int], ...] | None:
        problem = schedule_problem(value) if value is not None else None
        if problem is not None:
            raise ValueError(problem)
        return value

    @property
    def cost_ratio(self) -> float:
        """The configured `c`, or the method's default (validated to exist at load)."""
        if self.draft_cost_ratio is not None:
            return self.draft_cost_ratio
        default = draft_cost_ratio_for(self.method, self.draft_params, self.target_params)
        assert default is not None, "validated in load_config"
        return default


class EndpointConfig(StrictModel):
    name: str
    url: str
    engine: EngineName = "vllm"
    gpu: str | None = None
    gpus: int = Field(default=1, ge=1, le=4096)
    gpu_memory_bytes: int | None = Field(default=None, gt=0)
    price: PriceConfig | None = None
    billing_mode: Literal["provisioned", "serverless"] = "provisioned"
    speculation: SpeculationConfig | None = None
    ridge_batch: float = Field(default=DEFAULT_RIDGE_BATCH, gt=0)
    step_overhead_ratio: float = Field(default=DEFAULT_STEP_OVERHEAD_RATIO, ge=-0.9, le=20)
    profile: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
    calibration_min_windows: int = Field(default=MIN_WINDOWS, ge=2)
    acceptance_threshold: float = Field(default=0.5, ge=0, le=1)
    latency_slo: LatencySLO | None = None  # the operator's, for SpeculationHurtsTailLatency
    control: str | None = None
    cold_start_seconds: Duration | None = None
    weight_load_bytes_per_second: float = Field(default=DEFAULT_WEIGHT_LOAD_BYTES_PER_SECOND, gt=0)
    bearer_token: SecretStr | None = None  # to the target: inline, ${ENV} or *_file (credentials)
    bearer_token_file: str | None = None
    basic_auth: BasicAuthConfig | None = None
    tls: TLSClientConfig | None = None

    @field_validator("name")
    @classmethod
    def _label_safe(cls, value: str) -> str:
        if not NAME.match(value):
            raise ValueError("must be 1-63 letters, digits, '_', '.' or '-', starting alphanumeric")
        return value

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must be an http:// or https:// URL")
        return value
