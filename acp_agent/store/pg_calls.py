"""One call of the PostgreSQL store on a pooled connection, bounded in time.

It owns how a call meets the database's faults, on the worker thread that runs it:

- a call that writes runs in one transaction; one that fails before its COMMIT was sent did
  not commit, and is run once more on a fresh connection (not the pool's: after a restart
  or ``pg_terminate_backend`` several pooled connections may be dead; each is discarded when
  it fails). A read is run once more likewise;
- a transaction reads its id (``txid_current()``) before its COMMIT; when the connection
  breaks during the COMMIT, ``txid_status`` on a fresh connection says what happened:
  committed (the call succeeded, its result stands), aborted (it is run once more), or
  unknown (it fails saying so). A write is never applied twice;
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
    """A driver error after the COMMIT was sent: the transaction may have committed.

    It carries the transaction's id and what the call returned before its COMMIT."""

    def __init__(self, xid: int, result: object) -> None:
        super().__init__(xid)
        self.xid = xid
        self.result = result


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

    xid: int | None = None
    try:
        with conn.transaction():
            result = fn(conn)
            row = conn.execute(_XID, prepare=True).fetchone()
            xid = int(row[0]) if row else None
    except psycopg.OperationalError as exc:
        if xid is None:
            raise NotCommitted() from exc
        raise CommitUnknown(xid, result) from exc
    return result


_XID = "SELECT txid_current()"
_XID_STATUS = "SELECT txid_status(%s)"
#: seconds between two questions about a transaction its server is still ending
_POLL = 0.02


def _fate(conn: psycopg.Connection[Row], xid: int, deadline: _Deadline) -> str | None:
    """Whether transaction ``xid`` committed: "committed", "aborted" or None (unknown).
    A transaction still in progress (its server has not yet seen the connection close) is
    asked about again until it ends or the deadline shuts this connection."""
    while True:
        row = conn.execute(_XID_STATUS, (xid,)).fetchone()
        status = None if row is None or row[0] is None else str(row[0])
        if status != "in progress":
            return status
        if deadline.fired.wait(_POLL):
            return None


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

    def attempt() -> _T:
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

    def settle(unknown: CommitUnknown) -> _T:
        """After a break during COMMIT: the call's result if it committed, the call run
        again if it did not; ``unknown`` raised again if the database cannot tell."""
        with connect() as conn:
            deadline.watch(conn)
            fate = _fate(conn, unknown.xid, deadline)
        broke = reason_of(unknown.__cause__ or unknown)
        if fate == "committed":
            log.warning(
                "session store %s: the connection broke during a commit (%s); it had committed",
                store,
                broke,
            )
            return unknown.result  # type: ignore[return-value]
        if fate != "aborted":
            raise unknown
        log.warning(
            "session store %s: the connection broke during a commit (%s); "
            "it had not committed: trying again",
            store,
            broke,
        )
        with connect() as conn:
            return call(conn)

    with _Deadline(timeout) as deadline:
        try:
            try:
                return attempt()
            except CommitUnknown as unknown:
                if deadline.fired.is_set():
                    raise
                return settle(unknown)
        except psycopg_pool.PoolTimeout:
            error = StoreFailed(store, f"no connection within {timeout:g} s")
        except CommitUnknown as exc:
            broke = reason_of(exc.__cause__ or exc)
            error = StoreFailed(
                store,
                f"the connection broke during a commit ({broke}) and the database cannot "
                "say whether it committed",
            )
        except (psycopg.Error, NotCommitted) as exc:
            cause = exc.__cause__ if isinstance(exc, NotCommitted) else exc
            if deadline.fired.is_set():
                error = StoreFailed(store, f"no answer within {timeout:g} s")
            else:
                error = StoreFailed(store, reason_of(cause or exc))
    log.error("%s", error.message)
    raise error
