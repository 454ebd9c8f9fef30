"""`spectax run` and `spectax demo`: the daemon, on the configured endpoints or on simulated ones.

Both start the same daemon, so their command lines live together. The demo
itself (the simulated servers and the guide it prints) is `spectax.cli.demo`;
it and the daemon are imported only when they run, since they bring the
simulator and the web server, which every other command does without.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from spectax.config import ConfigError, load_config, validate
from spectax.store.database import IN_MEMORY, in_memory


def add_parser(commands: Any) -> None:
    run = commands.add_parser("run", help="run the daemon on the configured endpoints")
    run.add_argument("--config", type=Path, help="YAML configuration file")
    _add_listen_address(run)
    run.add_argument(
        "--web.config.file",
        dest="web_config_file",
        metavar="FILE",
        help="TLS and basic auth of spectax's own server (Prometheus exporter-toolkit format);"
        " overrides the configuration's web_config_file",
    )
    run.set_defaults(func=run_command)


def add_demo_parser(commands: Any) -> None:
    demo = commands.add_parser(
        "demo", help="a simulated fleet of five engines plus the daemon, on SQLite"
    )
    demo.add_argument("--config", type=Path, help="YAML file for listen, storage, intervals")
    _add_listen_address(demo, "--listen")  # --listen: the demo's flag before 0.x, kept
    demo.add_argument(
        "--history",
        metavar="SPAN",
        help="instead of running: write SPAN (e.g. 30d) of simulated history into the store,"
        " fast, and print the `spectax report` command to run on it",
    )
    demo.set_defaults(func=demo_command)


def _add_listen_address(parser: argparse.ArgumentParser, *aliases: str) -> None:
    parser.add_argument(
        "--web.listen-address",
        *aliases,
        dest="listen_address",
        metavar="HOST:PORT",
        type=_listen_address,
        help="address of spectax's own server (default 127.0.0.1:9837);"
        " overrides the configuration's listen",
    )


def _listen_address(value: str) -> str:
    """The flag checked by the configuration's own `listen` rule, so that a bad one is an
    argparse error naming the flag (exit 2), not a problem of the configuration file."""
    try:
        return validate({"listen": value}, "--web.listen-address").config.listen
    except ConfigError as exc:
        raise argparse.ArgumentTypeError("; ".join(exc.problems)) from None


def run_command(args: argparse.Namespace) -> int:
    settings = load_config(args.config, args.listen_address)
    if not settings.config.endpoints and not settings.config.sources:
        from spectax.cli.check_config import NO_ENDPOINTS

        where = args.config or "the defaults (no --config FILE given)"
        print(f"spectax run: {where}: {NO_ENDPOINTS}", file=sys.stderr)
        return 2
    if in_memory(settings.config.database_url):
        print(f"spectax run: {args.config}: storage_url: {IN_MEMORY}", file=sys.stderr)
        return 2
    from spectax.daemon import Daemon

    daemon = Daemon(settings, args.config, args.web_config_file, args.listen_address)
    return _serve(daemon.run_until_signalled())


def demo_command(args: argparse.Namespace) -> int:
    if args.history:
        from spectax.cli.report import demo_history_main

        return demo_history_main(args)
    from spectax.cli.demo import run_demo
    from spectax.simulate.demo_fleet import DEMO_DEFAULTS

    raw = load_config(args.config).config.model_dump(exclude_none=True) if args.config else {}
    # The live demo's window is half the history demo's minute: a measured speedup needs
    # both sides' windows 80% full, which at 1 min came 53-61 s after start, past the 60 s
    # in which the demo is to show a measured tax (issue 29).
    raw = {**DEMO_DEFAULTS, "window": "30s", **raw} if not args.config else raw
    if args.listen_address:
        raw["listen"] = args.listen_address
    return _serve(run_demo(validate(raw, str(args.config or "<demo>"))))


def _serve(daemon: Coroutine[Any, Any, None]) -> int:
    """Run until signalled; an address that cannot be listened on is one line and exit 2
    (a traceback of ~25 lines before)."""
    from spectax.webserver import ListenError

    try:
        asyncio.run(daemon)
    except ListenError as exc:
        print(f"spectax: {exc}", file=sys.stderr)
        return 2
    return 0
