"""`spectax check-config FILE`: validate a configuration (and a web config) without running.

Every problem is listed at once, with its path (see `spectax.config`); a good
file is summarised, endpoint by endpoint and source by source, without ever
showing a credential: only which kinds of them an endpoint sends.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from spectax.config import EndpointConfig, Settings, load_config
from spectax.webconfig import load_web_config


def add_parser(commands: Any) -> None:
    check = commands.add_parser("check-config", help="validate a configuration file")
    check.add_argument("file", type=Path)
    check.add_argument(
        "--web.config.file", dest="web_config_file", metavar="FILE", help="validate it too"
    )
    check.set_defaults(func=check_config_command)


def check_config_command(args: argparse.Namespace) -> int:
    settings = load_config(args.file)
    config = settings.config
    print(f"{args.file}: OK, {len(config.endpoints)} endpoint(s)")
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
