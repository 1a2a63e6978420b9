"""What the PostgreSQL store adds to the contract: its schema version, leases and fencing.

Two store instances on one schema play two hosts. A lease is made to expire by moving its
expiry into the past in the database (the clock leases run on), never by sleeping.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import anyio.to_thread
import pytest

from acp_agent.errors import SessionLeased
from acp_agent.store import DEFAULT_OWNER, SessionRecord, StoreFailed, TurnWrite, open_store
from acp_agent.store.pg_sql import SCHEMA_VERSION
from acp_agent.store.postgres import PostgresSessionStore, SchemaTooNew

pytestmark = pytest.mark.anyio

Host = Callable[[], Awaitable[PostgresSessionStore]]


@pytest.fixture
async def host(postgres_url: str, anyio_backend: object) -> AsyncIterator[Host]:
    """Opens store instances ("hosts") on one fresh schema; closes them after the test."""
    async with contextlib.AsyncExitStack() as stack:

        async def make() -> PostgresSessionStore:
            store = await PostgresSessionStore.open(postgres_url, lease_timeout=30)
            stack.push_async_callback(store.aclose)
            return store

        yield make


def sql(url: str, query: str) -> list[tuple[object, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(query)
        return cursor.fetchall() if cursor.description else []


async def expire_leases(url: str) -> None:
    await anyio.to_thread.run_sync(
        sql, url, "UPDATE acp_sessions SET lease_expires = clock_timestamp() - interval '1 s'"
    )


def chunk(text: str) -> str:
    return f'{{"sessionUpdate":"agent_message_chunk","content":{{"type":"text","text":"{text}"}}}}'


async def test_the_schema_version_is_recorded_and_a_newer_one_refused(
    postgres_url: str, host: Host
) -> None:
    async with anyio.create_task_group() as tg:  # hosts starting together do not race
        for _ in range(3):
            tg.start_soon(host)
    assert sql(postgres_url, "SELECT version FROM acp_schema_version") == [(SCHEMA_VERSION,)]
    sql(postgres_url, f"UPDATE acp_schema_version SET version = {SCHEMA_VERSION + 1}")
    with pytest.raises(SchemaTooNew, match="upgrade acp-agent"):
        await host()


async def test_a_session_has_one_live_owner(postgres_url: str, host: Host) -> None:
    a, b = await host(), await host()
    await a.create(SessionRecord("s", cwd="/"))
    with pytest.raises(SessionLeased) as refused:
        await b.acquire("s")
    assert refused.value.data["reason"] == "leased"
    assert 0 < refused.value.data["retryAfterMs"] <= 30_000
    with pytest.raises(SessionLeased):
        await b.write_turn(TurnWrite("s", "t", begin=[]))
    with pytest.raises(SessionLeased):
        await b.delete(DEFAULT_OWNER, "s")
    # Reads are anyone's.
    assert (await b.get(DEFAULT_OWNER, "s")) is not None
    # Acquisitions are counted: the lease goes with the last release.
    await a.acquire("s")
    await a.release("s")
    with pytest.raises(SessionLeased):
        await b.acquire("s")
    await a.release("s")
    await b.acquire("s")
    await b.write_turn(TurnWrite("s", "t", begin=[chunk("b")], end="end_turn"))


async def test_a_stale_owner_is_fenced_out_after_a_takeover(postgres_url: str, host: Host) -> None:
    a, b = await host(), await host()
    await a.create(SessionRecord("s", cwd="/"))
    await a.write_turn(TurnWrite("s", "t1", begin=[chunk("a")]))
    await expire_leases(postgres_url)  # a is paused past its lease...
    await b.acquire("s")  # ... and b takes over
    await b.write_turn(TurnWrite("s", "t2", begin=[chunk("b")], end="end_turn"))
    with pytest.raises(SessionLeased) as refused:
        await a.write_turn(TurnWrite("s", "t1", updates=[chunk("late")], end="end_turn"))
    assert refused.value.data["reason"] == "leaseLost"
    with pytest.raises(SessionLeased):
        a.check_lease("s")  # known now: the next turn is refused before it runs
    with pytest.raises(SessionLeased):
        await a.update(SessionRecord("s", cwd="/", title="a's"))
    history = await b.load_history(DEFAULT_OWNER, "s")
    assert [(t.turn_id, t.updates, t.stop_reason) for t in history] == [
        ("t1", (chunk("a"),), None),
        ("t2", (chunk("b"),), "end_turn"),
    ]
    tokens = sql(postgres_url, "SELECT lease_token FROM acp_sessions")
    assert tokens == [(2,)]


async def test_a_lost_lease_taken_back_outlives_the_old_acquisition(
    postgres_url: str, host: Host
) -> None:
    a, b = await host(), await host()
    await a.create(SessionRecord("s", cwd="/"))  # a serves it (one acquisition)
    await expire_leases(postgres_url)
    await b.acquire("s")
    await b.write_turn(TurnWrite("s", "t", begin=[]))
    await anyio.to_thread.run_sync(a.renew_now)  # a learns it lost the session
    await b.release("s")
    await a.acquire("s")  # a's client loads it again...
    await a.release("s")  # ... and the stale copy it replaces is closed
    a.check_lease("s")
    with pytest.raises(SessionLeased):
        await b.acquire("s")
    await a.write_turn(TurnWrite("s", "t", end="end_turn"))


async def test_an_expired_lease_nobody_took_is_still_good(postgres_url: str, host: Host) -> None:
    a = await host()
    await a.create(SessionRecord("s", cwd="/"))
    await expire_leases(postgres_url)
    await a.write_turn(TurnWrite("s", "t", begin=[chunk("a")], end="end_turn"))  # its token stands
    [turn] = await a.load_history(DEFAULT_OWNER, "s")
    assert turn.stop_reason == "end_turn"


async def test_renewal_keeps_leases_and_finds_the_lost_ones(postgres_url: str, host: Host) -> None:
    a, b = await host(), await host()
    await a.create(SessionRecord("kept", cwd="/"))
    await a.create(SessionRecord("taken", cwd="/"))
    await expire_leases(postgres_url)
    await b.acquire("taken")
    await anyio.to_thread.run_sync(a.renew_now)
    a.check_lease("kept")
    with pytest.raises(SessionLeased):
        a.check_lease("taken")
    rows = sql(
        postgres_url,
        "SELECT session_id, lease_expires > clock_timestamp() FROM acp_sessions ORDER BY 1",
    )
    assert rows == [("kept", True), ("taken", True)]


async def test_close_gives_every_lease_back(postgres_url: str, host: Host) -> None:
    a, b = await host(), await host()
    for sid in ("s1", "s2"):
        await a.create(SessionRecord(sid, cwd="/"))
    await a.aclose()
    for sid in ("s1", "s2"):
        await b.acquire(sid)
    assert sql(postgres_url, "SELECT count(*) FROM acp_sessions WHERE lease_holder IS NULL") == [
        (0,)
    ]


async def test_an_unreachable_server_is_one_clear_error(postgres_server_url: str) -> None:
    from acp_agent.errors import InternalError

    unavailable = r"session store is unavailable: .*127\.0\.0\.1"
    with pytest.raises(InternalError, match=unavailable) as info:
        await PostgresSessionStore.open("postgresql://acp:secret@127.0.0.1:1/none")
    assert "secret" not in info.value.message


async def test_a_url_without_the_driver_is_refused_before_serving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "acp_agent.store.postgres", None)  # not installed
    with pytest.raises(StoreFailed) as info:
        await open_store("postgresql://acp:secret@db.internal/acp")
    assert info.value.message == (
        "session store PostgreSQL: needs the postgres extra: pip install 'acp-agent-kit[postgres]'"
    )


async def test_an_unreachable_server_is_refused_before_serving() -> None:
    with pytest.raises(StoreFailed) as info:
        await open_store("postgresql://acp:secret@127.0.0.1:1/none")
    assert info.value.message.startswith("session store PostgreSQL: ")
    assert "secret" not in info.value.message


async def test_a_version_1_schema_is_brought_up_to_date(postgres_url: str, host: Host) -> None:
    from acp_agent.store import pg_sql

    sql(postgres_url, pg_sql.MIGRATIONS[1])
    sql(postgres_url, "UPDATE acp_schema_version SET version = 1")
    store = await host()
    assert sql(postgres_url, "SELECT version FROM acp_schema_version") == [(SCHEMA_VERSION,)]
    await store.create(SessionRecord("s", cwd="/"))
    await store.write_turn(TurnWrite("s", "t", begin=[chunk("hi")], end="end_turn"))
    turns = await store.load_history(DEFAULT_OWNER, "s")
    assert [(t.turn_id, t.updates, t.stop_reason) for t in turns] == [
        ("t", (chunk("hi"),), "end_turn")
    ]


async def test_a_write_the_database_rejects_fails_only_its_own_turn(
    postgres_url: str, host: Host
) -> None:
    """Three writes in one group commit (they queue while a first one commits alone);
    the database rejects one with an error: only that one fails, the other two commit."""
    a = await host()
    for sid in ("first", "bad", "good1", "good2"):
        await a.create(SessionRecord(sid, cwd="/"))
    sql(
        postgres_url,
        "ALTER TABLE acp_updates ADD CONSTRAINT no_poison "
        "CHECK (array_to_string(items, ' ') NOT LIKE '%poison%')",
    )
    failed: dict[str, str] = {}

    async def write(sid: str, text: str) -> None:
        try:
            await a.write_turn(TurnWrite(sid, "t", begin=[chunk(text)], end="end_turn"))
        except StoreFailed as exc:
            failed[sid] = exc.message

    async with anyio.create_task_group() as tg:
        for sid, text in (("first", "ok"), ("bad", "poison"), ("good1", "ok"), ("good2", "ok")):
            tg.start_soon(write, sid, text)
    assert list(failed) == ["bad"], failed
    assert "PostgreSQL" in failed["bad"] and "no_poison" in failed["bad"], failed
    for sid in ("first", "good1", "good2"):
        history = await a.load_history(DEFAULT_OWNER, sid)
        assert [(t.turn_id, t.stop_reason) for t in history] == [("t", "end_turn")]
    assert await a.load_history(DEFAULT_OWNER, "bad") == []
