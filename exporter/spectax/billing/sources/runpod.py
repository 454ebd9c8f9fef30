"""RunPod: the REST billing API (`/billing/pods`, `/billing/endpoints`), hourly buckets.

`GET {base_url}/billing/pods?bucketSize=hour&startTime=…&endTime=…&grouping=podId`
and the same on `/billing/endpoints` with `grouping=endpointId`, with
`Authorization: Bearer <API key>`. Each answer is a JSON array of records
`{amount, time, podId | endpointId, timeBilledMs, diskSpaceBilledGb, gpuTypeId}`:
one record per pod (or serverless endpoint) per hour bucket starting at `time`.

RunPod charges by the second as it goes; a bucket is taken as final
`final_after` (default an hour) after it ends. The bucket in progress is
read too, as a non-final line. A bucket without a record for a resource means
nothing was billed for it in that hour (an idle serverless endpoint).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar, Literal

import aiohttp
from pydantic import Field, SecretStr, field_validator

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
from spectax.credentials import resolve
from spectax.units import Duration, ceil_time, floor_time, now_utc

HOUR = timedelta(hours=1)
KINDS: dict[str, tuple[str, str]] = {  # include key -> (path, id field)
    "pods": ("/billing/pods", "podId"),
    "endpoints": ("/billing/endpoints", "endpointId"),
}


class RunpodConfig(SourceConfig):
    type: Literal["runpod"]
    base_url: str = "https://rest.runpod.io/v1"
    api_key: SecretStr | None = None
    api_key_file: str | None = None
    include: list[Literal["pods", "endpoints"]] = Field(default=["pods", "endpoints"], min_length=1)
    interval: Duration = 900.0
    lookback: Duration = 86400.0
    final_after: Duration = 3600.0
    request_timeout: Duration = 30.0

    secret_fields: ClassVar[tuple[str, ...]] = ("api_key",)

    @field_validator("base_url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    def checks(self, secrets: Mapping[str, str | None]) -> list[str]:
        if self.api_key is None and self.api_key_file is None:
            return ["api_key: required (or api_key_file)"]
        return []

    def build(self, secrets: Mapping[str, str | None]) -> Source:
        return RunpodSource(self, secrets.get("api_key"))


class RunpodSource(Source):
    config: RunpodConfig

    def __init__(
        self,
        config: RunpodConfig,
        api_key: str | None = None,
        policy: RetryPolicy | None = None,
    ):
        super().__init__(config)
        key = api_key if api_key is not None else resolve(config.api_key, config.api_key_file)
        if not key:
            raise BillingError("runpod needs api_key or api_key_file")
        self._headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
        self._policy = policy or RetryPolicy(attempts=5, base=1.0, cap=30.0)
        self._session: aiohttp.ClientSession | None = None

    async def fetch(self, since: datetime, until: datetime) -> Fetched:
        cfg = self.config
        deadline = time.monotonic() + cfg.timeout
        if self._session is None:
            self._session = aiohttp.ClientSession()
        now = now_utc()
        start = floor_time(since, HOUR)
        end = ceil_time(min(until, now), HOUR)
        params = {
            "bucketSize": "hour",
            "startTime": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "endTime": end.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        answers: dict[str, Any] = {}
        session = self._session
        for kind in cfg.include:
            path, id_field = KINDS[kind]
            query = {**params, "grouping": id_field}

            async def attempt(path: str = path, query: Mapping[str, str] = query) -> Any:
                return await get_json(
                    session,
                    cfg.base_url + path,
                    params=query,
                    headers=self._headers,
                    timeout=cfg.request_timeout,
                )

            answers[kind] = await with_retries(
                attempt, self._policy, deadline, f"billing source {self.name}"
            )
        return self.normalise(answers, start, end, now)

    def normalise(
        self, answers: Mapping[str, Any], start: datetime, end: datetime, fetched_at: datetime
    ) -> Fetched:
        """Lines from the records of each kind; every hour bucket of [start, end) is covered."""
        final_before = fetched_at - timedelta(seconds=self.config.final_after)
        amounts: dict[tuple[str, datetime], tuple[Decimal, dict[str, str]]] = {}
        for kind, records in answers.items():
            _, id_field = KINDS[kind]
            if not isinstance(records, list):
                raise BillingError(f"runpod {kind}: the answer is not a list of billing records")
            for i, record in enumerate(records):
                where = f"runpod {kind}[{i}]"
                if not isinstance(record, dict):
                    raise BillingError(f"{where}: not an object")
                resource = record.get(id_field)
                if not isinstance(resource, str) or not resource:
                    raise BillingError(f"{where}: no {id_field}")
                if not isinstance(record.get("time"), str):
                    raise BillingError(f"{where}: no time")
                bucket = floor_time(provider_time(record["time"]), HOUR)
                amount = decimal(record.get("amount"), f"{where}.amount")
                tags = {"kind": kind}
                if isinstance(record.get("gpuTypeId"), str):
                    tags["gpuTypeId"] = record["gpuTypeId"]
                if record.get("timeBilledMs") is not None:
                    billed_ms = decimal(record["timeBilledMs"], f"{where}.timeBilledMs")
                    tags["timeBilledMs"] = str(billed_ms)
                previous = amounts.get((resource, bucket))
                if previous is not None:  # several records of one bucket: they add up
                    amount += previous[0]
                    if "timeBilledMs" in tags and "timeBilledMs" in previous[1]:
                        total = Decimal(tags["timeBilledMs"]) + Decimal(previous[1]["timeBilledMs"])
                        tags["timeBilledMs"] = str(total)
                amounts[(resource, bucket)] = (amount, tags)
        lines: list[BillingLine] = [
            self.line(
                resource=resource,
                start=bucket,
                end=bucket + HOUR,
                amount=amount,
                currency="USD",
                final=bucket + HOUR <= final_before,
                fetched_at=fetched_at,
                tags=tags,
            )
            for (resource, bucket), (amount, tags) in sorted(amounts.items())
        ]
        periods = []
        bucket = start
        while bucket < end:
            periods.append(Period(bucket, bucket + HOUR, bucket + HOUR <= final_before))
            bucket += HOUR
        return Fetched(lines, periods)

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()
