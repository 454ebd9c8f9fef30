"""`spectax db upgrade`: bring the history database to this spectax's schema.

`spectax run` creates the schema in an empty database but refuses an older
one (it says to run this), so that an upgrade of the history is a step the
operator takes on purpose, once, and sees the revision it left in force.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from spectax.config import Settings, load_config
from spectax.store import Store


def add_parser(commands: Any) -> None:
    db = commands.add_parser("db", help="the history database: `spectax db upgrade`")
    db_commands = db.add_subparsers(dest="db_command", title="commands", metavar="COMMAND")
    db.set_defaults(func=lambda args: _usage(db))
    upgrade = db_commands.add_parser("upgrade", help="migrate the database to this schema")
    upgrade.add_argument("--config", type=Path, help="YAML configuration file (storage_url)")
    upgrade.set_defaults(func=upgrade_command)


def _usage(db: argparse.ArgumentParser) -> int:
    """`spectax db` alone: its commands and what each does (argparse's error named only
    `db_command`), exit 2 as for any incomplete command line."""
    db.print_help(sys.stderr)
    return 2


def upgrade_command(args: argparse.Namespace) -> int:
    revision = asyncio.run(upgrade(load_config(args.config)))
    print(f"database schema at revision {revision}")
    return 0


async def upgrade(settings: Settings) -> str:
    """Bring the database to this spectax's schema; returns the revision now in force."""
    from spectax.store.schema import head_revision

    store = await Store.open(settings.config.database_url, migrate=True)
    await store.close()
    return head_revision()
