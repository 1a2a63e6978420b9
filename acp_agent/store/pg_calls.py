"""One call of the PostgreSQL store on a pooled connection, bounded in time.

It owns how a call meets the database's faults, on the worker thread that runs it:

- a call that writes runs in one transaction; one that fails before its COMMIT was sent did
  not commit, and is run once more on a fresh connection (not the pool's: after a restart
  or ``pg_terminate_backend`` several pooled connections may be dead; each is discarded when
  it fails). A read is run once more likewise. A call that broke during its COMMIT is not
  (it may have committed): it fails saying so;
- the whole call, waiting for a connection included, is bounded by ``timeout``: when it runs
  out, the connection's socket is shut down, which ends the statement waiting on it at once
  (a paused server never answers, and libpq would wait for ever);
- whatever goes wrong leaves as ``StoreFailed``, naming the store and the reason, logged
  here in one line.

It knows nothing of sessions, SQL text or leases.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from acp_agent.store.base import StoreFailed

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["CommitUnknown", "NotCommitted", "reason_of", "run_bounded"]

log = logging.getLogger("acp_agent.store.postgres")

_T = TypeVar("_T")
Row = tuple[Any, ...]


class CommitUnknown(Exception):
    """A driver error after the COMMIT was sent: the transaction may have committed."""


class NotCommitted(Exception):
    """A driver error before the COMMIT was sent: the transaction did not commit."""


def reason_of(exc: BaseException) -> str:
    """The first line of a driver error (libpq's words; they never hold a password)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class _Deadline:
    """Shuts down the socket of the connection in use when the time runs out."""

    def __init__(self, seconds: float) -> None:
        self.fired = threading.Event()
        self._conn: psycopg.Connection[Row] | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def watch(self, conn: psycopg.Connection[Row]) -> None:
        with self._lock:
            self._conn = conn
            fired = self.fired.is_set()
        if fired:
            self._shut(conn)

    def _cut(self) -> None:
        with self._lock:
            self.fired.set()
            conn = self._conn
        if conn is not None:
            self._shut(conn)

    @staticmethod
    def _shut(conn: psycopg.Connection[Row]) -> None:
        # The statement waiting on it sees the connection closed; the pool discards it.
        with contextlib.suppress(OSError, ValueError):
            fd = conn.pgconn.socket
            with socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.shutdown(socket.SHUT_RDWR)


def _in_transaction(
    conn: psycopg.Connection[Row], fn: Callable[[psycopg.Connection[Row]], _T]
) -> _T:
    import psycopg

    committing = False
    try:
        with conn.transaction():
            result = fn(conn)
            committing = True
    except psycopg.OperationalError as exc:
        raise (CommitUnknown() if committing else NotCommitted()) from exc
    return result


def run_bounded(
    pool: psycopg_pool.ConnectionPool[psycopg.Connection[Row]],
    fn: Callable[[psycopg.Connection[Row]], _T],
    *,
    connect: Callable[[], psycopg.Connection[Row]],
    store: str,
    timeout: float,
    reads_only: bool = False,
) -> _T:
    """``fn`` on a pooled connection within ``timeout`` seconds (blocking: a worker thread
    calls it), in a transaction unless ``reads_only`` (``fn`` changes nothing); run again
    once, when that is safe, on a connection that ``connect`` opens (and this closes)."""
    import psycopg
    import psycopg_pool

    def call(conn: psycopg.Connection[Row]) -> _T:
        deadline.watch(conn)
        return fn(conn) if reads_only else _in_transaction(conn, fn)

    with _Deadline(timeout) as deadline:
        try:
            try:
                with pool.connection(timeout=timeout) as conn:
                    return call(conn)
            except (psycopg.OperationalError, NotCommitted) as exc:
                if deadline.fired.is_set():
                    raise
                cause = exc.__cause__ if isinstance(exc, NotCommitted) else exc
                log.warning("session store %s: %s; trying again", store, reason_of(cause or exc))
            with connect() as conn:
                return call(conn)
        except psycopg_pool.PoolTimeout:
            error = StoreFailed(store, f"no connection within {timeout:g} s")
        except CommitUnknown as exc:
            broke = reason_of(exc.__cause__ or exc)
            error = StoreFailed(store, f"the connection broke during a commit: {broke}")
        except (psycopg.Error, NotCommitted) as exc:
            cause = exc.__cause__ if isinstance(exc, NotCommitted) else exc
            if deadline.fired.is_set():
                error = StoreFailed(store, f"no answer within {timeout:g} s")
            else:
                error = StoreFailed(store, reason_of(cause or exc))
    log.error("%s", error.message)
    raise error
