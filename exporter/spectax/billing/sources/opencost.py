"""OpenCost: the allocation API, aggregated by a Kubernetes label, one set per step.

`GET {url}/allocation?window=START,END&aggregate=label:LABEL&step=1h&accumulate=false`
answers `{"code": 200, "data": [{NAME: allocation, ...}, ...]}`: one set per
step, keyed by the label's value (`__unallocated__` for workloads without the
label, `__idle__` for idle capacity). Each allocation carries its `window`
(`start`, `end`), `gpuCost` and `totalCost`; `cost` picks which one is billed.

A step is final `final_after` (default 30 minutes) after it ends, once
OpenCost's Prometheus has all of its samples. A step missing from the answer
is simply not covered: its spend stays on the estimate.
"""

from __future__ import annotations

import ssl as ssl_module
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar, Literal

import aiohttp
from pydantic import SecretStr, field_validator

from spectax.billing.http import get_json
from spectax.billing.retry import RetryPolicy, with_retries
from spectax.billing.types import (
    BillingError,
    BillingLine,
    Fetched,
    Period,
    Source,
    SourceConfig,
    decimal,
    provider_time,
)
from spectax.credentials import BasicAuthConfig, TLSClientConfig, build_target_auth
from spectax.units import Duration, ceil_time, floor_time, now_utc

SPECIAL = ("__idle__", "__unallocated__", "__unmounted__")


class OpenCostConfig(SourceConfig):
    type: Literal["opencost"]
    url: str
    label: str
    cost: Literal["totalCost", "gpuCost"] = "totalCost"
    step: Duration = 3600.0
    interval: Duration = 900.0
    lookback: Duration = 6 * 3600.0
    final_after: Duration = 1800.0
    request_timeout: Duration = 60.0
    bearer_token: SecretStr | None = None
    bearer_token_file: str | None = None
    basic_auth: BasicAuthConfig | None = None
    tls: TLSClientConfig | None = None

    secret_fields: ClassVar[tuple[str, ...]] = ("bearer_token", "basic_auth.password")

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    def checks(self, secrets: Mapping[str, str | None]) -> list[str]:
        _, problems = build_target_auth(
            self.bearer_token, self.bearer_token_file, self.basic_auth, self.tls
        )
        return [f"{key}: {message}" for key, message in problems]

    def build(self, secrets: Mapping[str, str | None]) -> Source:
        return OpenCostSource(self)  # it resolves its own credentials (build_target_auth)


def duration_text(seconds: float) -> str:
    """OpenCost's duration syntax: `1h`, `30m`, `1d`."""
    whole = int(seconds)
    if whole % 86400 == 0:
        return f"{whole // 86400}d"
    if whole % 3600 == 0:
        return f"{whole // 3600}h"
    return f"{max(1, whole // 60)}m"


class OpenCostSource(Source):
    config: OpenCostConfig

    def __init__(
        self,
        config: OpenCostConfig,
        headers: Mapping[str, str] | None = None,
        ssl: ssl_module.SSLContext | None = None,
        policy: RetryPolicy | None = None,
    ):
        super().__init__(config)
        if headers is None:
            auth, problems = build_target_auth(
                config.bearer_token, config.bearer_token_file, config.basic_auth, config.tls
            )
            if problems:
                raise BillingError("; ".join(f"{key}: {message}" for key, message in problems))
            headers, ssl = auth.headers, auth.ssl
        self._headers = {"Accept": "application/json", **headers}
        self._ssl: ssl_module.SSLContext | bool = ssl if ssl is not None else True
        self._policy = policy or RetryPolicy(attempts=5, base=1.0, cap=30.0)
        self._session: aiohttp.ClientSession | None = None

    async def fetch(self, since: datetime, until: datetime) -> Fetched:
        cfg = self.config
        deadline = time.monotonic() + cfg.timeout
        if self._session is None:
            self._session = aiohttp.ClientSession()
        session = self._session
        step = timedelta(seconds=cfg.step)
        now = now_utc()
        start, end = floor_time(since, step), ceil_time(min(until, now), step)
        fmt = "%Y-%m-%dT%H:%M:%SZ"
        params = {
            "window": f"{start.strftime(fmt)},{end.strftime(fmt)}",
            "aggregate": f"label:{cfg.label}",
            "step": duration_text(cfg.step),
            "accumulate": "false",
        }

        async def attempt() -> Any:
            return await get_json(
                session,
                f"{cfg.url}/allocation",
                params=params,
                headers=self._headers,
                timeout=cfg.request_timeout,
                ssl=self._ssl,
            )

        answer = await with_retries(attempt, self._policy, deadline, f"billing source {self.name}")
        return self.normalise(answer, start, end, now)

    def normalise(
        self, answer: Any, start: datetime, end: datetime, fetched_at: datetime
    ) -> Fetched:
        cfg = self.config
        if not isinstance(answer, dict):
            raise BillingError("opencost: the answer is not an object")
        code = answer.get("code", 200)
        if code != 200:
            message = str(answer.get("message") or "")[:200]
            raise BillingError(
                f"opencost: code {code}: {message}".rstrip(": "),
                retryable=isinstance(code, int) and code >= 500,
            )
        sets = answer.get("data")
        if sets is None:
            sets = []
        if not isinstance(sets, list):
            raise BillingError("opencost: data is not a list of allocation sets")
        step = timedelta(seconds=cfg.step)
        final_before = fetched_at - timedelta(seconds=cfg.final_after)
        lines: list[BillingLine] = []
        covered: dict[tuple[datetime, datetime], bool] = {}
        expected = int((end - start) / step)
        for i, answered in enumerate(sets):
            allocations = {} if answered is None else answered
            if not isinstance(allocations, dict):
                raise BillingError(f"opencost: data[{i}] is not a set of allocations")
            window: tuple[datetime, datetime] | None = None
            if not allocations and len(sets) == expected:  # an empty step, known by its place
                window = (start + i * step, start + (i + 1) * step)
            amounts: dict[str, Decimal] = {}
            for name, allocation in allocations.items():
                where = f"opencost: data[{i}][{name[:60]!r}]"
                if not isinstance(allocation, dict):
                    raise BillingError(f"{where}: not an allocation")
                window = _window(allocation, where)
                amounts[name] = amounts.get(name, Decimal(0)) + decimal(
                    allocation.get(cfg.cost, 0), f"{where}.{cfg.cost}"
                )
            if window is None:
                continue
            final = window[1] <= final_before
            covered[window] = final
            for name, amount in sorted(amounts.items()):
                tags = {} if name in SPECIAL else {cfg.label: name}
                lines.append(
                    self.line(name, window[0], window[1], amount, "USD", final, fetched_at, tags)
                )
        periods = [Period(s, e, final) for (s, e), final in sorted(covered.items())]
        return Fetched(lines, periods)

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


def _window(allocation: Mapping[str, Any], where: str) -> tuple[datetime, datetime]:
    window = allocation.get("window")
    if isinstance(window, dict) and isinstance(window.get("start"), str):
        start, end = window.get("start"), window.get("end")
    else:
        start, end = allocation.get("start"), allocation.get("end")
    if not isinstance(start, str) or not isinstance(end, str):
        raise BillingError(f"{where}: no window")
    first, last = provider_time(start), provider_time(end)
    if last <= first:
        raise BillingError(f"{where}: an empty window")
    return first, last
