"""A new database's schema, as Alembic made it once this session, replayed.

Most store tests start from an empty database, and `Store.open` brings it to the current
schema through every migration (thirteen): 0.2 s of CPU on SQLite (Alembic loads the scripts
and reflects each table it batch-alters), 0.1 s and the server's time on PostgreSQL. The
first empty database of each backend is migrated by Alembic as always, and the statements
it sent to the database recorded; later empty databases get those statements replayed,
which leaves the same schema by construction (tables, columns, defaults, indexes,
constraints and version compared on both backends: equal) in 0.07 s. The 87 store tests
of test_store, test_history, test_restart_loss and five more: 31.1 -> 21.5 s of CPU. An upgrade from
an older revision, to another revision than the head, or in a child process (the daemon's
`create_apart`) runs Alembic as before, and so do the tests of the migrations themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Connection, event

from spectax.store import schema

Upgrade = Callable[..., None]


def _reads(statement: str) -> bool:
    """What Alembic asked while it migrated (reflection): nothing to replay."""
    head = statement.lstrip().lower()
    return head.startswith("select") or (head.startswith("pragma") and "=" not in head)


def replaying(real: Upgrade) -> Upgrade:
    """`schema.upgrade`, which on an empty database brought to the head replays what the
    first such upgrade of the same backend sent."""
    recorded: dict[str, list[tuple[str, Any]]] = {}

    def upgrade(connection: Connection, revision: str = "head") -> None:
        backend = connection.dialect.name
        if revision != "head" or not schema.is_empty(connection):
            return real(connection, revision)
        if backend in recorded:
            for statement, parameters in recorded[backend]:
                connection.exec_driver_sql(statement, parameters)
            assert schema.current_revision(connection) == schema.HEAD_REVISION
            return None
        sent: list[tuple[str, Any]] = []

        def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
            if not _reads(statement):
                sent.append((statement, parameters))

        event.listen(connection, "before_cursor_execute", record)
        try:
            real(connection, revision)
        finally:
            event.remove(connection, "before_cursor_execute", record)
        recorded[backend] = sent  # only once Alembic got to the head
        return None

    return upgrade


@contextmanager
def replayed_schema() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(schema, "upgrade", replaying(schema.upgrade))
        yield
