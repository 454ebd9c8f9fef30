"""Schema versions: Alembic migrations shipped in the package, and the check at start-up.

A fresh, empty database is brought to the current schema at start-up. A
database at an older revision is refused with the command that upgrades
it, and one at a revision this spectax does not know (written by a newer
spectax) is refused too: running on a schema the code does not match
would write wrong history silently.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, inspect, text

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"
# The newest revision in migrations/versions (tests/test_history.py checks they agree). The
# daemon compares it with the database's at start-up without loading Alembic, which would
# stay in memory for the life of the process (about 5 MB) for a check that passes.
HEAD_REVISION = "0013"
log = logging.getLogger(__name__)


class SchemaMismatch(RuntimeError):
    """The database schema is not the one this code writes; the message says what to do."""


def _config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def current_revision(connection: Connection) -> str | None:
    """The database's schema revision (Alembic's version table), None when it has none."""
    if not inspect(connection).has_table("alembic_version"):
        return None
    revision = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    return None if revision is None else str(revision)


def upgrade(connection: Connection, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(_config(connection), revision)


def is_empty(connection: Connection) -> bool:
    """Whether the database holds no schema yet (no version, no spectax table)."""
    return current_revision(connection) is None and not inspect(connection).has_table("windows")


# Run by `create_in_child`: the parent's import path, then the URL on stdin (never argv).
_CREATE = """
import asyncio, sys
sys.path[:0] = sys.argv[1:]
from sqlalchemy.ext.asyncio import create_async_engine
from spectax.store import schema

async def create(url):
    engine = create_async_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(schema.upgrade)
    finally:
        await engine.dispose()

asyncio.run(create(sys.stdin.read()))
"""


def create_in_child(url: str) -> bool:
    """Create the schema of an empty database from a child process; False if it failed
    (the caller then creates it itself, and reports any error the database gives).

    Why: Alembic, and the Mako and Pygments it loads, would stay in the daemon's memory
    for its whole life (12 MiB of its 190 at 2,000 endpoints) for a step taken once.
    """
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CREATE, *sys.path],
            input=url,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    if done.returncode != 0:
        log.debug("store: schema not created by a child process (exit %d)", done.returncode)
        return False
    log.info("store: new database, schema created at revision %s", HEAD_REVISION)
    return True


def ensure_current(connection: Connection) -> None:
    """Create the schema in an empty database; refuse one that is older or newer."""
    current = current_revision(connection)
    if current == HEAD_REVISION:
        return
    head = head_revision()
    if current is None:
        if inspect(connection).has_table("windows"):
            raise SchemaMismatch(
                "the database holds spectax tables without a schema version; "
                "it was not created by this spectax (back it up, then start from an empty one)"
            )
        upgrade(connection)
        log.info("store: new database, schema created at revision %s", head)
        return
    from alembic.script import ScriptDirectory

    known = {script.revision for script in ScriptDirectory.from_config(_config()).walk_revisions()}
    if current in known:
        raise SchemaMismatch(
            f"the database schema is at revision {current}, older than this spectax's {head}: "
            "run `spectax db upgrade --config FILE` (back up the database first)"
        )
    raise SchemaMismatch(
        f"the database schema is at revision {current}, which this spectax does not know "
        f"(its newest is {head}): it was written by a newer spectax; upgrade spectax"
    )
