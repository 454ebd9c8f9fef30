"""The connection to the database: opening it, the dialects, the upsert statements, and the
one error the store raises. The storage URL picks the backend; the statements are the same."""

from __future__ import annotations

import asyncio
import importlib
import operator
import os
import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self
from urllib.parse import unquote, urlsplit

from sqlalchemy import ColumnElement, literal_column, text
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.engine import URL, Dialect, make_url
from sqlalchemy.exc import ArgumentError, DataError, IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    async_sessionmaker,
    create_async_engine,
)

from spectax.store import schema
from spectax.store.models import RollupDue, Sums

#: What a failing database operation raises besides StoreError (the network, the disk).
DATABASE_ERRORS = (SQLAlchemyError, OSError)
#: What a write raises when a value of the rows cannot be stored: the sqlite3 driver's
#: OverflowError (an integer of 2**63 or more) besides the database errors.
WRITE_ERRORS = (*DATABASE_ERRORS, OverflowError)
# SQLSTATE classes of errors caused by the data, not the database: 22 data exception
# (22003 numeric value out of range, 22001 string too long), 23 integrity (NOT NULL).
_DATA_SQLSTATE_CLASSES = ("22", "23")


class StoreError(RuntimeError):
    """The database could not be reached or refused a write. The message never holds the URL."""


class StoreUnusable(StoreError):
    """The store cannot work as the URL says (no such database or role, a password refused,
    a SQLite directory that cannot be made): waiting changes nothing, so `run` exits saying
    what to fix instead of retrying forever."""


#: SQLSTATEs of a connection refused for what the URL says, and what to do about each.
UNUSABLE_SQLSTATES = {
    "3D000": "create that database (createdb NAME) or correct its name in storage_url",
    "28000": "create that role, allow it in pg_hba.conf, or correct the user in storage_url",
    "28P01": "correct the password in storage_url (percent-encoded)",
}
#: Why `spectax run` refuses SQLite in memory (check-config warns of it).
IN_MEMORY = (
    "SQLite in memory keeps no history past a stop (every restart starts from nothing, and"
    " nothing is left to report on): give a file, e.g. sqlite+aiosqlite:////var/lib/spectax"
    "/spectax.sqlite"
)


#: The drivers spectax ships: `postgresql://` and `sqlite://` without one (libpq and
#: hosting providers' form) mean these, since the store is async and has no other.
DRIVERS = {
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "sqlite": "sqlite+aiosqlite",
}
EXAMPLES = "sqlite+aiosqlite:///PATH or postgresql+asyncpg://USER:PASSWORD@HOST:5432/DATABASE"
#: asyncpg's `ssl` modes (asyncpg.connect: the same names as libpq's `sslmode`).
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
#: libpq keys asyncpg cannot take in the URL; it reads the same file from the environment.
LIBPQ_FILES = {"sslrootcert": "PGSSLROOTCERT", "sslcert": "PGSSLCERT", "sslkey": "PGSSLKEY"}
#: What else SQLAlchemy passes through to asyncpg.connect as a string unharmed.
ASYNCPG_KEYS = ("ssl", "target_session_attrs", "passfile", "prepared_statement_cache_size")


def database_url(text: str) -> str:
    """The storage URL as the store's drivers take it, or ValueError saying what to write.

    `run` would otherwise die on it with a raw driver error (NoSuchModuleError, a TypeError
    from asyncpg on libpq's `sslmode`) long after `check-config` said OK. A message never
    holds the URL: it may hold a password.
    """
    try:
        url = make_url(text)
    except ArgumentError:
        raise ValueError(f"not a database URL: write {EXAMPLES}") from None
    except ValueError:  # int(port)
        raise ValueError(
            "the port is not a number: write HOST:PORT, e.g. db.example.com:5432"
            " (percent-encode any / ? # @ : in the password, e.g. @ as %40)"
        ) from None
    driver = DRIVERS.get(url.drivername, url.drivername)
    backend = driver.partition("+")[0]
    if driver not in DRIVERS.values():
        known = backend in ("postgresql", "sqlite")
        raise ValueError(
            f"spectax stores history with {DRIVERS[backend]}, not {driver!r}: write "
            f"{DRIVERS[backend]}://..."
            if known
            else f"unsupported database {backend!r}: write {EXAMPLES}"
        )
    if url.port is not None and not 0 < url.port < 65536:
        raise ValueError(f"port {url.port} is out of range 1-65535")
    if backend == "sqlite":  # only the scheme: rendering would percent-encode `:memory:`
        if url.host or url.username or url.port or not url.database:
            raise ValueError(
                "a SQLite URL is the scheme, three slashes and the file's path:"
                " sqlite+aiosqlite:///RELATIVE/PATH or sqlite+aiosqlite:////ABSOLUTE/PATH"
            )
        return f"{driver}:{text.split(':', 1)[1]}"
    _read_alike(text, url)
    if not url.database:
        raise ValueError(
            "no database name: end the URL with /DATABASE (without one PostgreSQL picks the"
            " database named after the user, often `postgres`, and the tables went there)"
        )
    taken = _asyncpg_query(url.set(drivername=driver))
    return text if taken == url else taken.render_as_string(hide_password=False)


