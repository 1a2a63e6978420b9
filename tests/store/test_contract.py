"""The SessionStore contract, run against every implementation (memory and SQLite)."""

from __future__ import annotations

import base64
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import anyio
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acp_agent.errors import IllegalTransition, InvalidParams, ResourceNotFound
from acp_agent.store import (
    ImmediateTurnWrites,
    PackedJson,
    SessionRecord,
    SessionStore,
    TurnRecord,
)

from .conftest import MakeStore

pytestmark = pytest.mark.anyio

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def chunk(text: str, kind: str = "agent_message_chunk") -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


async def all_pages(
    store: SessionStore, *, limit: int, cwd: str | None = None
) -> list[list[SessionRecord]]:
    pages: list[list[SessionRecord]] = []
    cursor: str | None = None
    while True:
        page, cursor = await store.list(cwd=cwd, cursor=cursor, limit=limit)
        pages.append(page)
        if cursor is None:
            return pages


# --- records ---------------------------------------------------------------------------------


async def test_create_then_get_round_trips_every_field(store: SessionStore) -> None:
    record = SessionRecord(
        "s1",
        cwd="/work/a",
        additional_directories=("/work/b", "/work/c"),
        title="A title",
        mode_id="code",
        config={"model": "small", "temperature": 0.5, "tools": ["a", "b"]},
        meta={"_meta": {"x": 1}},
    )
    created = await store.create(record)
    assert TS.match(created.created_at)
    assert created.updated_at == created.created_at
    assert created == SessionRecord(
        **{**_fields(record), "created_at": created.created_at, "updated_at": created.updated_at}
    )
    assert await store.get("s1") == created
    assert await store.get("nope") is None


def _fields(record: SessionRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in SessionRecord.__slots__}


async def test_create_keeps_given_timestamps(store: SessionStore) -> None:
    created = await store.create(
        SessionRecord(
            "s",
            cwd="/",
            created_at="2020-01-01T00:00:00.000000Z",
            updated_at="2021-01-01T00:00:00.000000Z",
        )
    )
    assert created.created_at == "2020-01-01T00:00:00.000000Z"
    assert created.updated_at == "2021-01-01T00:00:00.000000Z"


async def test_create_duplicate_id_is_refused(store: SessionStore) -> None:
    await store.create(SessionRecord("dup", cwd="/a"))
    with pytest.raises(InvalidParams, match="dup"):
        await store.create(SessionRecord("dup", cwd="/b"))
    record = await store.get("dup")
    assert record is not None
    assert record.cwd == "/a"


async def test_stored_mappings_are_not_aliased(store: SessionStore) -> None:
    config: dict[str, Any] = {"k": [1]}
    await store.create(SessionRecord("s", cwd="/", config=config))
    config["k"].append(2)
    got = await store.get("s")
    assert got is not None
    assert got.config == {"k": [1]}
    got.config["k"].append(3)
    again = await store.get("s")
    assert again is not None
    assert again.config == {"k": [1]}


async def test_update_changes_only_the_given_fields(store: SessionStore) -> None:
    created = await store.create(
        SessionRecord("s", cwd="/a", title="t", mode_id="ask", config={"a": 1}, meta={"m": 1})
    )
    updated = await store.update("s", title=None, config={"b": 2})
    assert updated.title is None
    assert updated.config == {"b": 2}
    assert (updated.cwd, updated.mode_id, updated.meta) == ("/a", "ask", {"m": 1})
    assert updated.created_at == created.created_at
    assert updated.updated_at > created.updated_at
    assert await store.get("s") == updated

    again = await store.update(
        "s", mode_id="code", meta={}, cwd="/b", additional_directories=["/x", "/y"], title="n"
    )
    assert again == SessionRecord(
        "s",
        cwd="/b",
        additional_directories=("/x", "/y"),
        title="n",
        created_at=created.created_at,
        updated_at=again.updated_at,
        mode_id="code",
        config={"b": 2},
        meta={},
    )
    assert again.updated_at > updated.updated_at


