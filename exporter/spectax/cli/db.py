"""`spectax db upgrade`: bring the history database to this spectax's schema; `spectax db
quarantine list|replay`: the window rows the store refused, and writing them once fixed.

`spectax run` creates the schema in an empty database but refuses an older
one (it says to run this), so that an upgrade of the history is a step the
operator takes on purpose, once, and sees the revision it left in force.
A quarantined row (spectax.store.quarantine) stays out of the history until
an operator, its cause fixed, replays it: never automatically, since the
database refused that very value and would again.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from spectax.config import Settings, load_config
from spectax.store import Store, quarantine


def add_parser(commands: Any) -> None:
    db = commands.add_parser("db", help="the history database: `upgrade`, `quarantine list|replay`")
    db_commands = db.add_subparsers(dest="db_command", title="commands", metavar="COMMAND")
    db.set_defaults(func=lambda args: _usage(db))
    upgrade = db_commands.add_parser("upgrade", help="migrate the database to this schema")
    upgrade.add_argument("--config", type=Path, help="YAML configuration file (storage_url)")
    upgrade.set_defaults(func=upgrade_command)
    quarantine = db_commands.add_parser(
        "quarantine", help="window rows the store refused: `list`, `replay` once fixed"
    )
    quarantine_commands = quarantine.add_subparsers(
        dest="quarantine_command", title="commands", metavar="COMMAND"
    )
    quarantine.set_defaults(func=lambda args: _usage(quarantine))
    for name, what, command in (
        ("list", "each quarantined record: endpoint, windows, why", list_command),
        ("replay", "write them again; those still refused stay, with why", replay_command),
    ):
        sub = quarantine_commands.add_parser(name, help=what)
        sub.add_argument("--config", type=Path, help="YAML configuration file (state_directory)")
        sub.set_defaults(func=command)


def _usage(db: argparse.ArgumentParser) -> int:
    """`spectax db` alone: its commands and what each does (argparse's error named only
    `db_command`), exit 2 as for any incomplete command line."""
    db.print_help(sys.stderr)
    return 2


def upgrade_command(args: argparse.Namespace) -> int:
    revision = asyncio.run(upgrade(load_config(args.config)))
    print(f"database schema at revision {revision}")
    return 0


def list_command(args: argparse.Namespace) -> int:
    path = quarantine_path(load_config(args.config))
    kept = quarantine.records(path)
    print(f"{len(kept)} quarantined record(s) in {path}")
    for number, record in enumerate(kept, 1):
        print(describe(number, record))
    return 0


def replay_command(args: argparse.Namespace) -> int:
    """Exit 0 when every record was written, 1 when some stay (listed, with why)."""
    settings = load_config(args.config)
    path = quarantine_path(settings)
    rows, kept = asyncio.run(replay(settings, path)) if path.exists() else (0, [])
    print(f"replayed {rows} window row(s) from {path}; {len(kept)} record(s) kept there")
    for number, record in enumerate(kept, 1):
        print(describe(number, record))
    if kept:
        print("fix their cause (or the record, e.g. with jq), then replay again")
    return 1 if kept else 0


async def replay(settings: Settings, path: Path) -> tuple[int, list[dict[str, Any]]]:
    store = await Store.open(settings.config.database_url)
    try:
        return await quarantine.replay(path, store)
    finally:
        await store.close()


def quarantine_path(settings: Settings) -> Path:
    """Where the daemon keeps it: beside the spool in the state directory."""
    return Path(settings.config.state_directory) / "quarantine.jsonl"


def describe(number: int, record: dict[str, Any]) -> str:
    """One line per record: what it holds (endpoint, windows) and why it is kept."""
    try:
        write = quarantine.write_of(record)
        starts = sorted({row["start"].isoformat() for row in write.rows if "start" in row})
        held = f"{write.endpoint}: {len(write.rows)} row(s)"
        held += f", window(s) from {starts[0]}" if starts else ", its cursor only"
    except ValueError:
        held = "an unreadable spool line"
    line = f"{number}. {held}; refused: {record.get('reason', '?')}"
    return line + (f"; replay: {record['replay']}" if "replay" in record else "")


async def upgrade(settings: Settings) -> str:
    """Bring the database to this spectax's schema; returns the revision now in force."""
    from spectax.store.schema import head_revision

    store = await Store.open(settings.config.database_url, migrate=True)
    await store.close()
    return head_revision()
