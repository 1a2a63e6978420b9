"""Shared pytest configuration: every async test runs on asyncio, on uvloop (the server's
default loop, where it is installed) and on trio."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acp_agent._loop import uvloop_installed

#: backend name -> what anyio's pytest plugin takes
ANYIO_BACKENDS: dict[str, Any] = {
    "asyncio": "asyncio",
    "uvloop": ("asyncio", {"use_uvloop": True}),
    "trio": "trio",
}


@pytest.fixture(params=[name for name in ANYIO_BACKENDS if name != "uvloop" or uvloop_installed()])
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def anyio_backend(backend_name: str) -> Any:
    return ANYIO_BACKENDS[backend_name]


# Property tests are deterministic: the same examples on every run.
from hypothesis import settings  # noqa: E402

settings.register_profile("deterministic", derandomize=True, deadline=None, database=None)
settings.load_profile("deterministic")


# --- PostgreSQL: one throwaway server per test run, a fresh schema per test ----------------


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str]:
    """The URL of a PostgreSQL server for this run: ``ACP_AGENT_TEST_POSTGRES`` if set, else
    a throwaway one (tests/helpers/postgres.py). Skips where none can be started, except
    in CI (``CI=true``), where that fails."""
    from tests.helpers.postgres import ENABLE_HINT, NoPostgres, PostgresServer

    given = os.environ.get("ACP_AGENT_TEST_POSTGRES")
    if given:
        yield given
        return
    server: PostgresServer | None = None
    try:
        import psycopg  # noqa: F401

        server = PostgresServer()
        url = server.start()
    except (ImportError, NoPostgres) as exc:
        if server is not None:
            server.stop()
        reason = f"PostgreSQL tests skipped ({exc}); to run them: {ENABLE_HINT}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason.replace("skipped", "cannot run in CI"), pytrace=False)
        pytest.skip(reason)
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server_url: str) -> str:
    """A libpq URL whose ``search_path`` is a schema of this test's own (created empty)."""
    from tests.helpers.postgres import fresh_schema_url

    return fresh_schema_url(postgres_server_url)


# --- The official TypeScript SDK: one npm ci per test run ----------------------------------


@pytest.fixture(scope="session")
def ts_sdk_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tests/ts`` installed with ``npm ci`` (tests/helpers/ts_sdk.py): skips without node
    and npm, except in CI (``CI=true``), where that fails. Under xdist, into the run's
    directory (the parent of each worker's own), so that the workers share one install."""
    from tests.helpers import ts_sdk

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    return ts_sdk.install(base)
