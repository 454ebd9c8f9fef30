"""`spectax check-config --config FILE`: validate a configuration (and a web config), not run.

Every problem is listed at once, with its path (see `spectax.config`); a good
file is summarised, endpoint by endpoint and source by source, without ever
showing a credential: only which kinds of them an endpoint sends.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from spectax.config import EndpointConfig, Settings, load_config
from spectax.webconfig import load_web_config

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
    check.set_defaults(func=check_config_command)


def check_config_command(args: argparse.Namespace) -> int:
    if (args.file is None) == (args.config is None):  # the positional is kept for old scripts
        print("spectax check-config: give the file once: --config FILE (or FILE)", file=sys.stderr)
        return 2
    path = args.config or args.file
    settings = load_config(path)
    config = settings.config
    print(f"{path}: OK, {len(config.endpoints)} endpoint(s)")
    if not config.endpoints:
        print(f"warning: {path}: {NO_ENDPOINTS}")
    for endpoint in config.endpoints:
        _print_endpoint(endpoint, settings)
    for spec in settings.billing:  # billing sources; credentials are never shown
        endpoints = ", ".join(dict.fromkeys(r.endpoint for r in spec.config.map)) or "none"
        print(
            f"  billing {spec.name}: {spec.kind}, every {spec.config.interval:g} s,"
            f" endpoints: {endpoints if not spec.is_estimate else 'all priced'}"
        )
    web_config_file = args.web_config_file or config.web_config_file
    if web_config_file:
        web = load_web_config(web_config_file)
        print(
            f"{web_config_file}: OK, {'TLS' if web.ssl else 'plain HTTP'}, "
            f"{len(web.users)} basic auth user(s)"
        )
    return 0


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
