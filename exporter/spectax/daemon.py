"""Wiring and lifecycle: the scheduler's scrape jobs, the store writer, the web server, shutdown.

Start-up restores each endpoint's cursor, partial window and accrued spend
from the store, so a restart neither loses nor double-counts. Each endpoint
is scraped by its own job, started at its own offset within the interval so
scrapes spread out instead of bursting. Closed windows go to the store
through one writer task that retries, in order, until the database takes
them. Shutdown: pause the jobs, let running scrapes finish (bounded), write
the open windows, then stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections import deque
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta

import aiohttp
from aiohttp import web
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from prometheus_client import CollectorRegistry

from spectax.config import Settings
from spectax.metrics import SnapshotCollector, StoreStatus
from spectax.monitor import CALIBRATION_POINTS, EndpointMonitor, EndpointSnapshot, PendingWrite
from spectax.scrape import ScrapeError, fetch, metrics_url
from spectax.store import Store, StoreError
from spectax.web import make_app
from spectax.windows import Window

log = logging.getLogger(__name__)
SHUTDOWN_GRACE_SECONDS = 5.0
RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)


class Daemon:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.config = settings.config
        self.monitors: dict[str, EndpointMonitor] = {}
        self.store: Store | None = None
        self._writes: deque[PendingWrite] = deque()
        self._write_wakeup = asyncio.Event()
        self._write_errors = 0
        self._scheduler = AsyncIOScheduler(timezone=UTC)
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._writer: asyncio.Task[None] | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        self._ready = False
        self.stopped = asyncio.Event()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotCollector(self.snapshots, self.store_status))

    # ------------------------------------------------------------ read side

    def snapshots(self) -> Mapping[str, EndpointSnapshot]:
        return {name: monitor.snapshot for name, monitor in self.monitors.items()}

    def store_status(self) -> StoreStatus:
        return StoreStatus(
            pending_windows=sum(len(w.rows) for w in self._writes), write_errors=self._write_errors
        )

    @property
    def listen_url(self) -> str:
        site = self._runner.addresses[0] if self._runner and self._runner.addresses else None
        host, port = (
            (site[0], site[1]) if site else (self.config.listen_host, self.config.listen_port)
        )
        return f"http://{host}:{port}"

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self.store = await Store.open(self.config.database_url)
        await self._restore()
        timeout = aiohttp.ClientTimeout(total=None)
        connector = aiohttp.TCPConnector(limit=256, limit_per_host=2)
        self._session = aiohttp.ClientSession(timeout=timeout, connector=connector)
        self._writer = asyncio.create_task(self._write_loop(), name="store-writer")
        app = make_app(self.registry, lambda: self._ready, self._endpoint_states)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.listen_host, self.config.listen_port)
        await site.start()
        self._schedule()
        self._ready = True
        log.info(
            "spectax listening on %s, watching %d endpoint(s)", self.listen_url, len(self.monitors)
        )

    async def stop(self) -> None:
        """Graceful stop: no new scrapes, running ones finish or are cancelled, windows flushed."""
        self._ready = False
        if self._scheduler.running:
            self._scheduler.pause()
        if self._in_flight:
            _, pending = await asyncio.wait(self._in_flight, timeout=SHUTDOWN_GRACE_SECONDS)
            for task in pending:
                task.cancel()
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)
        if self._writer is not None:
            self._writer.cancel()  # a write it had begun stays queued; writes are idempotent
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
        for monitor in self.monitors.values():
            write = monitor.flush()
            if write is not None:
                self._writes.append(write)
        await self._drain(SHUTDOWN_GRACE_SECONDS)
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
        if self.store is not None:
            await self.store.close()
        if self._writes:
            log.error("spectax stopped with %d window write(s) not stored", len(self._writes))
        self.stopped.set()

    async def run_until_signalled(self) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await self.start()
        try:
            await stop.wait()
        finally:
            log.info("spectax stopping")
            await self.stop()

    # ------------------------------------------------------------ scraping

    async def scrape(self, name: str) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._in_flight.add(task)
        try:
            await self._scrape(self.monitors[name])
        finally:
            self._in_flight.discard(task)

    async def _scrape(self, monitor: EndpointMonitor) -> None:
        assert self._session is not None
        started = time.monotonic()
        try:
            text = await fetch(
                self._session,
                metrics_url(monitor.config.url),
                self.config.scrape_timeout,
                self.config.max_body_bytes,
            )
        except ScrapeError as exc:
            monitor.observe_failure(exc, time.monotonic() - started)
            self._enqueue(monitor.close_due(time.time()))
            return
        self._enqueue(monitor.observe_page(time.time(), text, time.monotonic() - started))

    def _schedule(self) -> None:
        interval = self.config.scrape_interval
        now = datetime.now(UTC)
        count = max(len(self.monitors), 1)
        for i, name in enumerate(self.monitors):
            self._scheduler.add_job(
                self.scrape,
                "interval",
                args=[name],
                seconds=interval,
                id=f"scrape:{name}",
                next_run_time=now + timedelta(seconds=interval * i / count),
                max_instances=1,
                coalesce=True,
                misfire_grace_time=max(1, int(interval / 2)),
            )
        self._scheduler.start()

    def _endpoint_states(self) -> list[tuple[str, bool, str]]:
        return [(n, m.snapshot.up, m.snapshot.last_error or "") for n, m in self.monitors.items()]

    # ------------------------------------------------------------ store

    async def _restore(self) -> None:
        assert self.store is not None
        for endpoint in self.config.endpoints:
            restored = await self.store.restore(
                endpoint.name, self.config.window, CALIBRATION_POINTS
            )
            self.monitors[endpoint.name] = EndpointMonitor(
                endpoint,
                self.settings.usd_per_hour.get(endpoint.name),
                self.config.window,
                restored,
                control_window=self._window_of(endpoint.control) if endpoint.control else None,
            )
            if restored.cursor is not None:
                resumed = datetime.fromtimestamp(restored.cursor[0], UTC)
                log.info(
                    "endpoint %s: resuming from %s",
                    endpoint.name,
                    resumed.isoformat(timespec="seconds"),
                )

    def _window_of(self, name: str) -> Callable[[], Window | None]:
        """The control endpoint's current sliding window, looked up when needed."""
        return lambda: self.monitors[name].snapshot.window if name in self.monitors else None

    def _enqueue(self, write: PendingWrite | None) -> None:
        if write is not None:
            self._writes.append(write)
            self._write_wakeup.set()

    async def _write_loop(self) -> None:
        failures = 0
        while True:
            await self._write_wakeup.wait()
            self._write_wakeup.clear()
            while self._writes:
                try:
                    await self._write_one()
                except StoreError as exc:
                    self._write_errors += 1
                    if failures == 0:
                        log.error(
                            "store: %s; %d write(s) held in memory, retrying",
                            exc,
                            len(self._writes),
                        )
                    failures += 1
                    await asyncio.sleep(RETRY_SECONDS[min(failures, len(RETRY_SECONDS)) - 1])
                    continue
                if failures:
                    log.info("store: writing again after %d failed attempt(s)", failures)
                    failures = 0

    async def _write_one(self) -> None:
        assert self.store is not None
        write = self._writes[0]
        await self.store.save(write.endpoint, write.rows, write.cursor)
        self._writes.popleft()

    async def _drain(self, timeout: float) -> None:
        """Write what is queued, giving up after `timeout` (the log then says what was lost)."""
        deadline = time.monotonic() + timeout
        while self._writes and time.monotonic() < deadline:
            try:
                await self._write_one()
            except StoreError as exc:
                log.error("store: %s", exc)
                await asyncio.sleep(0.5)