async def test_update_with_no_fields_changes_nothing(store: SessionStore) -> None:
    created = await store.create(SessionRecord("s", cwd="/a"))
    assert await store.update("s") == created


async def test_update_unknown_session_names_it(store: SessionStore) -> None:
    with pytest.raises(ResourceNotFound, match="ghost") as info:
        await store.update("ghost", title="x")
    assert info.value.data == {"sessionId": "ghost"}
    with pytest.raises(ResourceNotFound, match="ghost"):
        await store.update("ghost")


async def test_timestamps_strictly_increase_even_with_a_stuck_clock(
    make_store: MakeStore,
) -> None:
    frozen = datetime(2030, 5, 6, 7, 8, 9, tzinfo=timezone.utc)
    store = await make_store(clock=lambda: frozen)
    a = await store.create(SessionRecord("a", cwd="/"))
    b = await store.create(SessionRecord("b", cwd="/"))
    assert a.created_at == "2030-05-06T07:08:09.000000Z"
    assert b.created_at == "2030-05-06T07:08:09.000001Z"
    c = await store.update("a", title="x")
    assert c.updated_at == "2030-05-06T07:08:09.000002Z"


async def test_timestamps_are_utc_from_an_aware_clock(make_store: MakeStore) -> None:
    plus_two = timezone(timedelta(hours=2))
    store = await make_store(clock=lambda: datetime(2030, 1, 1, 2, 0, tzinfo=plus_two))
    record = await store.create(SessionRecord("a", cwd="/"))
    assert record.created_at == "2030-01-01T00:00:00.000000Z"


# --- list ------------------------------------------------------------------------------------


async def test_list_is_newest_first_and_filters_on_cwd(store: SessionStore) -> None:
    for sid, cwd in [("a", "/x"), ("b", "/y"), ("c", "/x"), ("d", "/x")]:
        await store.create(SessionRecord(sid, cwd=cwd))
    await store.update("a", title="touched")

    page, cursor = await store.list()
    assert [r.session_id for r in page] == ["a", "d", "c", "b"]
    assert cursor is None
    page, cursor = await store.list(cwd="/x")
    assert [r.session_id for r in page] == ["a", "d", "c"]
    assert cursor is None
    assert await store.list(cwd="/nowhere") == ([], None)


async def test_list_breaks_timestamp_ties_by_session_id(store: SessionStore) -> None:
    same = "2024-01-01T00:00:00.000000Z"
    for sid in ["m", "z", "a"]:
        await store.create(SessionRecord(sid, cwd="/", created_at=same, updated_at=same))
    assert [r.session_id for r in (await store.list())[0]] == ["z", "m", "a"]
    pages = await all_pages(store, limit=1)
    assert [p[0].session_id for p in pages] == ["z", "m", "a"]


async def test_list_of_an_empty_store(store: SessionStore) -> None:
    assert await store.list() == ([], None)


@pytest.mark.parametrize("limit", [1, 2, 3])
async def test_pagination_yields_every_session_exactly_once(
    store: SessionStore, limit: int
) -> None:
    for i in range(7):
        await store.create(SessionRecord(f"s{i}", cwd="/even" if i % 2 == 0 else "/odd"))
    everything, cursor = await store.list(limit=100)
    assert cursor is None

    pages = await all_pages(store, limit=limit)
    assert all(1 <= len(p) <= limit for p in pages)
    assert len(pages) == -(-7 // limit)
    assert [r for p in pages for r in p] == everything

    even = [r for p in await all_pages(store, limit=limit, cwd="/even") for r in p]
    assert [r.session_id for r in even] == ["s6", "s4", "s2", "s0"]


async def test_a_full_last_page_has_no_next_cursor(store: SessionStore) -> None:
    for i in range(4):
        await store.create(SessionRecord(f"s{i}", cwd="/"))
    page, cursor = await store.list(limit=2)
    assert cursor is not None
    page, cursor = await store.list(limit=2, cursor=cursor)
    assert len(page) == 2
    assert cursor is None


async def test_pagination_is_stable_under_concurrent_inserts(store: SessionStore) -> None:
    for i in range(6):
        await store.create(SessionRecord(f"old{i}", cwd="/"))
    first, cursor = await store.list(limit=2)
    for i in range(5):
        await store.create(SessionRecord(f"new{i}", cwd="/"))
    seen = [r.session_id for r in first]
    while cursor is not None:
        page, cursor = await store.list(limit=2, cursor=cursor)
        seen += [r.session_id for r in page]
    assert sorted(seen) == sorted(f"old{i}" for i in range(6))
    assert len(seen) == len(set(seen))


def _b64(value: Any) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).decode()


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "",
        "é",
        "!!!!",
        _b64([1, 2]),
        _b64(["a"]),
        _b64({"a": "b"}),
        _b64(["a", "b", "c"]),
    ],
)
async def test_a_bad_cursor_is_invalid_params(store: SessionStore, cursor: str) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    with pytest.raises(InvalidParams):
        await store.list(cursor=cursor)


