"""PostgreSQL for the tests: the server on 127.0.0.1:5432 when there is one, or a throwaway cluster.

A throwaway cluster (initdb as the postgres user, a temp directory, trust
auth, 127.0.0.1 only, as ../shared/NOTES.md describes) is also what the
fault tests use, because they stop and start the server. Outside CI, no
PostgreSQL at all means the tests skip with the reason; with SPECTAX_CI=1
set it is a failure.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

IN_CI = os.environ.get("SPECTAX_CI") == "1"


def unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"PostgreSQL is required in CI: {reason}")
    pytest.skip(f"no PostgreSQL: {reason}")


def _bin(name: str) -> str | None:
    found = shutil.which(name) or sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if isinstance(found, list):
        return found[-1] if found else None
    return found


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(*command: str) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *command]
    return list(command)


class Cluster:
    """A PostgreSQL cluster of the test's own: it can be stopped and started."""

    def __init__(self) -> None:
        initdb, self.pg_ctl = _bin("initdb"), _bin("pg_ctl")
        if not initdb or not self.pg_ctl:
            unavailable("initdb/pg_ctl not found (Debian package postgresql)")
        assert initdb is not None
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="spectax-pg-"))
        self.data = self.root / "data"
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        result = subprocess.run(
            _as_postgres(initdb, "-D", str(self.data), "-A", "trust", "-U", "postgres"),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            unavailable(f"initdb failed: {result.stderr.strip()[-300:]}")
        self.start()

    def start(self) -> None:
        options = f"-p {self.port} -h 127.0.0.1 -k {self.root}"
        subprocess.run(
            _as_postgres(
                self.pg_ctl,
                "-D",
                str(self.data),
                "-o",
                options,
                "-w",
                "-l",
                str(self.root / "log"),
                "start",
            ),
            check=True,
            capture_output=True,
        )

    def stop(self) -> None:
        subprocess.run(
            _as_postgres(self.pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "stop"),
            check=True,
            capture_output=True,
        )

    def destroy(self) -> None:
        subprocess.run(
            _as_postgres(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "stop"),
            check=False,
            capture_output=True,
        )
        shutil.rmtree(self.root, ignore_errors=True)

    def create_database(self) -> str:
        return create_database(self.port)


def create_database(port: int) -> str:
    """A new, empty database; returns its asyncpg URL."""
    psql = _bin("psql")
    if psql is None:
        unavailable("psql not found")
    assert psql is not None
    name = f"spectax_test_{uuid.uuid4().hex[:12]}"
    subprocess.run(
        [
            psql,
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            f"CREATE DATABASE {name}",
        ],
        check=True,
        capture_output=True,
    )
    return f"postgresql+asyncpg://postgres@127.0.0.1:{port}/{name}"


class Server:
    """Where test databases come from: the running server on 5432, or a throwaway cluster."""

    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        explicit = os.environ.get("SPECTAX_TEST_PG_PORT")
        if explicit:
            self.port = int(explicit)
        elif _listening(5432):
            self.port = 5432
        else:
            self.cluster = Cluster()
            self.port = self.cluster.port

    def database(self) -> str:
        return create_database(self.port)

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.destroy()
