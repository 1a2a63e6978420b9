"""The persistence glue: one write per short turn, a long turn's queue kept short, and a
failed write that holds its session back until a retry succeeds."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import orjson
import pytest

from acp_agent.errors import InternalError
from acp_agent.persistence import BEHIND_BYTES, FLUSH_BYTES, Persister
from acp_agent.store import (
    DEFAULT_OWNER,
    MemorySessionStore,
    SessionRecord,
    TurnRecord,
    TurnWrite,
)
from tests.helpers.stalled_store import StalledStore

pytestmark = pytest.mark.anyio


def item(i: int) -> str:
    return orjson.dumps({"sessionUpdate": "agent_message_chunk", "i": i, "pad": "x" * 64}).decode()


class Counting(MemorySessionStore):
    """Counts turn writes; fails them with ``OSError`` while ``broken``."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[TurnWrite] = []
        self.written = anyio.Event()
        self.broken = False

    async def write_turn(self, write: TurnWrite) -> None:
        if self.broken:
            raise OSError("disk full")
        await super().write_turn(write)
        self.writes.append(write)
        self.written.set()


@asynccontextmanager
async def running(persister: Persister) -> AsyncIterator[None]:
    async with anyio.create_task_group() as tg:
        persister.start(tg)
        yield
        tg.cancel_scope.cancel()


async def test_a_short_turn_is_one_write() -> None:
    store = Counting()
    await store.create(SessionRecord("s", cwd="/"))
    persister = Persister(store)
    async with running(persister):
        persister.begin("s", "t", [item(0)])
        persister.append("s", "t", item(1))
        persister.end("s", "t", "end_turn")
        await persister.sync("s")
    assert len(store.writes) == 1
    [turn] = await store.load_history(DEFAULT_OWNER, "s")
    assert turn == TurnRecord("t", (item(0), item(1)), "end_turn")


async def test_a_running_turn_reaches_the_store_unasked() -> None:
    # A turn that waits on its client has what it sent so far in the store.
    store = Counting()
    await store.create(SessionRecord("s", cwd="/"))
    persister = Persister(store)
    async with running(persister):
        persister.begin("s", "t", [item(0)])
        persister.append("s", "t", item(1))
        with anyio.fail_after(5):
            await store.written.wait()
        [turn] = await store.load_history(DEFAULT_OWNER, "s")
        assert turn == TurnRecord("t", (item(0), item(1)), None)


async def test_a_long_turn_is_written_as_it_goes_not_queued_whole() -> None:
    store = Counting()
    await store.create(SessionRecord("s", cwd="/"))
    persister = Persister(store)
    n = 10_000
    async with running(persister):
        persister.begin("s", "t", [item(-1)])
        for i in range(n):
            persister.append("s", "t", item(i))
            if persister.behind():
                await persister.catch_up()
            if i % 100 == 0:
                await anyio.lowlevel.checkpoint()  # as a send to the client does now and then
        persister.end("s", "t", "end_turn")
        await persister.sync("s")
    assert len(store.writes) > 5
    assert max(len(w.updates) for w in store.writes) * len(item(0)) < 2 * FLUSH_BYTES
    [turn] = await store.load_history(DEFAULT_OWNER, "s")
    assert turn == TurnRecord("t", (item(-1), *map(item, range(n))), "end_turn")


async def test_sessions_streaming_at_once_keep_one_write_each() -> None:
    store = Counting()
    sessions = [f"s{n}" for n in range(20)]
    for sid in sessions:
        await store.create(SessionRecord(sid, cwd="/"))
    persister = Persister(store)
    async with running(persister):
        for sid in sessions:
            persister.begin(sid, "t", [item(-1)])
        for i in range(10):  # interleaved, as streams in several sessions send
            for sid in sessions:
                persister.append(sid, "t", item(i))
        for sid in sessions:
            persister.end(sid, "t", "end_turn")
        await persister.sync()
    assert len(store.writes) == len(sessions)  # one write per session, not one per update
    for sid in sessions:
        [turn] = await store.load_history(DEFAULT_OWNER, sid)
        assert turn == TurnRecord("t", (item(-1), *(item(i) for i in range(10))), "end_turn")