async def test_limit_must_be_positive(store: SessionStore) -> None:
    with pytest.raises(ValueError, match="limit"):
        await store.list(limit=0)


# --- delete ----------------------------------------------------------------------------------


async def test_delete_removes_the_record_and_its_history(store: SessionStore) -> None:
    await store.create(SessionRecord("gone", cwd="/"))
    await store.create(SessionRecord("kept", cwd="/"))
    await store.begin_turn("gone", "t0", [chunk("hi", "user_message_chunk")])
    await store.append_updates("gone", "t0", [chunk("hello")])
    await store.end_turn("gone", "t0", "end_turn")
    await store.begin_turn("gone", "t1", [chunk("open", "user_message_chunk")])

    assert await store.delete("gone") is True
    assert await store.get("gone") is None
    assert [r.session_id for r in (await store.list())[0]] == ["kept"]
    with pytest.raises(ResourceNotFound, match="gone"):
        await store.load_history("gone")
    assert await store.delete("gone") is False
    assert await store.delete("never") is False

    # The id can be reused, and nothing of the old history comes back.
    await store.create(SessionRecord("gone", cwd="/"))
    assert await store.load_history("gone") == []
    with pytest.raises(ResourceNotFound, match="t1"):
        await store.append_updates("gone", "t1", [chunk("x")])


# --- turns -----------------------------------------------------------------------------------


async def test_turns_round_trip_in_order(store: SessionStore) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    assert await store.load_history("s") == []

    prompt = [chunk("do it", "user_message_chunk"), chunk("more", "user_message_chunk")]
    await store.begin_turn("s", "t0", prompt)
    await store.append_updates("s", "t0", [chunk("a"), chunk("b")])
    await store.append_updates("s", "t0", [])
    tool = {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "ls", "status": "pending"}
    await store.append_updates("s", "t0", [tool])
    await store.end_turn("s", "t0", "end_turn")

    await store.begin_turn("s", "t1", [chunk("again", "user_message_chunk")])
    await store.end_turn("s", "t1", "cancelled")

    await store.begin_turn("s", "t2", [])
    await store.append_updates("s", "t2", [chunk("running")])

    assert await store.load_history("s") == [
        TurnRecord("t0", 0, (*prompt, chunk("a"), chunk("b"), tool), "end_turn", False),
        TurnRecord("t1", 1, (chunk("again", "user_message_chunk"),), "cancelled", False),
        TurnRecord("t2", 2, (chunk("running"),), None, False),
    ]


async def test_turn_order_follows_begin_not_turn_id(store: SessionStore) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    for turn_id in ["z", "a", "m"]:
        await store.begin_turn("s", turn_id, [chunk(turn_id, "user_message_chunk")])
        await store.end_turn("s", turn_id, "end_turn")
    history = await store.load_history("s")
    assert [(t.turn_id, t.seq) for t in history] == [("z", 0), ("a", 1), ("m", 2)]


