"""The SQL side of one group commit of the PostgreSQL store: a batch of turn writes on one
connection, inside the transaction its caller opened.

It owns how the writes of a batch reach the database:

- in one pipeline (one round trip), ordered by session id so that two hosts' batches take
  row locks in the same order; each is one ``acp_write_turn`` call, fencing check included;
- a write whose session row another transaction holds (another host's write, an operator's
  ``SELECT ... FOR UPDATE``) does not wait for it: ``SKIP LOCKED`` makes it answer
  ``WRITE_LOCKED`` at once, and its caller writes it alone (``WRITE_TURN``, which waits,
  within the call's bound), so one session's stuck write holds no other session's turn;
- the pipeline runs in a savepoint: if the database rejects one call with an error, every
  call is run again alone, each in a savepoint of its own, so that only the rejected one
  fails (its outcome is the database's reason, a string) and the others commit together.

It knows nothing of pools, time bounds or leases (``acp_agent.store.postgres`` and
``acp_agent.store.pg_calls``) and nothing of what a status means.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from acp_agent.store import pg_sql as sql
from acp_agent.store.pg_calls import reason_of

if TYPE_CHECKING:
    import psycopg

__all__ = ["Outcome", "write_batch"]

Row = tuple[Any, ...]
#: a write's status (``pg_sql.WRITE_*``), or the database's reason for rejecting it
Outcome = int | str


def write_batch(conn: psycopg.Connection[Row], batch: Sequence[dict[str, Any]]) -> list[Outcome]:
    """The outcomes of the batch's writes, in the batch's order (blocking)."""
    import psycopg

    order = sorted(range(len(batch)), key=lambda index: batch[index]["session_id"])
    outcomes: list[Outcome] = [sql.WRITE_NO_SESSION] * len(batch)
    try:
        with conn.transaction(), conn.cursor() as cursor:
            cursor.executemany(sql.BATCH_WRITE_TURN, [batch[i] for i in order], returning=True)
            for index in order:
                row = cursor.fetchone()
                outcomes[index] = int(row[0]) if row else sql.WRITE_NO_SESSION
                cursor.nextset()
        return outcomes
    except psycopg.DatabaseError:
        if conn.broken or conn.closed:
            raise
    for index in order:  # one was rejected: each alone, so that only that one fails
        try:
            with conn.transaction():
                row = conn.execute(sql.BATCH_WRITE_TURN, batch[index], prepare=True).fetchone()
            outcomes[index] = int(row[0]) if row else sql.WRITE_NO_SESSION
        except psycopg.DatabaseError as exc:
            if conn.broken or conn.closed:
                raise
            outcomes[index] = reason_of(exc)
    return outcomes