def _read_alike(text: str, url: URL) -> None:
    """ValueError when the URL's user, password, host or port read otherwise by the standard
    (RFC 3986) than by SQLAlchemy: an unencoded @ / ? or # in the password. SQLAlchemy ends
    the password at the first @, so `p@ss@db` reached the host `ss@db`, retried forever."""
    try:
        split = urlsplit(text)
        alike = (
            (split.hostname or "") == (url.host or "").lower()
            and split.port == url.port
            and unquote(split.password or "") == (url.password or "")
        )
    except ValueError:  # the standard's port is not a number: it split the password
        alike = False
    if not alike:
        raise ValueError(
            "the user or password holds an unencoded @, /, ? or #: percent-encode each"
            " (@ as %40, / as %2F, ? as %3F, # as %23)"
        )


def in_memory(url: str) -> bool:
    """Whether `url` (as `database_url` returns it) is SQLite in memory."""
    return url.startswith("sqlite") and not _shared(url)


def sqlite_directory_problem(url: str) -> str | None:
    """Why the SQLite file of `url` could not be created, found without creating anything
    (check-config), or None: its directory's nearest existing ancestor must be a directory
    this process may write."""
    path = _sqlite_path(url)
    if path is None:
        return None
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"cannot create the directory {path.parent}: {ancestor} is not a directory"
    if not (path.exists() or os.access(ancestor, os.W_OK | os.X_OK)):
        return f"cannot create {path}: {ancestor} is not writable by this user"
    return None


# The oldest SQLite the store's queries run on: a restart ranks each endpoint's windows with
# window functions (row_number() OVER, SQLite 3.25, 2018).
SQLITE_AT_LEAST = (3, 25, 0)


def sqlite_version_problem() -> str | None:
    """What is wrong with the SQLite library this Python links, if it is too old."""
    if sqlite3.sqlite_version_info >= SQLITE_AT_LEAST:
        return None
    wanted = ".".join(map(str, SQLITE_AT_LEAST))
    return (
        f"this Python links SQLite {sqlite3.sqlite_version}; spectax needs {wanted} or later"
        " (window functions): use a newer Python build or system, or PostgreSQL"
    )


async def probe(url: str) -> str:
    """Connect to the store of `url` (as `database_url` returns it) and disconnect, changing
    nothing (check-config --probe): what it is, or StoreError (StoreUnusable: the URL must
    change) saying what is wrong."""
    if url.startswith("sqlite"):
        if problem := sqlite_version_problem() or sqlite_directory_problem(url):
            raise StoreUnusable(problem)
        return "SQLite in memory" if in_memory(url) else f"SQLite file {_sqlite_path(url)}"
    engine = create_async_engine(url)
    try:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
    except DATABASE_ERRORS as exc:
        raise _open_error(url, exc) from None
    finally:
        await engine.dispose()
    return f"PostgreSQL database {make_url(url).database!r} answers"


def _open_error(url: str, exc: BaseException) -> StoreError:
    """A failure to connect as a StoreError; StoreUnusable when the server refused what
    the URL names (UNUSABLE_SQLSTATES), which no retry can change."""
    original = getattr(exc, "orig", None)
    sqlstate = getattr(original, "sqlstate", None)
    where = f"cannot open the store ({_backend(url)})"
    if sqlstate in UNUSABLE_SQLSTATES:  # the server's own words: `database "x" does not exist`
        said = (str(original).splitlines() or [sqlstate])[0][:200]
        return StoreUnusable(f"{where}: {said}: {UNUSABLE_SQLSTATES[sqlstate]}")
    return StoreError(f"{where}: {reason(exc)}")