async def test_unicode_and_large_updates_come_back_equal(store: SessionStore) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    weird = 'héllo wörld — 日本語 🎉 \u0000 \u2028 "quotes" \\ back'
    big = "x" * 2_000_000
    nested: dict[str, Any] = {
        "sessionUpdate": "plan",
        "entries": [{"content": weird, "priority": "high", "n": i, "f": i / 3} for i in range(500)],
        "deep": {"a": [None, True, False, -(2**63), 2**64 - 1, 1e-300]},
    }
    await store.begin_turn("s", "t", [chunk(weird, "user_message_chunk")])
    await store.append_updates("s", "t", [chunk(big), nested, {weird: weird}])
    [turn] = await store.load_history("s")
    assert turn.updates == (chunk(weird, "user_message_chunk"), chunk(big), nested, {weird: weird})


async def test_packed_items_come_back_equal(store: SessionStore) -> None:
    # History hands large items over packed; they sit among plain ones, in order.
    await store.create(SessionRecord("s", cwd="/"))
    prompt = chunk("p" * 300_000 + " 日本語", "user_message_chunk")
    big = chunk("x" * 3_000_000 + "\n🎉")
    packed = PackedJson.pack(orjson.dumps(big))
    await store.write_turn(
        "s", "t", begin=[PackedJson.pack(orjson.dumps(prompt)), chunk("a")], updates=[chunk("b")]
    )
    await store.write_turn("s", "t", updates=[chunk("c"), packed, chunk("d")], end="end_turn")
    [turn] = await store.load_history("s")
    assert turn.updates == (prompt, chunk("a"), chunk("b"), chunk("c"), big, chunk("d"))
    assert turn.stop_reason == "end_turn"


async def test_history_items_are_copied_in(store: SessionStore) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    update = chunk("before")
    await store.begin_turn("s", "t", [update])
    update["content"]["text"] = "after"
    [turn] = await store.load_history("s")
    assert turn.updates == (chunk("before"),)


async def test_a_non_json_update_is_refused_and_nothing_is_stored(store: SessionStore) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    await store.begin_turn("s", "t", [])
    with pytest.raises(TypeError):
        await store.append_updates("s", "t", [chunk("ok"), {"bad": object()}])
    [turn] = await store.load_history("s")
    assert turn.updates == ()


async def test_turn_activity_bumps_updated_at(store: SessionStore) -> None:
    await store.create(SessionRecord("a", cwd="/"))
    await store.create(SessionRecord("b", cwd="/"))
    before = await store.get("a")
    assert before is not None

    async def newest() -> str:
        return (await store.list(limit=1))[0][0].session_id

    assert await newest() == "b"
    await store.begin_turn("a", "t", [])
    assert await newest() == "a"
    await store.update("b", title="b")
    await store.append_updates("a", "t", [chunk("x")])
    assert await newest() == "a"
    await store.update("b", title="b2")
    await store.end_turn("a", "t", "end_turn")
    assert await newest() == "a"
    after = await store.get("a")
    assert after is not None
    assert after.updated_at > before.updated_at
    assert after.created_at == before.created_at


async def test_an_immediate_turn_write_is_the_same_write(store: SessionStore) -> None:
    assert isinstance(store, ImmediateTurnWrites)
    await store.create(SessionRecord("s", cwd="/"))
    prompt = chunk("p", "user_message_chunk")
    assert store.write_turn_now("s", "t", begin=[prompt], updates=[chunk("a")], end="end_turn")
    assert store.write_turn_now("s", "u", begin=[prompt])
    assert store.write_turn_now("s", "u", updates=[chunk("b")], end="cancelled")
    # What it cannot decide at once, write_turn decides: it is refused either way.
    try:
        written = store.write_turn_now("s", "u", begin=[])
    except IllegalTransition:
        written = False
    assert not written
    with pytest.raises(IllegalTransition, match="ended"):
        await store.write_turn("s", "u", begin=[])
    assert await store.load_history("s") == [
        TurnRecord("t", 0, (prompt, chunk("a")), "end_turn", False),
        TurnRecord("u", 1, (prompt, chunk("b")), "cancelled", False),
    ]


