"""Schema versions: Alembic migrations shipped in the package, and the check at start-up.

A fresh, empty database is brought to the current schema at start-up. A
database at an older revision is refused with the command that upgrades
it, and one at a revision this spectax does not know (written by a newer
spectax) is refused too: running on a schema the code does not match
would write wrong history silently.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, inspect, text

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"
# The newest revision in migrations/versions (tests/test_history.py checks they agree). The
# daemon compares it with the database's at start-up without loading Alembic, which would
# stay in memory for the life of the process (about 5 MB) for a check that passes.
HEAD_REVISION = "0008"
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
