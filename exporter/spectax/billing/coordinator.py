"""Billing sources inside the daemon: one scheduler job per source, beside the scrapes.

Each source is read by its own job (`billing:NAME`) every `interval`, over the
last `lookback`, bounded by its `timeout` (retries included), so a slow,
throttled or broken provider delays nothing else: scrapes never wait on a
billing read, and blocking work (boto3, file parsing) runs in threads.

After each read the lines go to the store (revisions replace), and the
reconciliation is recomputed into an immutable `BillingSnapshot` that the
`/metrics` collector reads: per source `spectax_billing_up` and the last
success, per endpoint the billed spend and the drift of its last final period.
The last read of each source is stored too, so a restart neither reads a paid
API before its interval is up nor forgets when it last succeeded.

`price_table`, the estimate, has no provider to read: the live spend is priced
from the table as windows close. Its job (`billing:price_table`, every 5
minutes by default) reconciles the estimate against the bills, so drift
follows the windows as they arrive between two reads of a slow source; its
`spectax_billing_up` says whether that reconciliation could read the store.

Like the endpoints, a failing source logs its first failure and its recovery
once (`spectax.health.LogOnce`), and its error text never holds a credential.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from spectax.billing import ledger
from spectax.billing.registry import SourceSpec, default_specs
from spectax.billing.types import BillingError, Source
from spectax.health import LogOnce
from spectax.logs import blank_secrets
from spectax.schedule import finish_tasks
from spectax.store import Store, StoreError
from spectax.units import from_timestamp, now_utc

# The logger keeps the name it had before the module was renamed: log filters and alerting
# on JSON logs select by it.
log = logging.getLogger("spectax.billing.service")
STOP_GRACE_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class SourceStatus:
    name: str
    kind: str
    up: bool | None = None  # None: not read yet
    last_success: float | None = None
    last_error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class BillingSnapshot:
    """What `/metrics` shows of billing. Replaced whole, never mutated."""

    sources: tuple[SourceStatus, ...] = ()
    billed_usd_total: Mapping[str, Decimal] = field(default_factory=dict)  # endpoint -> USD
    drift: Mapping[str, float] = field(default_factory=dict)  # source -> last final period's


@dataclass(frozen=True, slots=True, kw_only=True)
class Reconciled:
    """The figures of one reconciliation of the estimate against the bills."""

    billed_usd_total: Mapping[str, Decimal]
    drift: Mapping[str, float]


class BillingService:
    def __init__(self, specs: Sequence[SourceSpec] | None = None):
        self.specs = list(specs) if specs else default_specs()
        self.snapshot = BillingSnapshot(
            sources=tuple(SourceStatus(s.name, s.kind) for s in self.specs)
        )
        self.store: Store | None = None
        self._scheduler: Any = None
        self._sources: dict[str, Source] = {}
        self._status = {s.name: SourceStatus(s.name, s.kind) for s in self.specs}
        self._health: dict[str, LogOnce] = {}  # by source name, kept across reloads
        self._last_attempt: dict[str, datetime] = {}
        self._in_flight: set[asyncio.Task[None]] = set()
        self._refresh_lock = asyncio.Lock()
        self._leading: Callable[[], bool] = lambda: True

    # ------------------------------------------------------------ lifecycle

    async def start(
        self, scheduler: Any, store: Store, leading: Callable[[], bool] = lambda: True
    ) -> None:
        """Restore each source's last read, publish what the store holds, add the jobs.
        While `leading` says False (the follower of an HA pair), a job does not read the
        source: it shows what the leader stored."""
        self.store, self._scheduler, self._leading = store, scheduler, leading
        await self._restore_polls()
        await self.refresh()
        self._add_jobs()

    async def apply(self, specs: Sequence[SourceSpec]) -> None:
        """A reloaded configuration: unchanged sources keep their state, others start anew."""
        wanted = list(specs) if specs else default_specs()
        self._remove_jobs()
        kept = {spec.name for spec in wanted if spec in self.specs}
        for name in list(self._sources):
            if name not in kept:
                await self._close_source(name)
        self._status = {
            s.name: self._status[s.name] if s.name in kept else SourceStatus(s.name, s.kind)
            for s in wanted
        }
        self.specs = wanted
        await self._restore_polls()
        await self.refresh()
        self._add_jobs()

    async def stop(self) -> None:
        self._remove_jobs()
        await finish_tasks(self._in_flight, STOP_GRACE_SECONDS)
        for name in list(self._sources):
            await self._close_source(name)

    # ------------------------------------------------------------ jobs

    def _add_jobs(self) -> None:
        if self._scheduler is None:
            return
        now = now_utc()
        for spec in self.specs:
            first = now
            attempted = self._last_attempt.get(spec.name)
            if attempted is not None:
                # A paid API is not read again before its interval is up, across restarts.
                first = max(now, attempted + timedelta(seconds=spec.config.interval))
            self._scheduler.add_job(
                self.run,
                "interval",
                args=[spec.name],
                seconds=spec.config.interval,
                id=f"billing:{spec.name}",
                next_run_time=first,
                max_instances=1,
                coalesce=True,
                misfire_grace_time=max(1, int(spec.config.interval / 2)),
            )

    def _remove_jobs(self) -> None:
        if self._scheduler is None:
            return
        for spec in self.specs:
            with contextlib.suppress(Exception):
                self._scheduler.remove_job(f"billing:{spec.name}")

    async def run(self, name: str) -> None:
        """One scheduled read of source `name` (a job: it never raises)."""
        task = asyncio.current_task()
        if task is not None:
            self._in_flight.add(task)
        try:
            spec = next((s for s in self.specs if s.name == name), None)
            if spec is not None and self._leading():
                await self.poll(spec)
            elif spec is not None:
                await self.refresh()
        finally:
            if task is not None:
                self._in_flight.discard(task)

    async def poll(self, spec: SourceSpec, now: datetime | None = None) -> bool:
        """Read the source over its lookback, store what it says, refresh the snapshot.

        The price table is a lookup loaded with the configuration, read from no provider:
        its turn only refreshes the reconciliation (so drift follows the estimate every
        few minutes even when the bills come every few hours), and it is always up."""
        assert self.store is not None
        started = now or now_utc()
        try:
            if not spec.is_estimate:
                await self._read(spec, started)
        except TimeoutError:
            self._failed(spec, started, f"no answer within {spec.config.timeout:g} s")
        except (BillingError, StoreError) as exc:
            self._failed(spec, started, str(exc))
        except Exception as exc:  # a source's bug must not end the job silently
            log.exception("billing source %s: unexpected error", spec.name)
            self._failed(spec, started, type(exc).__name__)
        else:
            self._succeeded(spec, started)
        self._last_attempt[spec.name] = started
        await self._save_poll(spec.name, started)
        await self.refresh()
        status = self._status.get(spec.name)
        return bool(status and status.up)

    async def _read(self, spec: SourceSpec, started: datetime) -> None:
        """One read of a provider over the source's lookback, stored (revisions replace)."""
        assert self.store is not None
        since = started - timedelta(seconds=spec.config.lookback)
        source = self._source(spec)
        async with asyncio.timeout(spec.config.timeout):
            fetched = await source.fetch(since, started)
        await self.store.save_billing(
            spec.name, fetched.lines, fetched.periods, source.mapper.endpoints
        )

    def _source(self, spec: SourceSpec) -> Source:
        source = self._sources.get(spec.name)
        if source is None:
            source = spec.build()
            self._sources[spec.name] = source
        return source

    async def _close_source(self, name: str) -> None:
        source = self._sources.pop(name, None)
        if source is not None:
            with contextlib.suppress(Exception):
                await source.close()

    def _health_of(self, spec: SourceSpec) -> LogOnce:
        health = self._health.get(spec.name)
        if health is None:
            health = self._health[spec.name] = LogOnce(log, "billing source", spec.name)
        return health

    def _failed(self, spec: SourceSpec, started: datetime, message: str) -> None:
        message = blank_secrets(message)
        self._health_of(spec).failed("read failed: %s", message)
        before = self._status.get(spec.name, SourceStatus(spec.name, spec.kind))
        self._status[spec.name] = SourceStatus(
            spec.name, spec.kind, False, before.last_success, message
        )

    def _succeeded(self, spec: SourceSpec, started: datetime) -> None:
        self._health_of(spec).recovered("reading again")
        self._status[spec.name] = SourceStatus(spec.name, spec.kind, True, time.time(), None)

    async def _save_poll(self, name: str, attempted: datetime) -> None:
        assert self.store is not None
        status = self._status[name]
        succeeded = (
            from_timestamp(status.last_success)
            if status.up and status.last_success is not None
            else None
        )
        with contextlib.suppress(StoreError):
            await self.store.save_billing_poll(name, attempted, succeeded, bool(status.up))

    async def _restore_polls(self) -> None:
        assert self.store is not None
        try:
            polls = await self.store.billing_polls()
        except Exception:
            return
        for spec in self.specs:
            poll = polls.get(spec.name)
            if poll is None:
                continue
            if poll.attempted_at is not None and spec.name not in self._last_attempt:
                self._last_attempt[spec.name] = poll.attempted_at
            if self._status[spec.name].up is None:
                success = poll.succeeded_at.timestamp() if poll.succeeded_at else None
                self._status[spec.name] = SourceStatus(spec.name, spec.kind, poll.ok, success)

    # ------------------------------------------------------------ reconciliation

    async def refresh(self, now: datetime | None = None) -> BillingSnapshot:
        """Recompute billed totals and drift from the store, and publish them (the last
        figures stay when the store cannot be read)."""
        assert self.store is not None
        async with self._refresh_lock:
            try:
                reconciled = await self._reconcile(now or now_utc())
            except Exception as exc:
                log.debug("billing: reconciliation postponed: %s", exc)
                reconciled = Reconciled(
                    billed_usd_total=self.snapshot.billed_usd_total, drift=self.snapshot.drift
                )
            return self._publish(reconciled)

    async def _reconcile(self, moment: datetime) -> Reconciled:
        """Per endpoint its final billed spend, per source the drift of its last final
        period watched whole; raises when the store cannot be read."""
        assert self.store is not None
        totals = await ledger.billed_totals(self.store)
        drift: dict[str, float] = {}
        for source in dict.fromkeys(source for source, _ in totals.values()):
            last = await ledger.last_source_drift(self.store, source, moment)
            if last is not None:
                drift[source] = last[2]
        return Reconciled(
            billed_usd_total={endpoint: amount for endpoint, (_, amount) in totals.items()},
            drift=drift,
        )

    def _publish(self, reconciled: Reconciled) -> BillingSnapshot:
        self.snapshot = BillingSnapshot(
            sources=tuple(self._status[s.name] for s in self.specs if s.name in self._status),
            billed_usd_total=reconciled.billed_usd_total,
            drift=reconciled.drift,
        )
        return self.snapshot
