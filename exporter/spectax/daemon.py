"""Wiring and lifecycle: the scrape schedule, the store writer, the web server, shutdown.

Start-up restores each endpoint's cursor, partial window and accrued spend
from the store, so a restart neither loses nor double-counts. Each endpoint
is scraped in its own task, started at its own offset within the interval
(spectax.schedule) so scrapes spread out instead of bursting; APScheduler runs
the rollup and billing jobs. Closed windows go to the store through the
store writer (spectax.store.writer), which retries, in order, until the
database takes them, in batches. Shutdown: start no more scrapes, let
running ones finish (bounded), write the open windows, then stop. Reload:
`spectax.reload` validates the new files and tells which endpoints changed;
the daemon swaps them in.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
from prometheus_client import CollectorRegistry

from spectax.allocator import one_malloc_arena
from spectax.billing.coordinator import BillingService
from spectax.config import ConfigError, Settings
from spectax.counterfactual.in_force import CALIBRATION_POINTS, control_lookups
from spectax.counterfactual.profile_book import REFRESH_SECONDS, ProfileBook, baseline_profile_name
from spectax.curve_book import CurveBook
from spectax.endpoint import EndpointMonitor, EndpointSnapshot
from spectax.endpoint_config import EndpointConfig
from spectax.exposition.collector import ReloadStatus, SnapshotCollector, StoreStatus
from spectax.exposition.text import Page
from spectax.gc_pacing import FullCollections
from spectax.health import ScrapeError
from spectax.observed import Observed, Resume
from spectax.reload import endpoint_changes, read_new_configuration, sources_changed
from spectax.schedule import Jobs, ScrapeSchedule, finish_tasks
from spectax.scrape import fetch, lift_open_files_limit, metrics_url, scrape_session
from spectax.sources.fleet import Fleet
from spectax.status import (
    StatusHistory,
    endpoint_states,
    render_status_page,
    served_documents,
)
from spectax.store import Store
from spectax.store.pending import PendingWrite
from spectax.store.writer import StoreWriter
from spectax.tariffs import running_pricing
from spectax.web import WebGuard, make_app
from spectax.webconfig import WebConfigError, load_web_config
from spectax.webserver import WebServer, start_server

log = logging.getLogger(__name__)
SHUTDOWN_GRACE_SECONDS = 5.0
# At start-up the spool left by an earlier run is written before restoring, but for 10 s
# at most: a spool that cannot drain must never keep spectax from scraping. What is left
# is overlaid on the store at restore (Store.restore) and drains behind the scrapes.
STARTUP_DRAIN_SECONDS = 10.0


class Daemon:
    def __init__(
        self,
        settings: Settings,
        config_path: Path | None = None,
        web_config_file: str | None = None,
        listen_address: str | None = None,
        *,
        shutdown_grace_seconds: float = SHUTDOWN_GRACE_SECONDS,
        startup_drain_seconds: float = STARTUP_DRAIN_SECONDS,
    ):
        """`config_path` is re-read on reload (none: nothing to reload); `web_config_file`
        (the `--web.config.file` flag) overrides the configuration's `web_config_file`, and
        `listen_address` (`--web.listen-address`, applied to `settings`) its `listen` on reload;
        `shutdown_grace_seconds` bounds how long a stop or reload waits for scrapes and writes,
        `startup_drain_seconds` how long start-up writes the spool before it scrapes."""
        self.settings = settings
        self.config = settings.config
        self._config_path = config_path
        self._web_config_flag, self._listen_flag = web_config_file, listen_address
        self._grace = shutdown_grace_seconds
        self._startup_drain = startup_drain_seconds
        self.guard = WebGuard(load_web_config(web_config_file or self.config.web_config_file))
        self.reload_status = ReloadStatus(True, time.time())
        self._reload_lock = asyncio.Lock()
        self._reload_tasks: set[asyncio.Task[None]] = set()
        self.monitors: dict[str, EndpointMonitor] = {}
        self.fleet = Fleet()  # the endpoints found in Prometheus (docs/fleet.md)
        self.store: Store | None = None
        self._stop_requested = asyncio.Event()
        self.writer = StoreWriter(
            lambda: Store.open(self.config.database_url, create_apart=True),
            Path(self.config.state_directory) / "spool.jsonl",
            self.config.store_queue_max_rows,
            self._stop_requested,
            log,
        )
        self._jobs = Jobs()  # rollup, profiles and billing
        self._full_collections = FullCollections()  # off the /metrics path: gc_pacing
        self._scrapes = ScrapeSchedule(self.scrape, self.config.scrape_interval)
        self.session: aiohttp.ClientSession | None = None
        self._server: WebServer | None = None
        self._ready = False
        self.stopped = asyncio.Event()
        self.billing = BillingService(settings.billing)  # its jobs run beside the scrapes
        self.profiles = ProfileBook()
        self.curves = CurveBook()  # the load curves, made by their own job (refresh_curves)
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = SnapshotCollector(
            self.snapshots,
            self.store_status,
            lambda: self.reload_status,
            lambda: self.billing.snapshot,
            load_curves=lambda: self.curves.current,
        )
        self.registry.register(self.collector)
        self.status = StatusHistory(min(60.0, self.config.window))  # a point a minute at most

    # ------------------------------------------------------------ read side

    def snapshots(self) -> Mapping[str, EndpointSnapshot]:
        return self.fleet.snapshots() | {n: m.snapshot for n, m in self.monitors.items()}

    def store_status(self) -> StoreStatus:
        return StoreStatus(
            pending_windows=self.writer.queue.pending_rows,
            write_errors=self.writer.write_errors,
            up=self.writer.up,
            quarantined_rows=dict(self.writer.queue.quarantine.rows),
            leader=self.writer.leading,
            oldest_pending_age_seconds=self.writer.oldest_pending_age(time.time()),
        )

    @property
    def listen_url(self) -> str:
        server = self._server
        host, port = (
            server.address if server else (self.config.listen_host, self.config.listen_port)
        )
        return f"{'https' if self.guard.tls else 'http'}://{host}:{port}"

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Serve /metrics at once; scrape once the store has given back where we were.

        Until the database answers, spectax waits (and says so): the cursors
        in the store mean no traffic is lost by waiting. The spool left by an
        earlier run is written first, for STARTUP_DRAIN_SECONDS at most (a row
        the database refuses is quarantined, not retried), then drains behind;
        the monitors resume from the store overlaid with what is still queued.
        """
        one_malloc_arena()  # before any thread is started: spectax.allocator
        app = make_app(
            self.registry,
            lambda: self._ready,
            lambda: endpoint_states(self.snapshots()),
            reload=self.reload if self._config_path is not None else None,
            middlewares=[self.guard.middleware],
            render_page=self._render_page,
            status_page=lambda: render_status_page(
                self.snapshots(),
                self.status,
                time.time(),
                self._config_path,
                self.curves.current.curves,
                self.curves.current.schedules,
            ),
            documents=served_documents(),
        )
        self._server = await start_server(
            app, self.config.listen_host, self.config.listen_port, self.guard.server_ssl
        )
        lift_open_files_limit(len(self.config.endpoints))
        self.store = await self.writer.connect()
        if self.store is None:
            return  # asked to stop while waiting
        await self.writer.drain(self.writer.queue.drain_budget(self._startup_drain))
        if self.writer.queue:
            log.warning(
                "store: %d spooled window row(s) not written within %g s; endpoints resume"
                " from the store overlaid with them, and they are written behind the scrapes",
                self.writer.queue.pending_rows,
                self._startup_drain,
            )
        await self.profiles.refresh(self.store, (), datetime.now(UTC))
        await self._restore()
        self.session = scrape_session()
        self.writer.start(take_over=self._take_over)
        # What start-up built lives as long as the process: keep it out of the collector's
        # full passes (~100 ms each at 2,000 endpoints, a pause in scraping and serving).
        gc.freeze()
        self._full_collections.start()
        self._schedule()
        await self._start_fleet()
        await self.billing.start(self._jobs.scheduler, self.store, lambda: self.writer.leading)
        self._ready = True
        log.info(
            "spectax listening on %s, watching %d endpoint(s)", self.listen_url, len(self.monitors)
        )

    async def stop(self) -> None:
        """Graceful stop: no new scrapes, running ones finish or are cancelled, windows flushed."""
        self._ready = False
        self._full_collections.stop()  # first: Python's own gc schedule back whatever follows
        self._jobs.pause()
        await self._scrapes.stop()
        await self.fleet.stop()
        await finish_tasks(self._scrapes.in_flight, self._grace)
        await self.billing.stop()  # reads in flight are cancelled: the next run reads again
        await self._jobs.finish(self._grace)  # before the store closes under them
        open_windows = (monitor.flush() for monitor in self.monitors.values())
        await self.writer.stop(open_windows, self._grace)
        if self._server is not None:
            await self._server.close()
        if self.session is not None:
            await self.session.close()
        await self.writer.close()
        self.stopped.set()

    def _render_page(self) -> Page:
        """`/metrics`' page; a full gc pass follows it shortly if one is due."""
        self._full_collections.after_read()
        return self.collector.render_page()

    async def run_until_signalled(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop_requested.set)
        loop.add_signal_handler(signal.SIGHUP, self._reload_on_signal)
        try:
            await self._start_unless_stopped()
            await self._stop_requested.wait()
        finally:
            log.info("spectax stopping")
            await self.stop()

    async def _start_unless_stopped(self) -> None:
        """`start`, given up (cancelled) when SIGTERM comes first: a start waiting on a
        stalled database (restoring from a windows table another session holds locked)
        left SIGTERM unheard until systemd killed the process."""
        starting = asyncio.ensure_future(self.start())
        stopping = asyncio.ensure_future(self._stop_requested.wait())
        try:
            await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            starting.cancel()  # nothing if it is done
        while not starting.done():  # as the writer's stop: cancelled again until it ends
            starting.cancel()
            await asyncio.wait({starting}, timeout=0.5)
        if not starting.cancelled():
            starting.result()  # its error (a schema mismatch, a store that cannot work)

    # ------------------------------------------------------------ reload

    def _reload_on_signal(self) -> None:
        task = asyncio.create_task(self._reload_quietly(), name="reload")
        self._reload_tasks.add(task)
        task.add_done_callback(self._reload_tasks.discard)

    async def _reload_quietly(self) -> None:
        with contextlib.suppress(ConfigError, WebConfigError):
            await self.reload()  # a failure is logged and shown by the gauges

    async def reload(self) -> None:
        """Re-read the configuration and the web config, validate both, then swap them in.

        A bad file changes nothing (the old configuration keeps running), sets
        `spectax_config_last_reload_successful` to 0, logs the reason and raises
        ConfigError or WebConfigError. A good one keeps the monitors (and their state)
        of unchanged endpoints, flushes the open window of removed or changed ones to the
        store, starts the new ones where the store left them, and reschedules the scrapes.
        """
        if self._config_path is None:
            log.info("reload: no configuration file (built-in defaults); nothing to reload")
            return
        async with self._reload_lock:
            try:
                if not self._ready:
                    raise ConfigError(str(self._config_path), ["spectax is still starting"])
                settings, web_config = read_new_configuration(
                    self._config_path, self._web_config_flag, self.config, self._listen_flag
                )
                self.guard.replace(web_config)
            except (ConfigError, WebConfigError) as exc:
                self.reload_status = ReloadStatus(False, self.reload_status.success_timestamp)
                log.error("reload failed, the running configuration stays in force: %s", exc)
                raise
            await self._apply(settings)
            self.reload_status = ReloadStatus(True, time.time())

    async def _apply(self, settings: Settings) -> None:
        old = self.monitors
        changes = endpoint_changes(
            {name: (m.config, m.usd_per_hour) for name, m in old.items()}, settings
        )
        fleet_changed = sources_changed(self.config, settings.config)
        self._scrapes.replace([], settings.config.scrape_interval)  # none until rescheduled
        for name in changes.stopped:  # their scrapes still in flight are discarded (_scrape)
            self.writer.enqueue(old[name].flush())
        self.settings, self.config = settings, settings.config
        if changes.changed:
            await self.writer.settle(self._grace)  # changed ones resume from the store
        started = [e for e in settings.config.endpoints if e.name not in changes.kept]
        made = {monitor.config.name: monitor async for monitor in self.new_monitors(started)}
        self.monitors = {
            e.name: old[e.name] if e.name in changes.kept else made[e.name]
            for e in settings.config.endpoints
        }
        self._scrapes.replace(self.monitors, self.config.scrape_interval)
        await self.billing.apply(settings.billing)
        if fleet_changed:
            await self._start_fleet()
        log.info(
            "configuration reloaded: %d endpoint(s) kept, %d started, %d stopped",
            len(changes.kept),
            len(self.monitors) - len(changes.kept),
            len(changes.stopped),
        )

    # ------------------------------------------------------------ scraping

    async def scrape(self, name: str) -> None:
        if (monitor := self.monitors.get(name)) is not None:  # None: removed by a reload
            await self._scrape(monitor)
            if self.monitors.get(name) is monitor:
                self.publish(monitor, None)

    async def _scrape(self, monitor: EndpointMonitor) -> None:
        assert self.session is not None
        started = time.monotonic()
        try:
            text = await fetch(
                self.session,
                metrics_url(monitor.config.url, monitor.config.engine),
                self.config.scrape_timeout,
                self.config.max_body_bytes,
                self.settings.target_auth.get(monitor.config.name),
            )
        except ScrapeError as exc:
            if self.monitors.get(monitor.config.name) is not monitor:
                return  # removed or replaced by a reload while in flight
            monitor.observe_failure(exc, time.monotonic() - started)
            closed = monitor.close_due(time.time())  # the open window, once its end has passed
            self.writer.enqueue(closed)
            return
        if self.monitors.get(monitor.config.name) is not monitor:
            return  # removed or replaced by a reload while in flight
        closed = monitor.observe_page(time.time(), text, time.monotonic() - started)
        # The open window so far, merged per endpoint while it waits: a kill -9 then loses
        # only the last OPEN_WINDOW_SECONDS of scrapes, not the open window (issue 16).
        progress = monitor.flush()
        self.writer.enqueue(closed)
        self.writer.enqueue(progress, wake=False)

    def _schedule(self) -> None:
        self._scrapes.start(self.monitors)
        rollup_interval = self.config.rollup_interval
        self._jobs.every(rollup_interval, self.maintain_store, id="store:rollup", coalesce=True)
        self._jobs.every(REFRESH_SECONDS, self.refresh_profiles, id="profiles")
        # The curves at once, not a refresh interval after each start: the store sums a day
        # of 100 endpoints' windows in ~0.2 s (store/load_history.py).
        curves = self.config.load_curve.refresh_interval
        self._jobs.every(
            curves,
            self.refresh_curves,
            id="load_curves",
            coalesce=True,
            next_run_time=datetime.now(UTC),
        )
        self._jobs.start()

    async def refresh_profiles(self) -> None:
        """Save what teaching endpoints learned; read every stored profile back."""
        assert self.store is not None
        learned = (  # only the leader saves
            [m.counterfactual for m in self.monitors.values()] if self.writer.leading else ()
        )
        await self.profiles.refresh(self.store, learned, datetime.now(UTC))

    async def refresh_curves(self) -> None:
        """Bin the lookback's stored windows again: the load curves on /metrics."""
        assert self.store is not None
        lookback = self.config.load_curve.lookback
        await self.curves.refresh(self.store, datetime.now(UTC), lookback, self.snapshots())

    async def maintain_store(self) -> None:
        """Roll windows into hours and days, then apply retention."""
        retention = self.config.retention
        await self.writer.maintain(
            datetime.now(UTC),
            {"window": retention.windows, "hour": retention.hourly, "day": retention.daily},
        )

    # ------------------------------------------------------------ store

    async def _take_over(self) -> None:
        """A follower become leader resumes as if restarted (the fleet too)."""
        await self._restore()
        await self._start_fleet()

    async def _start_fleet(self) -> None:
        """The fleet sources, (re)started at start-up, after a takeover or a reload that
        changed them: their endpoints resume where the store's history of the fleet ends
        (the latest cursor of an endpoint not configured to be scraped: a fleet one), so the
        windows nobody wrote are read again."""
        assert self.session is not None and self.store is not None
        await self.fleet.stop()
        reserved = frozenset(e.name for e in self.config.endpoints)
        cursors = await self.store.cursor_times()
        resume = max((t for n, t in cursors.items() if n not in reserved), default=None)
        self.fleet.start(
            self.config.sources,
            self.config.window,
            self.session,
            resume,
            self.new_monitors,
            self.publish,
            reserved,
        )

    async def _restore(self) -> None:
        self.monitors = {  # at once: a takeover's new monitors scrape only once it writes
            monitor.config.name: monitor
            async for monitor in self.new_monitors(self.config.endpoints)
        }

    async def new_monitors(
        self, endpoints: Sequence[EndpointConfig]
    ) -> AsyncIterator[EndpointMonitor]:
        """A monitor for each of `endpoints`, in order, resumed from what the store holds of it
        overlaid with its writes still queued. A start-up's, a reload's and a fleet's
        endpoints found at once alike: the store reads them RESTORE_BATCH at a time, the
        spool is looked through once for all."""
        assert self.store is not None
        configs = {endpoint.name: endpoint for endpoint in endpoints}
        if not configs:  # a fleet's read that found no endpoint: the spool is not read
            return
        pending: dict[str, list[PendingWrite]] = {}
        for write in self.writer.queue.pending():  # before any await: as the spool stands
            if write.endpoint in configs:
                pending.setdefault(write.endpoint, []).append(write)
        resumed = self.store.restore_each(
            list(configs), self.config.window, CALIBRATION_POINTS, pending
        )
        async with contextlib.aclosing(resumed):
            async for name, resume in resumed:
                yield self._resumed(configs[name], resume, len(pending.get(name, ())))

    def _resumed(self, endpoint: EndpointConfig, resume: Resume, pending: int) -> EndpointMonitor:
        """A monitor for `endpoint` going on from `resume` (`pending`: how many of its writes
        still queued it counts in)."""
        resume = _not_below(resume, self.monitors.get(endpoint.name))
        pricing = running_pricing(endpoint, self.settings.prices)  # as validated; a fleet's: here
        monitor = EndpointMonitor(
            endpoint,
            pricing.usd_per_hour,
            self.config.window,
            resume,
            **control_lookups(lambda: self.monitors, endpoint.control),
            profile=self.profiles.lookup(endpoint.profile),
            baseline=self.profiles.lookup(baseline_profile_name(endpoint.name)),
            gpu=pricing.gpu,
        )
        if resume.cursor is not None:
            resumed = datetime.fromtimestamp(resume.cursor[0], UTC)
            log.info(
                "endpoint %s: resuming from %s%s",
                endpoint.name,
                resumed.isoformat(timespec="seconds"),
                f" ({pending} write(s) of it still queued, counted in)" if pending else "",
            )
        return monitor

    def publish(self, monitor: EndpointMonitor, observed: Observed | None) -> None:
        """An endpoint's new state: its closed windows queued for the store, its snapshot on
        /metrics and the status page (the fleet's endpoints come this way too)."""
        self.writer.enqueue(observed)
        self.collector.prerender(monitor.config.name, monitor.snapshot)
        self.status.record(monitor.config.name, monitor.snapshot)


def _not_below(resume: Resume, earlier: EndpointMonitor | None) -> Resume:
    """`resume`, its money totals raised to what `earlier` (the monitor it replaces, if any)
    showed.

    On taking over the store's writing in an HA pair (spectax.store.leader), the daemon
    rebuilds its monitors from the store, as a restart does: the windows go on from the last
    leader's cursor, so none is lost or written twice. The money counters restored with them
    are the store's totals, which may be a little below what this process showed while it
    followed (its own scrapes ran a second or two ahead); a counter that steps back reads as
    a reset to rate() and increase(), a false jump of the whole total. So they carry on from
    whichever is higher. The token counters are this process's own and start again from
    zero, as at a restart, which rate() reads correctly. A reload that rebuilds a changed
    endpoint's monitor gets the same guard.
    """
    if earlier is None:
        return resume
    shown = earlier.snapshot
    return replace(
        resume,
        spend_usd_total=max(resume.spend_usd_total, shown.spend_usd_total),
        cold_start_usd_total=max(resume.cold_start_usd_total, shown.cold_start_usd_total),
    )
