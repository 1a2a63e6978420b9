"""The persistence glue: a turn written at once when the store can, and a long turn's
queue kept short."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import orjson
import pytest

from acp_agent.persistence import BEHIND_BYTES, FLUSH_BYTES, Persister
from acp_agent.store import (
    DEFAULT_OWNER,
    JsonText,
    LazyStore,
    MemorySessionStore,
    SessionRecord,
    SessionStore,
    TurnRecord,
)
from tests.helpers.stalled_store import StalledStore

pytestmark = pytest.mark.anyio


def item(i: int) -> str:
    return orjson.dumps({"sessionUpdate": "agent_message_chunk", "i": i, "pad": "x" * 64}).decode()


class Counting(MemorySessionStore):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0

    def write_turn_now(
        self,
        session_id: str,
        turn_id: str,
        *,
        begin: Sequence[JsonText] | None = None,
        updates: Sequence[JsonText] = (),
        end: str | None = None,
    ) -> bool:
        self.now += 1
        return super().write_turn_now(session_id, turn_id, begin=begin, updates=updates, end=end)


async def test_a_short_turn_is_written_at_once_when_the_store_can() -> None:
    store = Counting()
    await store.create(SessionRecord("s", cwd="/"))
    persister = Persister(store)
    persister.begin("s", "t", [item(0)])
    persister.append("s", "t", item(1))
    persister.end("s", "t", "end_turn")
    assert persister.sync_now("s")
    assert store.now == 1  # one write for the whole turn
    [turn] = await store.load_history(DEFAULT_OWNER, "s")
    assert turn == TurnRecord("t", (item(0), item(1)), "end_turn")


async def test_a_store_that_cannot_write_at_once_is_awaited() -> None:
    inner = MemorySessionStore()
    await inner.create(SessionRecord("s", cwd="/"))

    async def opener() -> SessionStore:
        return inner

    store = LazyStore(opener)  # it cannot write at once until it has opened its store
    persister = Persister(store)
    persister.begin("s", "t", [item(0)])
    persister.end("s", "t", "end_turn")
    assert not persister.sync_now("s")
    assert await inner.load_history(DEFAULT_OWNER, "s") == []
    await persister.sync("s")
    [turn] = await inner.load_history(DEFAULT_OWNER, "s")
    assert turn == TurnRecord("t", (item(0),), "end_turn")


async def test_a_long_turn_is_written_as_it_goes_not_queued_whole() -> None:
    # No task runs the persister here: only what the sends themselves write reaches the
    # store, and what is left queued is under one batch's worth.
    store = Counting()
    await store.create(SessionRecord("s", cwd="/"))
    persister = Persister(store)
    persister.begin("s", "t", [item(-1)])
    n = 10_000
    for i in range(n):
        persister.append("s", "t", item(i))
    [turn] = await store.load_history(DEFAULT_OWNER, "s")
    left = n + 1 - len(turn.updates)
    assert left * len(item(0)) < FLUSH_BYTES
    assert store.now > 1
    persister.end("s", "t", "end_turn")
    assert persister.sync_now("s")
    [turn] = await store.load_history(DEFAULT_OWNER, "s")
    assert turn == TurnRecord("t", (item(-1), *map(item, range(n))), "end_turn")


async def test_sessions_streaming_at_once_keep_one_batch_each() -> None:
    store = Counting()
    sessions = [f"s{n}" for n in range(20)]
    for sid in sessions:
        await store.create(SessionRecord(sid, cwd="/"))
    persister = Persister(store)
    for sid in sessions:
        persister.begin(sid, "t", [item(-1)])
    for i in range(10):  # interleaved, as streams in several sessions send
        for sid in sessions:
            persister.append(sid, "t", item(i))
    for sid in sessions:
        persister.end(sid, "t", "end_turn")
    assert persister.sync_now(sessions[0])
    assert store.now == len(sessions)  # one write per session, not one per update
    for sid in sessions:
        [turn] = await store.load_history(DEFAULT_OWNER, sid)
        assert turn == TurnRecord("t", (item(-1), *(item(i) for i in range(10))), "end_turn")


async def outrun(store: StalledStore) -> tuple[Persister, int]:
    """A persister on ``store`` whose turn has sent until the store is behind; and how
    many updates that took."""
    await store.create(SessionRecord("s", cwd="/"))
    persister = Persister(store)
    persister.begin("s", "t", [item(-1)])
    sent = 0
    while not persister.behind():
        persister.append("s", "t", item(sent))
        sent += 1
    return persister, sent


async def test_a_turn_that_outruns_its_store_waits_for_it() -> None:
    store = StalledStore()
    persister, sent = await outrun(store)
    assert sum(len(item(i)) for i in range(sent)) > BEHIND_BYTES
    caught_up = anyio.Event()

    async def stream_on() -> None:
        await persister.catch_up()
        caught_up.set()

    async with anyio.create_task_group() as tg:
        persister.start(tg)
        tg.start_soon(stream_on)
        await anyio.wait_all_tasks_blocked()
        assert not caught_up.is_set()  # the store has written nothing: the turn waits
        store.go.set()
        await caught_up.wait()
        assert not persister.behind()
        persister.end("s", "t", "end_turn")
        await persister.sync("s")
    [turn] = await store.load_history(DEFAULT_OWNER, "s")
    assert turn == TurnRecord("t", (item(-1), *map(item, range(sent))), "end_turn")


async def test_a_turn_cancelled_while_it_waits_for_the_store_loses_nothing() -> None:
    # The turn only waits; the writer task writes. (A turn that wrote the queue itself,
    # cancelled mid-write, would have its batch counted as written and lost.)
    store = StalledStore()
    persister, sent = await outrun(store)
    async with anyio.create_task_group() as turn:
        turn.start_soon(persister.catch_up)
        await anyio.wait_all_tasks_blocked()
        turn.cancel_scope.cancel()
    store.go.set()
    persister.end("s", "t", "cancelled")
    async with anyio.create_task_group() as tg:
        persister.start(tg)
        await persister.sync("s")
    [turn_record] = await store.load_history(DEFAULT_OWNER, "s")
    assert turn_record == TurnRecord("t", (item(-1), *map(item, range(sent))), "cancelled")
