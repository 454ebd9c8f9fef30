"""pytest's settings and the shared fixtures. Helpers tests import live in helper modules
(recorded_pages.py, e2e.py, builders.py, ...): no test module imports conftest."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Bytecode for the tests and spectax, whatever PYTHONDONTWRITEBYTECODE says (this machine
# sets it): without it every run compiles spectax and rewrites every test module's asserts
# again (collection 6.6 -> 2.5 s of CPU), and so does every xdist worker; every `spectax`
# process an e2e test starts then reads spectax compiled (0.2 s less CPU each). Python
# still checks each cached file against its source; __pycache__/ is in .gitignore.
sys.dont_write_bytecode = False

from fresh_schema import replayed_schema  # noqa: E402  (after the line above: compiled once)

# No test is a timing test (speed lives in bench/): a busy CI machine must not fail one.
settings.register_profile("spectax", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("spectax")


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    """Where a test leaves what it rendered, to look at: $SPECTAX_ARTIFACTS when set (CI
    keeps it), else the test's own tmp_path; never the source tree."""
    chosen = os.environ.get("SPECTAX_ARTIFACTS")
    if not chosen:
        return tmp_path
    directory = Path(chosen)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture(scope="session")
def pg_server():
    from pg import Server

    server = Server()
    yield server
    server.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path) -> str:
    """An empty database of each backend: every store test runs on both."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/history.sqlite"
    return request.getfixturevalue("pg_server").database()


@pytest.fixture(scope="session", autouse=True)
def _fresh_schema_replayed() -> Iterator[None]:
    """An empty database gets the statements Alembic sent the first one (fresh_schema.py)."""
    with replayed_schema():
        yield
