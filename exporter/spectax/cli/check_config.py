"""`spectax check-config --config FILE`: validate a configuration (and a web config), not run.

Every problem is listed at once, with its path (see `spectax.config`), and the
web config's problems beside the configuration's in the same run: fixing one
file only to be told about the other was a second pass (issue 17). A good file
is summarised, endpoint by endpoint and source by source, without ever showing
a credential: only which kinds of them an endpoint sends. `--probe` fetches
each target once, as `run` would, and says what it serves.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from spectax import logs, yamlfile
from spectax.config import ConfigError, Settings, load_config
from spectax.endpoint_config import EndpointConfig
from spectax.engines import get_parser
from spectax.engines.base import ParseError
from spectax.health import ScrapeError
from spectax.scrape import fetch, metrics_url, redact, scrape_session
from spectax.store import database
from spectax.tariffs import pricing_of
from spectax.webconfig import WebConfigError, load_web_config

# Valid but useless to `spectax run`, which refuses it: scraping nothing, it would serve no
# gauge, and before it quietly served the simulated servers' into a real Prometheus.
NO_ENDPOINTS = (
    "no endpoints: list them under `endpoints:` (`spectax run` refuses a configuration"
    " without any; the simulated servers are `spectax demo`'s)"
)


def add_parser(commands: Any) -> None:
    check = commands.add_parser("check-config", help="validate a configuration file")
    check.add_argument(
        "file", type=Path, nargs="?", help="the configuration file (or --config FILE)"
    )
    check.add_argument(
        "--config", type=Path, help="YAML configuration file, as for every other command"
    )
    check.add_argument(
        "--web.config.file", dest="web_config_file", metavar="FILE", help="validate it too"
    )
    check.add_argument(
        "--probe",
        action="store_true",
        help="fetch each endpoint once: engine detected, speculation, K seen, or the error",
    )
    check.set_defaults(func=check_config_command)


def check_config_command(args: argparse.Namespace) -> int:
    if (args.file is None) == (args.config is None):  # the positional is kept for old scripts
        print("spectax check-config: give the file once: --config FILE (or FILE)", file=sys.stderr)
        return 2
    path: Path = args.config or args.file
    settings: Settings | None = None
    failed = False
    try:
        settings = load_config(path)
    except ConfigError as exc:
        print(f"spectax: invalid configuration {exc}", file=sys.stderr)
        failed = True
    web_config_file = args.web_config_file or (
        settings.config.web_config_file if settings else _web_config_key(path)
    )
    if web_config_file:
        try:
            web = load_web_config(web_config_file)
        except WebConfigError as exc:
            print(f"spectax: invalid web configuration {exc}", file=sys.stderr)
            failed = True
        else:
            print(
                f"{web_config_file}: OK, {'TLS' if web.ssl else 'plain HTTP'}, "
                f"{len(web.users)} basic auth user(s)"
            )
    if settings is None or failed:
        return 2
    _summarise(path, settings)
    if problem := database.sqlite_directory_problem(settings.config.database_url):
        print(f"spectax: invalid configuration {path}: storage_url: {problem}", file=sys.stderr)
        return 2
    if args.probe:
        return 1 if asyncio.run(probe(settings)) else 0
    return 0


def _web_config_key(path: Path) -> str | None:
    """The `web_config_file` of a configuration that did not validate, if it names one."""
    try:
        raw, _ = yamlfile.load(path.read_text(encoding="utf-8"))  # duplicates: said above
    except (OSError, yaml.YAMLError):
        return None
    value = raw.get("web_config_file") if isinstance(raw, dict) else None
    return value if isinstance(value, str) else None


def _summarise(path: Path, settings: Settings) -> None:
    config = settings.config
    print(f"{path}: OK, {len(config.endpoints)} endpoint(s)")
    fleets: list[tuple[str, bool]] = []  # (what a source's endpoints are called, priced)
    for source in config.sources:  # fleet mode: its endpoints are found at run time
        labels = ", ".join(source.endpoint_labels)
        endpoint = source.endpoint_config("endpoint")  # what every endpoint found gets
        price = pricing_of(endpoint, settings.prices).usd_per_hour
        shown = f"{price} USD/GPU-hour x {endpoint.gpus}" if price is not None else "no price"
        print(
            f"  source {redact(source.url)}: an endpoint per {labels} of {{{source.selector}}},"
            f" each {shown}"
        )
        fleets.append((f"every endpoint of {redact(source.url)}", price is not None))
    if not config.endpoints and not config.sources:
        print(f"warning: {path}: {NO_ENDPOINTS}")
    if database.in_memory(config.database_url):
        print(f"warning: {path}: storage_url: `spectax run` refuses it: {database.IN_MEMORY}")
    for endpoint in config.endpoints:
        _print_endpoint(endpoint, settings)
    names = [e.name for e in config.endpoints]
    priced = [n for n in names if n in settings.usd_per_hour]
    priced += [fleet for fleet, has_price in fleets if has_price]
    unpriced = [n for n in names if n not in settings.usd_per_hour]
    unpriced += [fleet for fleet, has_price in fleets if not has_price]
    for spec in settings.billing:  # billing sources; credentials are never shown
        if spec.is_estimate:
            shown = ", ".join(priced) or "none (no endpoint has a price)"
            if unpriced:
                shown += f"; not priced, so no money figures: {', '.join(unpriced)}"
        else:
            shown = ", ".join(dict.fromkeys(r.endpoint for r in spec.config.map)) or "none"
        print(
            f"  billing {spec.name}: {spec.kind}, every {spec.config.interval:g} s,"
            f" endpoints: {shown}"
        )


def _print_endpoint(endpoint: EndpointConfig, settings: Settings) -> None:
    price = settings.usd_per_hour.get(endpoint.name)
    shown = f"{price} USD/GPU-hour x {endpoint.gpus}" if price is not None else "no price"
    method = endpoint.speculation.method if endpoint.speculation else "no speculation"
    print(f"  {endpoint.name}: {endpoint.engine}, {method}, {endpoint.billing_mode}, {shown}")
    auth = [
        kind
        for kind, given in (
            ("bearer token", endpoint.bearer_token or endpoint.bearer_token_file),
            ("basic auth", endpoint.basic_auth),
            ("TLS settings", endpoint.tls),
        )
        if given
    ]
    if auth:
        print(f"    sends: {', '.join(auth)} (values not shown)")
    secret = [kind for kind in auth if kind != "TLS settings"]
    if secret and urlsplit(endpoint.url).scheme == "http":
        print(
            f"warning: endpoint {endpoint.name}: sends its {' and '.join(secret)} over plain"
            " http: anyone on the path reads it; use an https:// url (`tls:` for its CA)"
        )


async def probe(settings: Settings) -> int:
    """Fetch every endpoint once, concurrently, as `run` would; print one report each and
    return how many failed. One that hangs costs its `scrape_timeout`, not the others'."""
    config = settings.config
    async with scrape_session() as session:
        reports = await asyncio.gather(
            *(_probe_one(session, e, settings) for e in config.endpoints)
        )
    stored = await _probe_store(config.database_url)
    print("probe:")
    for line, _ in [*reports, stored]:
        print(f"  {logs.blank_secrets(line)}")
    return sum(1 for _, ok in [*reports, stored] if not ok)


