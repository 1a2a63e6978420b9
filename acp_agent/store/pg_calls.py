"""One call of the PostgreSQL store on a pooled connection, bounded in time.

It owns how a call meets the database's faults, on the worker thread that runs it:

- a connection the pool hands out is checked first (the pool's ``check``), so one that a
  restart or ``pg_terminate_backend`` closed while it sat idle is discarded, not used;
- a call that fails on a broken connection is run once more on a fresh one when that is
  safe: it only reads, or it says its transaction failed before its COMMIT was sent
  (``NotCommitted``; ``CommitUnknown`` says it may have committed);
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
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from acp_agent.store.base import StoreFailed

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["CommitUnknown", "NotCommitted", "checker", "reason_of", "run_bounded"]

log = logging.getLogger("acp_agent.store.postgres")

_T = TypeVar("_T")
Row = tuple[Any, ...]


class CommitUnknown(Exception):
    """Raised from a driver error after a COMMIT was sent: the transaction may have
    committed, so the call is not run again."""


class NotCommitted(Exception):
    """Raised from a driver error before a COMMIT was sent: the transaction did not
    commit, so the call may run again."""


def reason_of(exc: BaseException) -> str:
    """The first line of a driver error (libpq's words; they never hold a password)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _cut(conn: psycopg.Connection[Row], fired: threading.Event) -> None:
    """End the statement waiting on ``conn``: shut its socket down (the thread that uses the
    connection then sees it closed and gives it back broken; the pool discards it)."""
    fired.set()
    with contextlib.suppress(OSError, ValueError):
        fd = conn.pgconn.socket
        with socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.shutdown(socket.SHUT_RDWR)


def checker(timeout: float) -> Callable[[psycopg.Connection[Row]], None]:
    """The pool's check of a connection it hands out: one empty statement, bounded."""

    def check(conn: psycopg.Connection[Row]) -> None:
        timer = threading.Timer(timeout, _cut, (conn, threading.Event()))
        timer.start()
        try:
            conn.execute("")
        finally:
            timer.cancel()

    return check


def run_bounded(
    pool: psycopg_pool.ConnectionPool[psycopg.Connection[Row]],
    fn: Callable[[psycopg.Connection[Row]], _T],
    *,
    store: str,
    timeout: float,
    reads_only: bool = False,
) -> _T:
    """``fn`` on a pooled connection within ``timeout`` seconds (blocking: a worker thread
    calls it). ``reads_only``: ``fn`` changes nothing, so it may always run again."""
    import psycopg
    import psycopg_pool

    deadline = time.monotonic() + timeout
    for attempt in (1, 2):
        fired = threading.Event()
        try:
            with pool.connection(timeout=max(deadline - time.monotonic(), 0.001)) as conn:
                timer = threading.Timer(max(deadline - time.monotonic(), 0.0), _cut, (conn, fired))
                timer.start()
                try:
                    return fn(conn)
                finally:
                    timer.cancel()
        except psycopg_pool.PoolTimeout:
            error = StoreFailed(store, f"no connection within {timeout:g} s")
        except CommitUnknown as exc:
            broke = reason_of(exc.__cause__ or exc)
            error = StoreFailed(store, f"the connection broke during a commit: {broke}")
        except (psycopg.OperationalError, NotCommitted) as exc:
            why = reason_of(
                exc.__cause__ if isinstance(exc, NotCommitted) and exc.__cause__ else exc
            )
            if fired.is_set():
                error = StoreFailed(store, f"no answer within {timeout:g} s")
            elif attempt == 1 and (reads_only or isinstance(exc, NotCommitted)):
                log.warning("session store %s: %s; trying again", store, why)
                continue
            else:
                error = StoreFailed(store, why)
        except psycopg.Error as exc:
            error = StoreFailed(store, reason_of(exc))
        log.error("%s", error.message)
        raise error
    raise AssertionError("unreachable")  # pragma: no cover
