"""The schema the tests' empty databases get replayed (tests/fresh_schema.py) is the one
Alembic's migrations make: otherwise every store test would test another schema."""

from __future__ import annotations

from typing import Any

import pytest
from alembic import command
from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import create_async_engine

from spectax.store import Store
from spectax.store.schema import _config

SQLITE = [
    "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY 2"
]
POSTGRESQL = [
    "SELECT table_name, column_name, data_type, column_default, is_nullable"
    " FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, 2",
    "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 2",
    "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
    " WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2",
]


async def described(url: str) -> list[Any]:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as connection:
            queries = SQLITE if url.startswith("sqlite") else POSTGRESQL
            rows = [
                tuple(r)
                for q in [*queries, "SELECT * FROM alembic_version"]
                for r in (await connection.execute(text(q))).all()
            ]
    finally:
        await engine.dispose()
    return rows


def another(database_url: str, request: pytest.FixtureRequest, name: str) -> str:
    if database_url.startswith("sqlite"):
        return database_url.replace("history.sqlite", f"{name}.sqlite")
    return str(request.getfixturevalue("pg_server").database())


async def test_an_empty_databases_replayed_schema_is_the_one_alembic_makes(
    database_url: str, request: pytest.FixtureRequest
) -> None:
    second = another(database_url, request, "second")
    for url in (database_url, second):
        store = await Store.open(url)  # the first of the session records, the next replays
        await store.close()
    migrated = another(database_url, request, "migrated")
    engine = create_async_engine(migrated)
    try:
        async with engine.begin() as connection:

            def upgrade(sync: Connection) -> None:
                command.upgrade(_config(sync), "head")

            await connection.run_sync(upgrade)
    finally:
        await engine.dispose()
    replayed = await described(second)
    assert len(replayed) > 10  # the tables, indexes and version: not two empty lists
    assert replayed == await described(migrated)
