"""The SessionStore contract, run against every implementation (see ``OPENERS``): turns.

Turn writes and history, their errors, concurrency, cancellation,
closing, and the property tests. Records, owners and lists are in ``test_contract.py``.
"""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acp_agent.errors import IllegalTransition, ResourceNotFound
from acp_agent.store import PackedJson, SessionRecord, SessionStore, TurnRecord, TurnWrite

from ._contract import ME, chunk, ids, user

pytestmark = pytest.mark.anyio


# --- turns -----------------------------------------------------------------------------------


async def test_turns_round_trip_in_order(store: SessionStore) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    assert await store.load_history(ME, "s") == []

    prompt = [user("do it"), user("more")]
    tool = orjson.dumps({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "ls"}).decode()
    await store.write_turn(TurnWrite("s", "t0", begin=prompt))
    await store.write_turn(TurnWrite("s", "t0", updates=[chunk("a"), chunk("b")]))
    await store.write_turn(TurnWrite("s", "t0", updates=[]))
    await store.write_turn(TurnWrite("s", "t0", updates=[tool], end="end_turn"))
    await store.write_turn(TurnWrite("s", "t1", begin=[user("again")], end="cancelled"))
    await store.write_turn(TurnWrite("s", "t2", begin=[], updates=[chunk("running")]))

    assert await store.load_history(ME, "s") == [
        TurnRecord("t0", (*prompt, chunk("a"), chunk("b"), tool), "end_turn"),
        TurnRecord("t1", (user("again"),), "cancelled"),
        TurnRecord("t2", (chunk("running"),), None),
    ]


async def test_turn_order_follows_begin_not_turn_id(store: SessionStore) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    await store.create(SessionRecord("other", cwd="/"))
    for turn_id in ["z", "a", "m"]:
        await store.write_turn(TurnWrite("s", turn_id, begin=[user(turn_id)]))
        await store.write_turn(TurnWrite("other", turn_id, begin=[user(turn_id)], end="end_turn"))
    for turn_id in ["a", "z", "m"]:
        await store.write_turn(TurnWrite("s", turn_id, updates=[chunk(turn_id)], end="end_turn"))
    history = await store.load_history(ME, "s")
    assert [(t.turn_id, t.updates) for t in history] == [
        (t, (user(t), chunk(t))) for t in ["z", "a", "m"]
    ]


async def test_turns_of_two_sessions_may_share_ids(store: SessionStore) -> None:
    for sid in ("a", "b"):
        await store.create(SessionRecord(sid, cwd="/"))
        await store.write_turn(TurnWrite(sid, "t", begin=[user(sid)]))
    await store.write_turn(TurnWrite("a", "t", end="end_turn"))
    await store.write_turn(TurnWrite("b", "t", updates=[chunk("b")]))
    assert await store.load_history(ME, "a") == [TurnRecord("t", (user("a"),), "end_turn")]
    assert await store.load_history(ME, "b") == [TurnRecord("t", (user("b"), chunk("b")), None)]


async def test_json_text_comes_back_exactly_as_given(store: SessionStore) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    weird = 'héllo wörld — 日本語 🎉 \u0000 \u2028 "quotes" \\ back'
    texts = [
        user(weird),
        chunk("x" * 3_000_000),
        '{ "spaced" :  [1, 2.50, 1e3],\n "nested": {"a": null} }',
        orjson.dumps({weird: weird, "n": 2**64 - 1, "f": 1e-300}).decode(),
        "{}",
    ]
    await store.write_turn(TurnWrite("s", "t", begin=texts[:1], updates=texts[1:]))
    [turn] = await store.load_history(ME, "s")
    assert turn.updates == tuple(texts)


async def test_turn_activity_bumps_updated_at(store: SessionStore) -> None:
    await store.create(SessionRecord("a", cwd="/"))
    await store.create(SessionRecord("b", cwd="/"))
    before = await store.get(ME, "a")
    assert before is not None

    async def newest() -> str:
        return (await ids(store, limit=1))[0]

    assert await newest() == "b"
    await store.write_turn(TurnWrite("a", "t", begin=[]))
    assert await newest() == "a"
    await store.update(SessionRecord("b", cwd="/", title="b"))
    await store.write_turn(TurnWrite("a", "t", updates=[chunk("x")]))
    assert await newest() == "a"
    await store.update(SessionRecord("b", cwd="/", title="b2"))
    await store.write_turn(TurnWrite("a", "t", end="end_turn"))
    assert await newest() == "a"
    after = await store.get(ME, "a")
    assert after is not None
    assert after.updated_at > before.updated_at
    assert after.created_at == before.created_at


async def test_unknown_session_is_resource_not_found_naming_it(store: SessionStore) -> None:
    calls = [
        store.write_turn(TurnWrite("ghost", "t", begin=[])),
        store.write_turn(TurnWrite("ghost", "t", updates=[chunk("x")])),
        store.write_turn(TurnWrite("ghost", "t", end="end_turn")),
        store.load_history(ME, "ghost"),
    ]
    for call in calls:
        with pytest.raises(ResourceNotFound, match="'ghost'") as info:
            await call
        assert info.value.data == {"sessionId": "ghost"}