async def test_a_failed_write_holds_its_session_back_until_a_retry_succeeds() -> None:
    store = Counting()
    for sid in ("s", "other"):
        await store.create(SessionRecord(sid, cwd="/"))
    persister = Persister(store)
    async with running(persister):
        store.broken = True
        persister.begin("s", "t0", [item(0)])
        persister.end("s", "t0", "end_turn")
        with pytest.raises(InternalError, match=r"Counting: disk full; this turn was not saved"):
            await persister.sync("s")
        # Still broken: the next prompt is refused before it begins.
        with pytest.raises(InternalError, match=r"disk full; the prompt was not run"):
            await persister.before_turn("s")
        store.broken = False
        persister.begin("other", "u", [item(9)])  # other sessions go on meanwhile
        persister.end("other", "u", "end_turn")
        await persister.sync("other")
        await persister.before_turn("s")  # the retry succeeds: the prompt may run
        persister.begin("s", "t1", [item(1)])
        persister.end("s", "t1", "end_turn")
        await persister.sync("s")
    assert await store.load_history(DEFAULT_OWNER, "s") == [
        TurnRecord("t0", (item(0),), "end_turn"),
        TurnRecord("t1", (item(1),), "end_turn"),
    ]


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

    async with running(persister), anyio.create_task_group() as tg:
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
    # The turn only waits; the writer task writes.
    store = StalledStore()
    persister, sent = await outrun(store)
    async with anyio.create_task_group() as turn:
        turn.start_soon(persister.catch_up)
        await anyio.wait_all_tasks_blocked()
        turn.cancel_scope.cancel()
    store.go.set()
    persister.end("s", "t", "cancelled")
    async with running(persister):
        await persister.sync("s")
    [turn_record] = await store.load_history(DEFAULT_OWNER, "s")
    assert turn_record == TurnRecord("t", (item(-1), *map(item, range(sent))), "cancelled")


class Gated(Counting):
    """Session ``s``'s writes wait for ``release`` (then fail while ``broken``)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = anyio.Event()
        self.release = anyio.Event()

    async def write_turn(self, write: TurnWrite) -> None:
        if write.session_id == "s" and not self.release.is_set():
            self.entered.set()
            await self.release.wait()
        await super().write_turn(write)


async def answered_cancelled_mid_write(store: Gated, persister: Persister) -> None:
    """Turn ``t`` of ``s`` answered ``cancelled`` while its write is stuck in the store."""
    for sid in ("s", "other"):
        await store.create(SessionRecord(sid, cwd="/"))
    persister.begin("s", "t", [item(0)])
    persister.end("s", "t", "end_turn")
    with anyio.fail_after(5):
        with anyio.CancelScope() as wait:
            async with anyio.create_task_group() as tg:
                tg.start_soon(persister.sync, "s")
                await store.entered.wait()  # the write is in flight, stuck
                wait.cancel()
    persister.answered_cancelled("s", "t")


@pytest.mark.parametrize("fails", [False, True], ids=["confirmed", "failed"])
async def test_a_prompt_behind_a_turn_answered_cancelled_mid_write_waits_for_it(
    fails: bool,
) -> None:
    store = Gated()
    persister = Persister(store)
    outcome: list[str] = []

    async def next_prompt() -> None:
        try:
            await persister.before_turn("s")
        except InternalError as exc:
            outcome.append(exc.message)
        else:
            outcome.append("runs")

    async with running(persister):
        await answered_cancelled_mid_write(store, persister)
        # Another session is not held behind it.
        persister.begin("other", "u", [item(1)])
        persister.end("other", "u", "end_turn")
        with anyio.fail_after(5):
            await persister.sync("other")
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(next_prompt)
                await anyio.wait_all_tasks_blocked()
                assert outcome == []  # the next prompt waits for the write, not refused
                store.broken = fails
                store.release.set()
        if fails:  # refused with the store's error; kept, to be stored as it was answered
            assert outcome == ["session store Gated: disk full; the prompt was not run"]
            store.broken = False
            await persister.before_turn("s")  # written again: the prompt may run
        else:
            assert outcome == ["runs"]
    [turn] = await store.load_history(DEFAULT_OWNER, "s")
    assert turn == TurnRecord("t", (item(0),), "cancelled" if fails else "end_turn")
