"""`spectax run` and `spectax demo`: the daemon, on the configured endpoints or on simulated ones.

Both start the same daemon, and `run` with no endpoints configured is the
demo, so their command lines live together. The demo itself (the simulated
servers and the guide it prints) is `spectax.cli.demo`; it and the daemon are
imported only when they run, since they bring the simulator and the web
server, which every other command does without.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path
from typing import Any

from spectax.config import load_config, validate

log = logging.getLogger("spectax")


def add_parser(commands: Any) -> None:
    run = commands.add_parser(
        "run", help="run the daemon (with no endpoints configured: on simulated vLLM servers)"
    )
    run.add_argument("--config", type=Path, help="YAML configuration file")
    run.add_argument(
        "--web.config.file",
        dest="web_config_file",
        metavar="FILE",
        help="TLS and basic auth of spectax's own server (Prometheus exporter-toolkit format);"
        " overrides the configuration's web_config_file",
    )
    run.set_defaults(func=run_command)


def add_demo_parser(commands: Any) -> None:
    demo = commands.add_parser("demo", help="simulated vLLM servers plus the daemon, on SQLite")
    demo.add_argument("--config", type=Path, help="YAML file for listen, storage, intervals")
    demo.add_argument(
        "--listen", help="HOST:PORT for spectax's own server (default 127.0.0.1:9837)"
    )
    demo.add_argument(
        "--history",
        metavar="SPAN",
        help="instead of running: write SPAN (e.g. 30d) of simulated history into the store,"
        " fast, and print the `spectax report` command to run on it",
    )
    demo.set_defaults(func=demo_command)


def run_command(args: argparse.Namespace) -> int:
    settings = load_config(args.config)
    if not settings.config.endpoints:
        log.info("no endpoints configured: watching the built-in simulated vLLM servers")
        return demo_command(args)
    from spectax.daemon import Daemon

    daemon = Daemon(settings, args.config, getattr(args, "web_config_file", None))
    asyncio.run(daemon.run_until_signalled())
    return 0


def demo_command(args: argparse.Namespace) -> int:
    """`spectax demo` (and `spectax run` without endpoints, whose arguments lack the demo's)."""
    if getattr(args, "history", None):
        from spectax.cli.report import demo_history_main

        return demo_history_main(args)
    from spectax.cli.demo import run_demo
    from spectax.simulate.fleet import DEMO_DEFAULTS

    raw = load_config(args.config).config.model_dump(exclude_none=True) if args.config else {}
    raw = {**DEMO_DEFAULTS, **raw} if not args.config else raw
    if getattr(args, "listen", None):
        raw["listen"] = args.listen
    asyncio.run(run_demo(validate(raw, str(args.config or "<demo>"))))
    return 0
