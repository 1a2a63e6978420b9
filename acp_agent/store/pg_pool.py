"""The connections of one PostgreSQL store: opening them, running a call, closing them.

It owns the schema's creation and migration on first use (one transaction under an advisory
lock, so hosts starting together do not race), the ``psycopg_pool`` pool, the bound on every
call (``call_timeout``, or ``$ACP_AGENT_STORE_TIMEOUT``) and the worker threads the calls run
on (``anyio.to_thread``, at most one per pooled connection). How one call meets the
database's faults is ``acp_agent.store.pg_calls``'s; the SQL text is ``acp_agent.store.
pg_sql``'s. It knows nothing of sessions or leases (``acp_agent.store.postgres``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread

from acp_agent.errors import InternalError
from acp_agent.store import pg_sql as sql
from acp_agent.store.pg_calls import run_bounded

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = [
    "CALL_TIMEOUT_ENV_VAR",
    "DEFAULT_CALL_TIMEOUT",
    "NAME",
    "PgConnections",
    "Row",
    "SchemaTooNew",
]

POOL_SIZE: Final = 8
CONNECT_TIMEOUT: Final = 10.0
DEFAULT_CALL_TIMEOUT: Final = 10.0
CALL_TIMEOUT_ENV_VAR: Final = "ACP_AGENT_STORE_TIMEOUT"
"""Environment variable: seconds one call of the PostgreSQL store may take."""
#: how the store names itself in errors (never by its URL, which may hold a password)
NAME: Final = "PostgreSQL"

_T = TypeVar("_T")
Row = tuple[Any, ...]


class SchemaTooNew(InternalError):
    """The database was made by a newer acp-agent than this one."""


def _call_timeout() -> float:
    value = os.environ.get(CALL_TIMEOUT_ENV_VAR)
    if not value:
        return DEFAULT_CALL_TIMEOUT
    try:
        return float(value)
    except ValueError:
        raise InternalError(
            f"${CALL_TIMEOUT_ENV_VAR}: {value!r} is not a number of seconds"
        ) from None


def _migrate(conn: psycopg.Connection[Row]) -> None:
    """Create or bring the schema up to ``SCHEMA_VERSION``, in one transaction."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (sql.SCHEMA_LOCK,))
        exists = conn.execute(sql.HAS_VERSION_TABLE).fetchone()
        version = 0
        if exists and exists[0]:
            row = conn.execute(sql.READ_VERSION).fetchone()
            version = int(row[0]) if row else 0
        if version > sql.SCHEMA_VERSION:
            raise SchemaTooNew(
                f"the database holds schema version {version}; this acp-agent knows up to "
                f"{sql.SCHEMA_VERSION}: upgrade acp-agent"
            )
        for step in range(version + 1, sql.SCHEMA_VERSION + 1):
            conn.execute(sql.MIGRATIONS[step])
            conn.execute(sql.SET_VERSION, (step,))


class PgConnections:
    """The pool of one store and the bounded calls on it (see the module docstring)."""

    def __init__(self, url: str, call_timeout: float | None) -> None:
        self.url = url
        #: seconds one call may take, waiting for a connection included
        self.call_timeout = _call_timeout() if call_timeout is None else call_timeout
        if not self.call_timeout > 0:
            raise ValueError(f"call_timeout must be positive, not {self.call_timeout}")
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[Row]] | None = None
        self._limiter = anyio.CapacityLimiter(POOL_SIZE)
        #: set by the store's ``aclose``: no call starts any more
        self.closed = False

    def open_sync(self) -> None:
        """Migrate the schema on a direct connection, then open the pool (blocking)."""
        import psycopg
        import psycopg_pool

        # One direct connection first: a wrong URL or a server that is down fails here,
        # at once, with libpq's own message (a pool would retry until its timeout).
        with psycopg.connect(self.url, connect_timeout=int(CONNECT_TIMEOUT)) as conn:
            _migrate(conn)
        self._pool = psycopg_pool.ConnectionPool(
            self.url,
            min_size=1,
            max_size=POOL_SIZE,
            kwargs=self._connect_kwargs(),
            timeout=self.call_timeout,
            open=False,
            name="acp-agent",
        )
        self._pool.open(wait=True, timeout=CONNECT_TIMEOUT)

    @property
    def opened(self) -> bool:
        """True from :meth:`open_sync` until :meth:`close_sync`."""
        return self._pool is not None

    def _connect_kwargs(self) -> dict[str, Any]:
        return {"autocommit": True, "connect_timeout": max(1, int(self.call_timeout))}

    def _connect(self) -> psycopg.Connection[Row]:
        """A connection of its own (not the pool's), for a call run again."""
        import psycopg

        return psycopg.connect(self.url, **self._connect_kwargs())

    async def run(
        self, fn: Callable[[psycopg.Connection[Row]], _T], *, reads_only: bool = False
    ) -> _T:
        """``fn`` on a pooled connection, on a worker thread, bounded by ``call_timeout``
        (see ``acp_agent.store.pg_calls``)."""
        await anyio.lowlevel.checkpoint()  # every call may be cancelled before it starts
        if self.closed or self._pool is None:
            raise anyio.ClosedResourceError
        call = functools.partial(self.run_sync, fn, reads_only=reads_only)
        return await anyio.to_thread.run_sync(call, limiter=self._limiter)

    async def one(
        self, query: str, params: dict[str, Any], *, reads_only: bool = False
    ) -> Row | None:
        """The first row of one prepared statement (see :meth:`run`)."""

        def run(conn: psycopg.Connection[Row]) -> Row | None:
            return conn.execute(query, params, prepare=True).fetchone()

        return await self.run(run, reads_only=reads_only)

    def run_sync(
        self, fn: Callable[[psycopg.Connection[Row]], _T], *, reads_only: bool = False
    ) -> _T:
        """:meth:`run` on the calling thread (blocking): the lease renewal's and the close's."""
        if self._pool is None:
            raise anyio.ClosedResourceError
        return run_bounded(
            self._pool,
            fn,
            connect=self._connect,
            store=NAME,
            timeout=self.call_timeout,
            reads_only=reads_only,
        )

    def close_sync(self) -> None:
        """Close the pool (blocking); calls made after it raise ``ClosedResourceError``."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