async def test_unknown_session_is_resource_not_found_naming_it(store: SessionStore) -> None:
    calls = [
        store.begin_turn("ghost", "t", []),
        store.append_updates("ghost", "t", [chunk("x")]),
        store.end_turn("ghost", "t", "end_turn"),
        store.load_history("ghost"),
        store.update("ghost", title=None),
    ]
    for call in calls:
        with pytest.raises(ResourceNotFound, match="'ghost'") as info:
            await call
        assert info.value.data["sessionId"] == "ghost"


async def test_unknown_turn_is_resource_not_found_naming_it(store: SessionStore) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    with pytest.raises(ResourceNotFound, match="'nope'") as info:
        await store.append_updates("s", "nope", [chunk("x")])
    assert info.value.data == {"sessionId": "s", "turnId": "nope"}
    with pytest.raises(ResourceNotFound, match="'nope'"):
        await store.end_turn("s", "nope", "end_turn")


async def test_turn_misuse_is_an_illegal_transition(store: SessionStore) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    await store.begin_turn("s", "t", [chunk("p", "user_message_chunk")])
    with pytest.raises(IllegalTransition, match="running"):
        await store.begin_turn("s", "t", [])
    await store.end_turn("s", "t", "end_turn")
    with pytest.raises(IllegalTransition, match="ended"):
        await store.end_turn("s", "t", "cancelled")
    with pytest.raises(IllegalTransition, match="append_updates"):
        await store.append_updates("s", "t", [chunk("late")])
    with pytest.raises(IllegalTransition, match="begin_turn"):
        await store.begin_turn("s", "t", [])
    assert await store.load_history("s") == [
        TurnRecord("t", 0, (chunk("p", "user_message_chunk"),), "end_turn", False)
    ]


async def test_concurrent_writers_lose_nothing(store: SessionStore) -> None:
    for s in range(3):
        await store.create(SessionRecord(f"s{s}", cwd="/"))
        await store.begin_turn(f"s{s}", "t", [])

    async def writer(s: int) -> None:
        for i in range(20):
            await store.append_updates(f"s{s}", "t", [{"i": i, "j": 0}, {"i": i, "j": 1}])

    async with anyio.create_task_group() as tg:
        for s in range(3):
            tg.start_soon(writer, s)
    for s in range(3):
        [turn] = await store.load_history(f"s{s}")
        assert turn.updates == tuple({"i": i, "j": j} for i in range(20) for j in range(2))


async def test_a_cancelled_call_leaves_the_store_usable(store: SessionStore) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    await store.begin_turn("s", "t", [])
    with anyio.CancelScope() as scope:
        scope.cancel()
        await store.append_updates("s", "t", [chunk("never")])
    assert scope.cancelled_caught
    await store.append_updates("s", "t", [chunk("after")])
    [turn] = await store.load_history("s")
    assert turn.updates == (chunk("after"),)


async def test_a_closed_store_refuses_calls(store: SessionStore) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    await store.aclose()
    await store.aclose()
    with pytest.raises(anyio.ClosedResourceError):
        await store.get("s")
    with pytest.raises(anyio.ClosedResourceError):
        await store.list()


_keys = st.text(st.characters(exclude_categories=["Cs"]))
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"])),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(exclude_categories=["Cs"])), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(updates=st.lists(st.dictionaries(_keys, _json, max_size=5), max_size=5))
async def test_any_json_updates_come_back_equal(
    store: SessionStore, updates: list[dict[str, Any]]
) -> None:
    # The store is shared by the examples; a fresh session per example keeps them apart.
    sid = f"s{len((await store.list(limit=1000))[0])}"
    await store.create(SessionRecord(sid, cwd="/"))
    await store.begin_turn(sid, "t", updates[:1])
    await store.append_updates(sid, "t", updates[1:])
    [turn] = await store.load_history(sid)
    assert turn.updates == tuple(updates)
