"""Reload: the new configuration validated whole before anything changes, and what changes.

Like blackbox_exporter, a reload (SIGHUP, `POST /-/reload`) parses the new
files first: a bad one raises here and the running configuration stays. A
good one is compared with what runs, endpoint by endpoint, so that the daemon
keeps the monitors (and their state) of the unchanged ones and restarts only
the others. The daemon does the swapping (`Daemon.reload`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from spectax.config import Config, ConfigError, Settings, load_config
from spectax.endpoint_config import EndpointConfig
from spectax.webconfig import WebConfig, load_web_config

# Settings a reload cannot change (the socket, the store, the window grid): a restart can.
RESTART_ONLY = ("listen", "state_directory", "database_url", "window", "store_queue_max_rows")


def read_new_configuration(
    config_path: Path, web_config_flag: str | None, running: Config, listen_flag: str | None = None
) -> tuple[Settings, WebConfig]:
    """The configuration file and the web config, both validated, or ConfigError (or
    WebConfigError) listing every problem, a setting only a restart can change included.
    `web_config_flag` (`--web.config.file`) wins over the file's `web_config_file`, and
    `listen_flag` (`--web.listen-address`) over its `listen`."""
    settings = load_config(config_path, listen_flag)
    web_config = load_web_config(web_config_flag or settings.config.web_config_file)
    fixed = [
        key
        for key in RESTART_ONLY
        if getattr(settings.config, key, None) != getattr(running, key, None)
    ]
    if fixed:
        raise ConfigError(
            str(config_path), [f"{key}: changing it takes a restart of spectax" for key in fixed]
        )
    return settings, web_config


@dataclass(frozen=True)
class EndpointChanges:
    """Endpoints by fate: `kept` run on with their state; `stopped` (removed or changed)
    have their open window written first; `changed` ones also start again, from the store."""

    kept: frozenset[str]
    stopped: tuple[str, ...]
    changed: tuple[str, ...]


def endpoint_changes(
    running: Mapping[str, tuple[EndpointConfig, Decimal | None]], settings: Settings
) -> EndpointChanges:
    """Compare what runs (each endpoint's settings and price in force) with `settings`:
    an endpoint is kept only if neither its settings nor its price changed."""
    wanted = {endpoint.name: endpoint for endpoint in settings.config.endpoints}
    kept = frozenset(
        name
        for name, endpoint in wanted.items()
        if name in running and running[name] == (endpoint, settings.usd_per_hour.get(name))
    )
    stopped = tuple(name for name in running if name not in kept)
    return EndpointChanges(kept, stopped, tuple(n for n in stopped if n in wanted))


def sources_changed(running: Config, new: Config) -> bool:
    """Whether the fleet sources differ as written: then the fleet starts again, its
    endpoints resuming from the store (their windows are read whole, so none is lost)."""
    return [s.model_dump() for s in running.sources] != [s.model_dump() for s in new.sources]