async def _probe_store(url: str) -> tuple[str, bool]:
    """Connect to the store once, as `run` would, changing nothing: a database or role that
    does not exist made `run` retry forever."""
    try:
        return f"storage_url: {await database.probe(url)}", True
    except database.StoreError as exc:
        return f"storage_url: FAILED: {exc}", False


async def _probe_one(
    session: Any, endpoint: EndpointConfig, settings: Settings
) -> tuple[str, bool]:
    config = settings.config
    try:
        text = await fetch(
            session,
            metrics_url(endpoint.url, endpoint.engine),
            timeout=config.scrape_timeout,
            max_bytes=config.max_body_bytes,
            auth=settings.target_auth.get(endpoint.name),
        )
        sample = get_parser(endpoint.engine)(text)
    except ScrapeError as exc:
        return f"{endpoint.name}: FAILED ({exc.reason}): {exc}", False
    except ParseError as exc:
        return f"{endpoint.name}: FAILED (parse): not a {endpoint.engine} page: {exc}", False
    if not sample.has_engine_metrics:
        return (
            f"{endpoint.name}: answers, but no {endpoint.engine} families on the page"
            " (started with --disable-log-stats?): no figures until they appear",
            True,
        )
    parts = []
    for model, m in sorted(sample.models.items()):
        if not m.speculating:
            parts.append(f"{model}: speculation off")
        elif m.accepted_per_position:
            parts.append(f"{model}: speculation on, K seen {len(m.accepted_per_position)}")
        else:
            parts.append(f"{model}: speculation on, K not seen yet (nothing drafted)")
    configured = endpoint.speculation is not None
    if configured != any(m.speculating for m in sample.models.values()):
        parts.append(
            "the configuration says "
            + ("speculation is on" if configured else "no speculation")
            + ": check the endpoint's speculation key"
        )
    return f"{endpoint.name}: {endpoint.engine} detected; " + "; ".join(parts), True
