"""`spectax billing fetch`: read each billing source once and print its normalised lines.

For debugging a mapping: every line is shown, with the endpoint it maps to (or
none) and the tags it was matched on, one source after the other. Nothing is
stored. `price_table` lines are the estimate the history's windows hold (read
from the store); the other sources read their providers, as the daemon would.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from spectax import logs
from spectax.billing.prices import estimate_lines
from spectax.billing.registry import SourceSpec
from spectax.billing.types import BillingError, BillingLine, Fetched
from spectax.config import Settings, load_config
from spectax.store import Store
from spectax.units import now_utc, parse_time

COLUMNS = (
    "source",
    "resource",
    "endpoint",
    "start",
    "end",
    "amount",
    "currency",
    "final",
    "fetched_at",
    "tags",
)


def add_parser(commands: Any) -> None:
    """`spectax billing fetch` on the CLI's subcommands."""
    billing = commands.add_parser("billing", help="billing sources: what they say")
    billing_commands = billing.add_subparsers(dest="billing_command", required=True)
    fetch = billing_commands.add_parser(
        "fetch", help="read each billing source once and print its normalised lines"
    )
    fetch.add_argument("--config", type=str, required=True, help="YAML configuration file")
    fetch.add_argument("--since", type=parse_time, help="ISO date or time (default: 1 day ago)")
    fetch.add_argument("--until", type=parse_time, help="ISO date or time (default: now)")
    fetch.add_argument(
        "--format", choices=["json", "csv"], default="json", help="output (default json)"
    )
    fetch.add_argument("--source", action="append", help="only this source, by name (repeatable)")
    fetch.set_defaults(func=fetch_command)


def fetch_command(args: argparse.Namespace) -> int:
    settings = load_config(args.config)
    until = args.until or now_utc()
    since = args.since or until - timedelta(days=1)
    if since >= until:
        print("spectax billing fetch: --since must be before --until", file=sys.stderr)
        return 2
    specs = [s for s in settings.billing if not args.source or s.name in args.source]
    unknown = sorted(set(args.source or ()) - {s.name for s in settings.billing})
    if unknown:
        print(f"spectax billing fetch: no source named {', '.join(unknown)}", file=sys.stderr)
        return 2
    writer = _Writer(args.format)
    failed = asyncio.run(fetch_all(settings, specs, since, until, writer))
    writer.close()
    return 1 if failed else 0


async def fetch_all(
    settings: Settings,
    specs: Sequence[SourceSpec],
    since: datetime,
    until: datetime,
    writer: _Writer,
) -> int:
    """Read the sources one at a time, printing each one's lines; returns failures."""
    failed = 0
    store: Store | None = None
    try:
        for spec in specs:
            started = time.monotonic()
            try:
                if not spec.is_estimate:
                    read = _read(spec, since, until)
                else:
                    if store is None:
                        store = await Store.open(settings.config.database_url)
                    read = _estimate(spec, store, since, until)
                fetched = await asyncio.wait_for(read, spec.config.timeout)
            except TimeoutError:
                failed += 1
                _problem(spec, f"no answer within its timeout of {spec.config.timeout:g} s")
                continue
            except Exception as exc:
                failed += 1
                message = str(exc) if isinstance(exc, BillingError) else _describe(exc)
                if "attempt(s)" not in message:  # the retry loop did not say it already
                    message += f" (after {time.monotonic() - started:.1f} s)"
                _problem(spec, message)
                continue
            writer.write(fetched.lines)
            mapped = sum(1 for line in fetched.lines if line.endpoint is not None)
            print(
                f"spectax billing fetch: {spec.name}: {len(fetched.lines)} line(s), "
                f"{mapped} mapped to an endpoint, {len(fetched.periods)} period(s) covered",
                file=sys.stderr,
            )
    finally:
        if store is not None:
            await store.close()
    return failed


async def _read(spec: SourceSpec, since: datetime, until: datetime) -> Fetched:
    """One read of the source's provider, as the daemon would make it."""
    source = spec.build()
    try:
        return await source.fetch(since, until)
    finally:
        await source.close()


async def _estimate(spec: SourceSpec, store: Store, since: datetime, until: datetime) -> Fetched:
    """`price_table`: the estimate the history's windows hold, per endpoint and hour."""
    fetched_at = now_utc()
    hourly = await store.estimated_spend_by_hour(since, until)
    return Fetched(estimate_lines(spec.name, hourly, fetched_at), [])


def _describe(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:300]


def _problem(spec: SourceSpec, message: str) -> None:
    """Which source, which host, what happened and what to check; never a credential."""
    where = _host(spec)
    print(
        f"spectax billing fetch: {spec.name}: {logs.blank_secrets(message)}"
        f" [source {spec.name}, type {spec.kind}{', ' + where if where else ''}]."
        f" Check {_advice(spec, where, 'timeout' in message)}",
        file=sys.stderr,
    )


def _host(spec: SourceSpec) -> str:
    """The host the source reads (its `url`, `base_url`, `endpoint_url` or AWS region)."""
    config = spec.config
    for key in ("url", "base_url", "endpoint_url"):
        value = getattr(config, key, None)
        if isinstance(value, str) and value:
            return f"host {urlsplit(value).hostname or value}"
    if spec.kind == "aws_cost_explorer":
        return f"AWS Cost Explorer in {getattr(config, 'region', 'us-east-1')}"
    return ""


def _advice(spec: SourceSpec, where: str, timed_out: bool) -> str:
    if spec.is_estimate:
        return "the configuration's storage_url."
    if not where:
        return f"the source's settings under billing: (name {spec.name})."
    advice = (
        f"that {where.removeprefix('host ')} resolves and answers from this machine"
        " (DNS, proxy, firewall), and the source's URL and credentials in the configuration"
    )
    if timed_out:  # the read's deadline cut the retries short, not their number
        advice += f"; a larger `timeout` (now {spec.config.timeout:g} s) allows more retries"
    return advice + "."


def as_record(line: BillingLine) -> dict[str, Any]:
    return {
        "source": line.source,
        "resource": line.resource,
        "endpoint": line.endpoint,
        "start": line.start.isoformat(),
        "end": line.end.isoformat(),
        "amount": str(line.amount),
        "currency": line.currency,
        "final": line.final,
        "fetched_at": line.fetched_at.isoformat(),
        "tags": dict(line.tags),
    }


class _Writer:
    """JSON: one array of every source's lines; CSV: one header, then the rows."""

    def __init__(self, output_format: str):
        self.format = output_format
        self.records: list[dict[str, Any]] = []
        self._csv: Any = None

    def write(self, lines: Sequence[BillingLine]) -> None:
        records = [as_record(line) for line in lines]
        if self.format == "json":
            self.records += records
            return
        if self._csv is None:
            self._csv = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
            self._csv.writeheader()
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
        for record in records:
            writer.writerow(
                {
                    **record,
                    "endpoint": record["endpoint"] or "",
                    "final": "true" if record["final"] else "false",
                    "tags": json.dumps(record["tags"], sort_keys=True),
                }
            )
        sys.stdout.write(buffer.getvalue())
        sys.stdout.flush()

    def close(self) -> None:
        if self.format == "json":
            sys.stdout.write(json.dumps(self.records, indent=1) + "\n")
        elif self._csv is None:
            csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n").writeheader()
        sys.stdout.flush()
