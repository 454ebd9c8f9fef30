"""AWS Cost Explorer: GetCostAndUsage, grouped and filtered by a cost-allocation tag.

One request per page (`NextPageToken`), HOURLY or DAILY, one metric
(UnblendedCost by default). Each group's key is `tag$value`; its amount becomes a
line of resource `tag$value` with the tag as `{tag: value}`. A period whose
result says `Estimated` gives lines with `final=False`; AWS revises them until
the bill is final, and each read covers `lookback` again so the revision
replaces them.

Each request costs USD 0.01, so `interval` is at least an hour (default six),
and spectax remembers its last read across restarts. Throttling
(`LimitExceededException`) is retried with backoff inside the read's timeout;
botocore's own retries are off so that every paid request is one we chose.
boto3 is blocking: each request runs in a thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar, Literal

from pydantic import Field, SecretStr

from spectax import logs
from spectax.billing.retry import RetryPolicy, parse_retry_after, with_retries
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
from spectax.units import Duration, ceil_time, floor_time, now_utc

THROTTLED = {
    "LimitExceededException",
    "ThrottlingException",
    "Throttling",
    "TooManyRequestsException",
    "RequestLimitExceeded",
}
STEP = {"HOURLY": timedelta(hours=1), "DAILY": timedelta(days=1)}


class AwsCostExplorerConfig(SourceConfig):
    type: Literal["aws_cost_explorer"]
    interval: Duration = 6 * 3600.0
    lookback: Duration = 3 * 86400.0
    granularity: Literal["HOURLY", "DAILY"] = "DAILY"
    metric: Literal[
        "UnblendedCost", "AmortizedCost", "NetUnblendedCost", "NetAmortizedCost", "BlendedCost"
    ] = "UnblendedCost"
    tag_key: str = Field(min_length=1, max_length=128)
    region: str = "us-east-1"
    endpoint_url: str | None = None  # a VPC endpoint, or a test server
    max_pages: int = Field(default=100, ge=1)
    # Credentials: all optional; without them boto3's default chain (environment,
    # shared config, instance or task role) applies.
    access_key_id: SecretStr | None = None
    access_key_id_file: str | None = None
    secret_access_key: SecretStr | None = None
    secret_access_key_file: str | None = None
    session_token: SecretStr | None = None
    session_token_file: str | None = None

    min_interval: ClassVar[float] = 3600.0
    min_interval_reason: ClassVar[str] = "each GetCostAndUsage request costs USD 0.01"
    secret_fields: ClassVar[tuple[str, ...]] = (
        "access_key_id",
        "secret_access_key",
        "session_token",
    )

    def checks(self, secrets: Mapping[str, str | None]) -> list[str]:
        problems: list[str] = []
        try:
            import boto3  # noqa: F401
        except ImportError:
            problems.append("type: aws_cost_explorer needs boto3: pip install 'spectax[aws]'")
        given = [n for n in ("access_key_id", "secret_access_key") if secrets.get(n)]
        if len(given) == 1:
            problems.append("secret_access_key: access_key_id and secret_access_key go together")
        return problems

    def build(self, secrets: Mapping[str, str | None]) -> Source:
        return AwsCostExplorerSource(self, dict(secrets))


class AwsCostExplorerSource(Source):
    config: AwsCostExplorerConfig

    def __init__(
        self,
        config: AwsCostExplorerConfig,
        secrets: dict[str, str | None] | None = None,
        policy: RetryPolicy | None = None,
    ):
        super().__init__(config)
        if secrets is None:
            secrets, problems = config.resolve_secrets()
            if problems:
                raise BillingError("; ".join(problems))
        self._secrets = secrets
        self._policy = policy or RetryPolicy(attempts=6, base=1.0, cap=30.0)
        self._client: Any = None
        self.requests = 0  # paid GetCostAndUsage requests made (throttled ones included)

    def _make_client(self) -> Any:
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise BillingError(
                "aws_cost_explorer needs boto3: pip install 'spectax[aws]'"
            ) from None
        # botocore's debug lines print signed requests: key id and session token included.
        for name in ("boto3", "botocore", "urllib3"):
            logging.getLogger(name).setLevel(logging.WARNING)
        session = boto3.session.Session(
            aws_access_key_id=self._secrets.get("access_key_id"),
            aws_secret_access_key=self._secrets.get("secret_access_key"),
            aws_session_token=self._secrets.get("session_token"),
        )
        return session.client(
            "ce",
            region_name=self.config.region,
            endpoint_url=self.config.endpoint_url,
            config=Config(
                retries={"total_max_attempts": 1, "mode": "standard"},
                connect_timeout=10,
                read_timeout=60,
            ),
        )

    def request(self, since: datetime, until: datetime) -> dict[str, Any]:
        """The GetCostAndUsage parameters for [since, until), aligned to the granularity."""
        cfg = self.config
        step = STEP[cfg.granularity]
        start, end = floor_time(since, step), ceil_time(until, step)
        fmt = "%Y-%m-%dT%H:%M:%SZ" if cfg.granularity == "HOURLY" else "%Y-%m-%d"
        params: dict[str, Any] = {
            "TimePeriod": {"Start": start.strftime(fmt), "End": end.strftime(fmt)},
            "Granularity": cfg.granularity,
            "Metrics": [cfg.metric],
            "GroupBy": [{"Type": "TAG", "Key": cfg.tag_key}],
        }
        values = self.mapper.tag_values(cfg.tag_key)
        if values:
            params["Filter"] = {
                "Tags": {"Key": cfg.tag_key, "Values": values, "MatchOptions": ["EQUALS"]}
            }
        return params

    async def fetch(self, since: datetime, until: datetime) -> Fetched:
        deadline = time.monotonic() + self.config.timeout
        if self._client is None:
            self._client = await asyncio.to_thread(self._make_client)
        params = self.request(since, until)
        pages: list[dict[str, Any]] = []
        token: str | None = None
        for _ in range(self.config.max_pages):
            page_params = {**params, **({"NextPageToken": token} if token else {})}
            page = await with_retries(
                lambda p=page_params: self._call(p),  # type: ignore[misc]
                self._policy,
                deadline,
                f"billing source {self.name}",
            )
            pages.append(page)
            token = page.get("NextPageToken") or None
            if token is None:
                break
        else:
            raise BillingError(f"GetCostAndUsage: more than {self.config.max_pages} pages")
        return self.normalise(pages, now_utc())

    async def _call(self, params: dict[str, Any]) -> dict[str, Any]:
        self.requests += 1
        call: Callable[..., dict[str, Any]] = self._client.get_cost_and_usage
        try:
            return await asyncio.to_thread(call, **params)
        except Exception as exc:  # botocore's exceptions, mapped without their request data
            raise _billing_error(exc) from None

    def normalise(self, pages: list[dict[str, Any]], fetched_at: datetime) -> Fetched:
        """Lines and periods from the pages of one read. A period may span pages: its groups
        are gathered, and it is final only if no page calls it estimated."""
        cfg = self.config
        estimated: dict[tuple[datetime, datetime], bool] = {}
        amounts: dict[tuple[datetime, datetime, str], tuple[Decimal, str]] = {}
        for page in pages:
            results = page.get("ResultsByTime")
            if not isinstance(results, list):
                raise BillingError("GetCostAndUsage: the answer has no ResultsByTime")
            for result in results:
                try:
                    period = result["TimePeriod"]
                    start, end = provider_time(period["Start"]), provider_time(period["End"])
                except (KeyError, TypeError):
                    raise BillingError("GetCostAndUsage: a result without TimePeriod") from None
                key = (start, end)
                estimated[key] = estimated.get(key, False) or bool(result.get("Estimated"))
                for group in result.get("Groups") or []:
                    keys = group.get("Keys") or []
                    metric = (group.get("Metrics") or {}).get(cfg.metric)
                    if not keys or not isinstance(metric, dict):
                        raise BillingError(f"GetCostAndUsage: a group without {cfg.metric}")
                    amount = decimal(metric.get("Amount"), f"{cfg.metric}.Amount")
                    amounts[(start, end, str(keys[0]))] = (amount, str(metric.get("Unit") or ""))
        lines: list[BillingLine] = []
        for (start, end, group_key), (amount, unit) in sorted(amounts.items()):
            tag, _, value = group_key.partition("$")
            lines.append(
                self.line(
                    resource=group_key,
                    start=start,
                    end=end,
                    amount=amount,
                    currency=unit or "USD",
                    final=not estimated[(start, end)],
                    fetched_at=fetched_at,
                    tags={tag or cfg.tag_key: value},
                )
            )
        periods = [Period(s, e, not est) for (s, e), est in sorted(estimated.items())]
        return Fetched(lines, periods)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await asyncio.to_thread(client.close)


def _billing_error(exc: Exception) -> BillingError:
    """botocore's exception as a BillingError: the error code and AWS's message only."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error") or {}
        code = str(error.get("Code") or "")
        # AWS may quote a key id in its message.
        message = logs.blank_secrets(str(error.get("Message") or "")[:200])
        status = int((response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
        headers = (response.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}
        retry_after = parse_retry_after(headers.get("retry-after"))
        retryable = code in THROTTLED or status >= 500 or status == 429
        return BillingError(
            f"GetCostAndUsage: {code or f'HTTP {status}'}: {message}".rstrip(": "),
            retryable=retryable,
            retry_after=retry_after if retryable else None,
        )
    name = type(exc).__name__
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return BillingError("GetCostAndUsage: no usable AWS credentials")
    transient = (
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionClosedError",
        "ResponseStreamingError",
    )
    return BillingError(f"GetCostAndUsage: {name}", retryable=name in transient)
