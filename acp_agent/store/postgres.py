"""``PostgresSessionStore``: sessions on PostgreSQL, shared by several agent hosts.

It owns the ``SessionStore`` and ``HeldPrompts`` operations on PostgreSQL and one live owner
per session: the *lease*. Opening the pool, migrating the schema and running one bounded call
are ``acp_agent.store.pg_pool``'s; the SQL text lives in ``acp_agent.store.pg_sql``. It knows
nothing of JSON-RPC or the connection.

Turn writes of this host waiting at the same moment are committed together, in one
transaction (``acp_agent.store.group_commit``); every call is bounded in time and run once more
on a fresh connection when that is safe (``acp_agent.store.pg_calls``).

The driver is psycopg 3, synchronous, with ``psycopg_pool``: each call runs on a worker
thread (``anyio.to_thread``), as the SQLite store does. The project runs on asyncio, uvloop and
trio, and the asynchronous drivers (asyncpg, psycopg's async API) are asyncio only; one code
path on threads serves all three. A call that reached its thread runs to completion
(cancellation waits for it), so a cancelled caller never leaves a transaction half-open.
Statements are prepared on each connection (``prepare=True``).

Leases (one live owner per session):

- Each store instance is a *holder* with an id of its own. ``create`` takes the new session's
  lease; ``acquire`` takes an existing one (free, expired or already this holder's; nested
  acquisitions are counted) or raises ``SessionLeased`` saying when it expires; ``release``
  gives it back when the last acquisition is released; ``aclose`` releases every lease.
- A thread renews every held lease each third of ``lease_timeout``; a lease found taken by
  another holder is marked lost, and ``check_lease`` then raises at once.
- Every write of a session (``write_turn``, ``update``) names the lease's *fencing token*,
  and the database refuses it when the session's token has moved on (another holder took
  the lease after this one's expired): a host that was paused or cut off can never overwrite
  a newer owner's history. A write made while no lease is held takes the lease first.
- The lease's clock is the database's, so hosts' clocks do not matter; a lease that expired
  but was not taken by anyone is still good (its token has not moved).
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.lowlevel
import anyio.to_thread

from acp_agent.errors import InternalError, SessionLeased
from acp_agent.store import pg_sql as sql
from acp_agent.store.base import (
    Clock,
    JsonText,
    SessionRecord,
    StoreFailed,
    Timestamps,
    TurnRecord,
    TurnWrite,
    as_created,
    check_limit,
    check_turn_write,
    decode_cursor,
    encode_cursor,
    session_exists,
    session_not_found,
)
from acp_agent.store.group_commit import GroupCommit
from acp_agent.store.packed import text_of
from acp_agent.store.pg_batch import Outcome, write_batch
from acp_agent.store.pg_leases import LeaseTable
from acp_agent.store.pg_pool import (
    CALL_TIMEOUT_ENV_VAR,
    DEFAULT_CALL_TIMEOUT,
    NAME,
    PgConnections,
    Row,
    SchemaTooNew,
)
from acp_agent.store.pg_rows import escape, fields, maybe, to_record, unescape

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "CALL_TIMEOUT_ENV_VAR",
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_LEASE_TIMEOUT",
    "PostgresSessionStore",
    "SchemaTooNew",
]

log = logging.getLogger("acp_agent.store.postgres")

DEFAULT_LEASE_TIMEOUT: Final = 30.0


class PostgresSessionStore:
    """A ``SessionStore`` on a PostgreSQL database shared by any number of hosts."""

    def __init__(
        self,
        url: str,
        *,
        lease_timeout: float = DEFAULT_LEASE_TIMEOUT,
        clock: Clock | None = None,
        call_timeout: float | None = None,
    ) -> None:
        if lease_timeout <= 0:
            raise ValueError(f"lease_timeout must be positive, not {lease_timeout}")
        self.url = url
        self.lease_timeout = lease_timeout
        self._db = PgConnections(url, call_timeout)
        #: seconds one call may take, waiting for a connection included
        self.call_timeout = self._db.call_timeout
        self._commits: GroupCommit[dict[str, Any], Outcome] = GroupCommit(self._commit_turns)
        #: who holds a lease: this instance (the host and process name it for operators)
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._timestamps = Timestamps(clock)
        self._leases = LeaseTable()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        lease_timeout: float = DEFAULT_LEASE_TIMEOUT,
        clock: Clock | None = None,
        call_timeout: float | None = None,
    ) -> PostgresSessionStore:
        """Connect, create or migrate the schema, start the pool and the lease renewal.
        ``call_timeout`` (default ``$ACP_AGENT_STORE_TIMEOUT`` or ``DEFAULT_CALL_TIMEOUT``)
        bounds every later call."""
        import psycopg

        store = cls(url, lease_timeout=lease_timeout, clock=clock, call_timeout=call_timeout)
        try:
            await anyio.to_thread.run_sync(store._open_sync)
        except psycopg.OperationalError as exc:  # libpq's words; they never hold a password
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.error("cannot open the PostgreSQL session store: %s", reason)
            raise InternalError(f"the session store is unavailable: {reason}") from None
        return store

    def _open_sync(self) -> None:
        self._db.open_sync()
        self._renewer = threading.Thread(
            target=self._renew_loop, name="acp-agent-pg-leases", daemon=True
        )
        self._renewer.start()

    # --- leases ------------------------------------------------------------------------------

    def _lease_params(self, session_id: str) -> dict[str, Any]:
        return {"session_id": escape(session_id), "holder": self.holder, "ttl": self.lease_timeout}

    def _acquire_sync(self, conn: psycopg.Connection[Row], session_id: str) -> int:
        params = self._lease_params(session_id)
        row = conn.execute(sql.ACQUIRE, params, prepare=True).fetchone()
        if row is not None:
            return int(row[0])
        state = conn.execute(sql.LEASE_STATE, params, prepare=True).fetchone()
        if state is None:
            raise session_not_found(session_id)
        raise SessionLeased.elsewhere(session_id, float(state[0]))

    async def acquire(self, session_id: str) -> None:
        """Take the session's lease for this host (counted: release once per acquire).

        Raises ``SessionLeased`` when another host holds a live lease, ``ResourceNotFound``
        when the session does not exist.
        """
        if not self._leases.join(session_id):
            token = await self._db.run(lambda conn: self._acquire_sync(conn, session_id))
            self._leases.record(session_id, token, 1)

    async def release(self, session_id: str) -> None:
        """Give back one acquisition; the lease itself goes when the last one does."""
        token = self._leases.release(session_id)
        if token is None:
            return
        params = {**self._lease_params(session_id), "token": token}
        try:
            await self._db.run(lambda conn: conn.execute(sql.RELEASE, params, prepare=True))
        except Exception as exc:  # it expires by itself
            log.warning("giving back the lease of session %s failed: %s", session_id, exc)

    def check_lease(self, session_id: str) -> None:
        """Raise ``SessionLeased`` if this host's lease on the session is known lost."""
        self._leases.token(session_id)

    async def _token(self, session_id: str) -> int:
        """The token of this host's lease on the session, taking the lease (in a call of
        its own, committed) if none is held."""
        token = self._leases.token(session_id)
        if token is None:
            taken = await self._db.run(lambda conn: self._acquire_sync(conn, session_id))
            token = self._leases.record(session_id, taken, 0)
        return token

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.lease_timeout / 3):
            with contextlib.suppress(StoreFailed):  # logged where it failed; tried again
                self.renew_now()

    def renew_now(self) -> None:
        """Extend every lease this host holds; mark lost the ones another host took.

        Blocking (the renewal thread calls it; tests may too, from a worker thread).
        """
        if self._db.closed or not self._db.opened:
            return
        before = self._leases.generation()  # leases taken later may be missing below
        params = self._lease_params("")

        def renew(conn: psycopg.Connection[Row]) -> builtins.list[Row]:
            return conn.execute(sql.RENEW_ALL, params, prepare=True).fetchall()

        rows = self._db.run_sync(renew)
        kept = {unescape(sid): int(token) for sid, token in rows}
        for session_id in self._leases.lose_missing(kept, before):
            log.warning("lost the lease of session %s to another host", session_id)

    # --- SessionStore ------------------------------------------------------------------------

    async def create(self, record: SessionRecord) -> SessionRecord:
        now = self._timestamps.now()
        stored = as_created(record, now)
        params = {
            **fields(stored),
            **self._lease_params(stored.session_id),
            "created_at": stored.created_at,
            "updated_at": stored.updated_at,
        }
        row = await self._db.one(sql.CREATE, params)
        if row is None:
            raise session_exists(record.session_id)
        self._leases.record(record.session_id, int(row[0]), 1)
        return stored

    async def get(self, owner: str, session_id: str) -> SessionRecord | None:
        params = {"session_id": escape(session_id), "owner": escape(owner)}
        row = await self._db.one(sql.GET, params, reads_only=True)
        return None if row is None else to_record(row)

    async def update(self, record: SessionRecord) -> SessionRecord:
        params = {**fields(record), "holder": self.holder, "now": self._timestamps.now()}

        if await self._db.one(sql.GET, params, reads_only=True) is None:
            raise session_not_found(record.session_id)
        params["token"] = await self._token(record.session_id)
        row = await self._db.one(sql.UPDATE, params)
        if row is None:
            raise self._leases.lose(record.session_id)
        return to_record(row)

    async def list(
        self, owner: str, *, cwd: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> tuple[builtins.list[SessionRecord], str | None]:
        check_limit(limit)
        after_at, after_id = (None, None) if cursor is None else decode_cursor(cursor)
        params = {
            "owner": escape(owner),
            "cwd": maybe(cwd, escape),
            "after_at": after_at,
            "after_id": maybe(after_id, escape),
            "limit": limit + 1,
        }

        def run(conn: psycopg.Connection[Row]) -> builtins.list[Row]:
            return conn.execute(sql.LIST, params, prepare=True).fetchall()

        rows = await self._db.run(run, reads_only=True)
        page = [to_record(row) for row in rows[:limit]]
        return page, encode_cursor(page[-1]) if len(rows) > limit else None

    async def delete(self, owner: str, session_id: str) -> bool:
        params = {**self._lease_params(session_id), "owner": escape(owner)}

        def run(conn: psycopg.Connection[Row]) -> bool:
            if conn.execute(sql.DELETE, params, prepare=True).fetchone() is not None:
                return True
            if conn.execute(sql.GET, params, prepare=True).fetchone() is None:
                return False
            state = conn.execute(sql.LEASE_STATE, params, prepare=True).fetchone()
            raise SessionLeased.elsewhere(session_id, float(state[0]) if state else 0.0)

        deleted = await self._db.run(run)
        if deleted:
            self._leases.forget(session_id)
        return deleted

    async def write_turn(self, write: TurnWrite) -> None:
        session_id = write.session_id
        items = [
            escape(text_of(item)) for part in (write.begin or (), write.updates) for item in part
        ]
        params = {
            "session_id": escape(session_id),
            "turn_id": escape(write.turn_id),
            "holder": self.holder,
            "ttl": self.lease_timeout,
            "now": self._timestamps.now(),
            "begin": write.begin is not None,
            "items": items,
            "end": maybe(write.end, escape),
        }

        await anyio.lowlevel.checkpoint()  # cancelled before it starts: nothing written
        if self._db.closed:
            raise anyio.ClosedResourceError
        params["token"] = await self._token(session_id)
        status = await self._commits.write(params)
        if status == sql.WRITE_LOCKED:  # its row is held elsewhere: alone, waiting for it
            row = await self._db.one(sql.WRITE_TURN, params)
            status = int(row[0]) if row else sql.WRITE_NO_SESSION
        if isinstance(status, str):  # the database rejected this write (and only it)
            log.error("session store %s: a turn write of session %s: %s", NAME, session_id, status)
            raise StoreFailed(NAME, status)
        if status == sql.WRITE_OK:
            return
        if status == sql.WRITE_NO_SESSION:
            raise session_not_found(session_id)
        if status == sql.WRITE_STALE_TOKEN:
            raise self._leases.lose(session_id)
        check_turn_write(
            write,
            exists=status != sql.WRITE_NO_TURN,
            stop_reason="ended" if status == sql.WRITE_TURN_ENDED else None,
        )
        raise AssertionError(f"acp_write_turn answered {status}")  # pragma: no cover

    async def _commit_turns(self, batch: Sequence[dict[str, Any]]) -> builtins.list[Outcome]:
        """The turn writes of one group commit (see ``acp_agent.store.group_commit``), in one
        transaction (see ``acp_agent.store.pg_batch``): their outcomes, in order."""
        return await self._db.run(lambda conn: write_batch(conn, batch))

    async def load_history(self, owner: str, session_id: str) -> builtins.list[TurnRecord]:
        params = {"session_id": escape(session_id), "owner": escape(owner)}

        def run(conn: psycopg.Connection[Row]) -> builtins.list[Row]:
            return conn.execute(sql.HISTORY, params, prepare=True).fetchall()

        rows = await self._db.run(run, reads_only=True)
        if not rows:
            raise session_not_found(session_id)
        turns: builtins.list[TurnRecord] = []
        items: builtins.list[JsonText] = []
        for index, (turn_id, stop_reason, part) in enumerate(rows):
            if turn_id is None:
                break
            items.extend(map(unescape, part or ()))
            if index + 1 == len(rows) or rows[index + 1][0] != turn_id:
                turns.append(
                    TurnRecord(unescape(turn_id), tuple(items), maybe(stop_reason, unescape))
                )
                items = []
        return turns

    # --- HeldPrompts ---------------------------------------------------------------------------

    async def hold_prompt(
        self, session_id: str, turn_id: str, request: JsonText, arrival: int
    ) -> None:
        params = {
            **self._lease_params(session_id),
            "turn_id": escape(turn_id),
            "arrival": arrival,
            "request": escape(request),
        }

        params["token"] = await self._token(session_id)
        if await self._db.one(sql.HOLD_PROMPT, params) is None:
            raise self._leases.lose(session_id)

    async def drop_prompt(self, session_id: str, turn_id: str) -> None:
        params = {"session_id": escape(session_id), "turn_id": escape(turn_id)}
        await self._db.run(lambda conn: conn.execute(sql.DROP_PROMPT, params, prepare=True))

    async def held_prompts(self, session_id: str) -> builtins.list[tuple[str, JsonText]]:
        params = self._lease_params(session_id)

        def run(conn: psycopg.Connection[Row]) -> builtins.list[Row]:
            return conn.execute(sql.HELD_PROMPTS, params, prepare=True).fetchall()

        held = await self._db.run(run, reads_only=True)
        return [(unescape(turn_id), unescape(text)) for turn_id, text in held]

    async def aclose(self) -> None:
        """Release every lease this host holds, stop the renewal and close the pool."""
        if self._db.closed:
            return
        self._db.closed = True
        self._stop.set()
        if not self._db.opened:
            return
        params = self._lease_params("")

        def close() -> None:
            try:
                self._db.run_sync(lambda conn: conn.execute(sql.RELEASE_ALL, params))
            except StoreFailed:  # logged where it failed; the leases expire by themselves
                pass
            finally:
                if self._renewer is not None:
                    self._renewer.join()
                self._db.close_sync()

        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(close)
        self._leases.clear()