def _sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (as `database_url` returns it); None: in memory, not SQLite."""
    if not url.startswith("sqlite") or in_memory(url) or ":///" not in url:
        return None
    return Path(url.split(":///", 1)[1].split("?", 1)[0])


def _asyncpg_query(url: URL) -> URL:
    """libpq's query keys (`?sslmode=require`, as users paste them) in asyncpg's terms."""
    query = dict(url.query)
    if "sslmode" in query:
        if "ssl" in query:
            raise ValueError("give ?ssl= or libpq's ?sslmode=, not both")
        query["ssl"] = query.pop("sslmode")
    for key, value in query.items():
        if key in LIBPQ_FILES:
            raise ValueError(
                f"?{key}= is not read by asyncpg: remove it and set {LIBPQ_FILES[key]}=FILE"
                " in spectax's environment instead"
            )
        if key not in ASYNCPG_KEYS:
            raise ValueError(f"?{key}= is not a connection setting asyncpg takes: remove it")
        if key == "ssl" and value not in SSL_MODES:
            raise ValueError(f"?sslmode= (or ?ssl=) must be one of {', '.join(SSL_MODES)}")
    return url.set(query=query)


class StoreDataError(StoreError):
    """The database refused a write because of the values it holds (out of range, too long):
    retrying the same rows fails forever, so they must be set aside, not retried."""


def is_data_error(exc: BaseException) -> bool:
    """True when `exc` (raised by a write) comes from the rows' values, not from an outage:
    by class on SQLite (OverflowError, DataError, IntegrityError), by SQLSTATE on PostgreSQL
    (asyncpg's errors reach SQLAlchemy as a generic DBAPIError)."""
    if isinstance(exc, (OverflowError, DataError, IntegrityError)):
        return True
    sqlstate = getattr(getattr(exc, "orig", None), "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate[:2] in _DATA_SQLSTATE_CLASSES


class Database:
    """An engine and its sessions; each room of the store (windows, rollups, billing) adds
    its reads and writes to this base, and `spectax.store.Store` is all of them at once."""

    def __init__(self, engine: AsyncEngine):
        self._engine = engine
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)
        # Run first in each window write's transaction; raises when this process may not
        # write (spectax.store.leader.AdvisoryLock.fence). None: one process, no check.
        self.write_guard: Callable[[AsyncConnection], Awaitable[None]] | None = None

    @classmethod
    async def open(cls, url: str, migrate: bool = False, create_apart: bool = False) -> Self:
        """Connect and check the schema: an empty database gets the current one.

        With `migrate`, an older schema is upgraded (`spectax db upgrade`);
        otherwise it raises SchemaMismatch saying what to run. With `create_apart` (the
        daemon, which lives long), an empty database's schema is created by a child process.
        """
        try:
            url = database_url(url)
        except ValueError as exc:
            raise StoreUnusable(f"storage_url: {exc}") from None
        if url.startswith("sqlite") and (problem := sqlite_version_problem()):
            raise StoreUnusable(f"storage_url: {problem}")
        if (path := _sqlite_path(url)) is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # a traceback at `run` before
                raise StoreUnusable(
                    f"storage_url: cannot create the directory {path.parent} for the SQLite"
                    f" file: {exc.strerror or type(exc).__name__}"
                ) from None
        engine = create_async_engine(url, pool_pre_ping=True)
        try:
            if create_apart and not migrate and _shared(url):
                async with engine.begin() as conn:
                    empty = await conn.run_sync(schema.is_empty)
                if empty:
                    await asyncio.to_thread(schema.create_in_child, url)
            async with engine.begin() as conn:
                await conn.run_sync(schema.upgrade if migrate else schema.ensure_current)
        except DATABASE_ERRORS as exc:
            await engine.dispose()
            raise _open_error(url, exc) from None
        except schema.SchemaMismatch:
            await engine.dispose()
            raise
        return cls(engine)

    @property
    def backend(self) -> str:
        return self._engine.dialect.name

    async def close(self) -> None:
        await self._engine.dispose()

    async def dedicated_connection(self) -> AsyncConnection:
        """A connection kept out of the pool's rotation, in autocommit: what holds a session's
        advisory lock (spectax.store.leader) for as long as the session lives."""
        connection = await self._engine.connect()
        return await connection.execution_options(isolation_level="AUTOCOMMIT")

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite file, or None (PostgreSQL, or SQLite in memory)."""
        database = self._engine.url.database
        if self.backend != "sqlite" or not database or database == ":memory:":
            return None
        return Path(database)

    @property
    def _insert(self) -> Any:
        """The dialect's INSERT, the one that has ON CONFLICT: its module is the engine's
        dialect's, already loaded (importing both dialects cost a SQLite daemon 2.3 MB)."""
        dialect = self._engine.dialect.name
        if dialect in ("postgresql", "sqlite"):
            return importlib.import_module(f"sqlalchemy.dialects.{dialect}").insert
        raise StoreError(
            f"unsupported database {dialect!r}: use sqlite+aiosqlite or postgresql+asyncpg"
        )


def upsert_statement(
    insert: Any, table: type[Sums], only_if: ColumnElement[bool] | None = None
) -> Any:
    """INSERT ... ON CONFLICT (endpoint, model, start) DO UPDATE every other column,
    executed with a list of rows (executemany: no bound-parameter limit)."""
    statement = insert(table)
    key = ("id", "endpoint", "model", "start")
    updatable = [c.name for c in sa_inspect(table).columns if c.name not in key]
    return statement.on_conflict_do_update(
        index_elements=["endpoint", "model", "start"],
        set_={name: statement.excluded[name] for name in updatable},
        where=only_if,
    )


class DriverStatement:
    """A statement compiled once for a dialect, executed through the driver (`execute`:
    `exec_driver_sql`, executemany) with its rows as tuples, each value bound as SQLAlchemy
    binds it (the compiled statement's own bind processors): the same SQL and the same
    values as `connection.execute(statement, rows)`, without compiling the statement's
    cache key and building every row's parameters through SQLAlchemy at each write (the
    open windows at 2,000 endpoints: issue 31). The rows are mappings holding every key
    of `keys`; what the statement binds besides (`version + 1`'s 1) is its own."""

    def __init__(self, statement: Any, dialect: Dialect, keys: Sequence[str]):
        if not dialect.positional:
            raise StoreError(f"unsupported database {dialect.name!r}: its driver is not positional")
        compiled: Any = statement.compile(
            dialect=dialect, column_keys=list(keys), for_executemany=True
        )
        self.statement = statement
        self.sql: str = compiled.string
        names = tuple(compiled.positiontup or ())
        processors = compiled._bind_processors  # what SQLAlchemy's execute applies
        taken = set(keys)
        self._constants = [
            (i, _processed(processors.get(name), compiled.binds[name].effective_value))
            for i, name in enumerate(names)
            if name not in taken
        ]
        self._convert = [
            (i, processors[name])
            for i, name in enumerate(names)
            if name in taken and name in processors
        ]
        self._get = operator.itemgetter(*(name if name in taken else keys[0] for name in names))
        self._single = len(names) == 1

    def parameters(self, rows: Iterable[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        """The rows as the driver takes them: one tuple each, in the statement's order."""
        get = self._get
        tuples = [(get(row),) for row in rows] if self._single else [get(row) for row in rows]
        return self._finished(tuples) if self._convert or self._constants else tuples

    def _finished(self, tuples: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        finished = []
        for values in tuples:
            bound = list(values)
            for i, process in self._convert:
                bound[i] = process(bound[i])
            for i, value in self._constants:
                bound[i] = value
            finished.append(tuple(bound))
        return finished

    async def execute(self, connection: AsyncConnection, rows: Iterable[Mapping[str, Any]]) -> None:
        await connection.exec_driver_sql(self.sql, self.parameters(rows))


def _processed(process: Callable[[Any], Any] | None, value: Any) -> Any:
    return value if process is None else process(value)


def mark_due_statement(insert: Any) -> Any:
    """Mark a period due for rollup; marking it again raises its version."""
    return insert(RollupDue).on_conflict_do_update(
        index_elements=["granularity", "endpoint", "start"],
        set_={"version": RollupDue.version + 1},
    )


def excluded(column: str) -> ColumnElement[Any]:
    """The value an upsert tried to insert (`excluded.column`, same on SQLite and PostgreSQL)."""
    return literal_column(f"excluded.{column}")


def reason(exc: BaseException) -> str:
    """The database's reason, without the SQL or the URL (which may hold a password)."""
    original = getattr(exc, "orig", None) or exc
    text = str(original).splitlines()[0] if str(original) else type(original).__name__
    return f"{type(original).__name__}: {text}"[:300]


def _backend(url: str) -> str:
    return url.split(":", 1)[0]


def _shared(url: str) -> bool:
    """Whether another process reaches the same database (not SQLite in memory)."""
    if not url.startswith("sqlite"):
        return True
    path = url.split(":///", 1)[1] if ":///" in url else ""
    return bool(path) and ":memory:" not in path and "mode=memory" not in path