async def test_unknown_turn_is_resource_not_found_naming_it(store: SessionStore) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    for steps in ({"updates": [chunk("x")]}, {"end": "end_turn"}, {}):
        with pytest.raises(ResourceNotFound, match="'nope'") as info:
            await store.write_turn(TurnWrite("s", "nope", **steps))
        assert info.value.data == {"sessionId": "s", "turnId": "nope"}
    assert await store.load_history(ME, "s") == []


async def test_turn_misuse_is_an_illegal_transition_and_changes_nothing(
    store: SessionStore,
) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    await store.write_turn(TurnWrite("s", "t", begin=[user("p")]))
    with pytest.raises(IllegalTransition, match="running"):
        await store.write_turn(TurnWrite("s", "t", begin=[user("again")], updates=[chunk("no")]))
    await store.write_turn(TurnWrite("s", "t", end="end_turn"))
    with pytest.raises(IllegalTransition, match="ended"):
        await store.write_turn(TurnWrite("s", "t", end="cancelled"))
    with pytest.raises(IllegalTransition, match="ended"):
        await store.write_turn(TurnWrite("s", "t", updates=[chunk("late")]))
    with pytest.raises(IllegalTransition, match="ended"):
        await store.write_turn(TurnWrite("s", "t", begin=[]))
    assert await store.load_history(ME, "s") == [TurnRecord("t", (user("p"),), "end_turn")]


async def test_concurrent_writers_lose_nothing(store: SessionStore) -> None:
    for s in range(3):
        await store.create(SessionRecord(f"s{s}", cwd="/"))
        await store.write_turn(TurnWrite(f"s{s}", "t", begin=[]))

    async def writer(s: int) -> None:
        for i in range(20):
            await store.write_turn(
                TurnWrite(f"s{s}", "t", updates=[f'{{"i":{i},"j":0}}', f'{{"i":{i}}}'])
            )

    async with anyio.create_task_group() as tg:
        for s in range(3):
            tg.start_soon(writer, s)
    for s in range(3):
        [turn] = await store.load_history(ME, f"s{s}")
        assert turn.updates == tuple(
            text for i in range(20) for text in (f'{{"i":{i},"j":0}}', f'{{"i":{i}}}')
        )


async def test_a_cancelled_call_leaves_the_store_usable(store: SessionStore) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    await store.write_turn(TurnWrite("s", "t", begin=[]))
    with anyio.CancelScope() as scope:
        scope.cancel()
        await store.write_turn(TurnWrite("s", "t", updates=[chunk("never")]))
    assert scope.cancelled_caught
    await store.write_turn(TurnWrite("s", "t", updates=[chunk("after")]))
    [turn] = await store.load_history(ME, "s")
    assert turn.updates == (chunk("after"),)


async def test_a_closed_store_refuses_calls(store: SessionStore) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    await store.aclose()
    await store.aclose()
    with pytest.raises(anyio.ClosedResourceError):
        await store.get(ME, "s")
    with pytest.raises(anyio.ClosedResourceError):
        await store.list(ME)
    with pytest.raises(anyio.ClosedResourceError):
        await store.write_turn(TurnWrite("s", "t", begin=[]))


_text = st.text(st.characters(exclude_categories=["Cs"]))
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)


_examples = itertools.count()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    updates=st.lists(st.dictionaries(_text, _json, max_size=5), max_size=5),
    owner=_text,
    title=st.none() | _text,
)
async def test_any_json_and_any_names_come_back_equal(
    store: SessionStore, updates: list[dict[str, Any]], owner: str, title: str | None
) -> None:
    # The store is shared by the examples; a fresh session id per example keeps them apart.
    sid = f"s{next(_examples)}"
    await store.create(SessionRecord(sid, cwd="/", owner=owner, title=title))
    texts = [orjson.dumps(u).decode() for u in updates]
    await store.write_turn(TurnWrite(sid, "t", begin=texts[:1]))
    await store.write_turn(TurnWrite(sid, "t", updates=texts[1:]))
    [turn] = await store.load_history(owner, sid)
    assert [orjson.loads(t) for t in turn.updates] == updates
    got = await store.get(owner, sid)
    assert got is not None
    assert got.title == title


async def test_packed_items_come_back_as_their_text(store: SessionStore) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    big = chunk("x" * 2_000_000 + " 日本語")
    packed = PackedJson.pack(big.encode())
    await store.write_turn(TurnWrite("s", "t", begin=[packed, user("p")], updates=[chunk("a")]))
    await store.write_turn(TurnWrite("s", "t", updates=[packed], end="end_turn"))
    [turn] = await store.load_history(ME, "s")
    assert turn.updates == (big, user("p"), chunk("a"), big)
