"""Command line: `spectax run | demo | check-config | assess`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import aiohttp

from spectax import __version__, logs
from spectax.billing.prices import PriceTable, PriceTableError
from spectax.cli import db as history
from spectax.cli.assess import AssessError, AssessOptions, assess_pages, to_json, to_text
from spectax.cli.db import parse_time
from spectax.config import ConfigError, Settings, load_config, validate
from spectax.engines.base import ParseError
from spectax.scrape import ScrapeError, fetch, metrics_url
from spectax.store import StoreError
from spectax.store.schema import SchemaMismatch
from spectax.webconfig import WebConfigError, load_web_config

log = logging.getLogger("spectax")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logs.setup(args.log_level, args.log_format)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"spectax: invalid configuration {exc}", file=sys.stderr)
        return 2
    except WebConfigError as exc:
        print(f"spectax: invalid web configuration {exc}", file=sys.stderr)
        return 2
    except SchemaMismatch as exc:
        print(f"spectax: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"spectax: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spectax", description=__doc__)
    parser.add_argument("--version", action="version", version=f"spectax {__version__}")
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    parser.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="json: one object per line (time, level, logger, message, endpoint)",
    )
    commands = parser.add_subparsers(dest="command", required=True)

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
    run.set_defaults(func=_run)

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
    demo.set_defaults(func=_demo)

    db = commands.add_parser("db", help="the history database")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    upgrade = db_commands.add_parser("upgrade", help="migrate the database to this schema")
    upgrade.add_argument("--config", type=Path, help="YAML configuration file (storage_url)")
    upgrade.set_defaults(func=_db_upgrade)

    export = commands.add_parser("export", help="the stored history as CSV or JSON")
    export.add_argument("--config", type=Path, help="YAML configuration file (storage_url)")
    export.add_argument("--since", type=parse_time, help="ISO date or time, UTC by default")
    export.add_argument("--until", type=parse_time, help="ISO date or time (exclusive)")
    export.add_argument("--granularity", choices=["window", "hour", "day"], default="window")
    export.add_argument("--format", choices=["csv", "json"], default="csv")
    export.add_argument("--endpoint", action="append", help="only this endpoint (repeatable)")
    export.set_defaults(func=_export)

    from spectax.cli.report import add_report_parser

    add_report_parser(commands)

    from spectax.cli.billing import add_parser as add_billing_parser

    add_billing_parser(commands, parse_time)  # spectax billing fetch

    check = commands.add_parser("check-config", help="validate a configuration file")
    check.add_argument("file", type=Path)
    check.add_argument(
        "--web.config.file", dest="web_config_file", metavar="FILE", help="validate it too"
    )
    check.set_defaults(func=_check_config)

    assess = commands.add_parser(
        "assess", help="the economics between two saved /metrics pages (files or URLs)"
    )
    assess.add_argument("before", help="first page: a file, or a URL")
    assess.add_argument("after", help="second page: a file, or a URL (the same URL: fetched twice)")
    assess.add_argument(
        "--seconds", type=float, help="time between the pages (default: file mtimes)"
    )
    assess.add_argument("--usd-per-hour", type=float, help="price per GPU-hour")
    assess.add_argument("--gpu", help="GPU name in the price table (with --provider)")
    assess.add_argument("--provider", help="provider in the price table (with --gpu)")
    assess.add_argument("--product", help="product in the price table, when several match")
    assess.add_argument("--gpus", type=int, default=1)
    assess.add_argument("--method", help="ngram | eagle | eagle3 | mtp | medusa | draft_model")
    assess.add_argument("--draft-cost-ratio", type=float, help="c: draft token cost / target token")
    assess.add_argument("--ridge-batch", type=float, default=32.0, help="B* (default 32)")
    assess.add_argument("--concurrency", type=float, help="B (default: mean running requests)")
    assess.add_argument(
        "--control",
        nargs=2,
        metavar=("CBEFORE", "CAFTER"),
        help="the same two pages from a control serving the model without speculation",
    )
    assess.add_argument("--format", choices=["text", "json"], default="text")
    assess.set_defaults(func=_assess)
    return parser


def _db_upgrade(args: argparse.Namespace) -> int:
    revision = asyncio.run(history.upgrade(load_config(args.config)))
    print(f"database schema at revision {revision}")
    return 0


def _export(args: argparse.Namespace) -> int:
    settings = load_config(args.config)
    text = asyncio.run(
        history.export(
            settings, args.granularity, args.since, args.until, args.format, args.endpoint
        )
    )
    sys.stdout.write(text)
    return 0


def _check_config(args: argparse.Namespace) -> int:
    settings = load_config(args.file)
    config = settings.config
    print(f"{args.file}: OK, {len(config.endpoints)} endpoint(s)")
    for endpoint in config.endpoints:
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
    for spec in settings.billing:  # billing sources; credentials are never shown
        endpoints = ", ".join(dict.fromkeys(r.endpoint for r in spec.config.map)) or "none"
        print(
            f"  billing {spec.name}: {spec.kind}, every {spec.config.interval:g} s,"
            f" endpoints: {endpoints if spec.kind != 'price_table' else 'all priced'}"
        )
    web_config_file = args.web_config_file or config.web_config_file
    if web_config_file:
        web = load_web_config(web_config_file)
        print(
            f"{web_config_file}: OK, {'TLS' if web.ssl else 'plain HTTP'}, "
            f"{len(web.users)} basic auth user(s)"
        )
    return 0


def _run(args: argparse.Namespace) -> int:
    settings = load_config(args.config)
    if not settings.config.endpoints:
        log.info("no endpoints configured: watching the built-in simulated vLLM servers")
        return _demo(args)
    from spectax.daemon import Daemon

    daemon = Daemon(settings, args.config, getattr(args, "web_config_file", None))
    asyncio.run(daemon.run_until_signalled())
    return 0


def _demo(args: argparse.Namespace) -> int:
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


def _assess(args: argparse.Namespace) -> int:
    try:
        before, after, seconds = await_pages(args.before, args.after, args.seconds)
        usd_per_hour = args.usd_per_hour
        if usd_per_hour is None and (args.gpu or args.provider):
            if not (args.gpu and args.provider):
                raise AssessError("--gpu and --provider go together")
            price = PriceTable.load().find(args.provider, args.gpu, args.product)
            usd_per_hour = float(price.usd_per_hour)
        options = AssessOptions(
            seconds=seconds,
            usd_per_hour=usd_per_hour,
            gpus=args.gpus,
            method=args.method,
            draft_cost_ratio=args.draft_cost_ratio,
            ridge_batch=args.ridge_batch,
            concurrency=args.concurrency,
        )
        control = None
        if args.control:
            control_pages = await_pages(args.control[0], args.control[1], seconds)
            control = (control_pages[0], control_pages[1])
        assessments = assess_pages(before, after, options, control)
    except (AssessError, PriceTableError, ScrapeError) as exc:
        print(f"spectax assess: {exc}", file=sys.stderr)
        return 1
    except ParseError as exc:
        print(f"spectax assess: malformed /metrics page: {exc}", file=sys.stderr)
        return 1
    print(to_json(assessments) if args.format == "json" else to_text(assessments))
    return 0


def await_pages(before: str, after: str, seconds: float | None) -> tuple[str, str, float | None]:
    return asyncio.run(_read_pages(before, after, seconds))


async def _read_pages(
    before: str, after: str, seconds: float | None
) -> tuple[str, str, float | None]:
    """Files are read as they are; the same URL twice is fetched twice, `--seconds` apart."""
    if _is_url(before) and before == after:
        if seconds is None:
            raise AssessError("give --seconds to fetch the same URL twice, that far apart")
        first = await _fetch(before)
        await asyncio.sleep(seconds)
        return first, await _fetch(after), seconds
    pages = [await _fetch(p) if _is_url(p) else _read_file(p) for p in (before, after)]
    if seconds is None and not _is_url(before) and not _is_url(after):
        elapsed = os.stat(after).st_mtime - os.stat(before).st_mtime
        seconds = elapsed if elapsed > 0 else None
    return pages[0], pages[1], seconds


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def _read_file(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AssessError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise AssessError(f"{path}: not a text /metrics page (not UTF-8)") from None
    except OSError as exc:
        raise AssessError(f"{path}: cannot read: {exc.strerror}") from None


async def _fetch(url: str) -> str:
    async with aiohttp.ClientSession() as session:
        return await fetch(session, metrics_url(url), timeout=10.0, max_bytes=10 * 1024 * 1024)


__all__ = ["Settings", "main"]
