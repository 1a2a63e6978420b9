"""The SessionStore contract, run against every implementation (see ``OPENERS``): records.

Create, get, update, timestamps, owners, list and pagination, delete. Turns, concurrency
and the property tests are in ``test_contract_turns.py``.
"""

from __future__ import annotations

import base64
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
import pytest

from acp_agent.errors import InvalidParams, ResourceNotFound
from acp_agent.store import SessionRecord, SessionStore, TurnWrite

from ._contract import ME, chunk, ids, user
from .conftest import MakeStore

pytestmark = pytest.mark.anyio


TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


async def all_pages(
    store: SessionStore, *, limit: int, cwd: str | None = None, owner: str = ME
) -> list[list[SessionRecord]]:
    pages: list[list[SessionRecord]] = []
    cursor: str | None = None
    while True:
        page, cursor = await store.list(owner, cwd=cwd, cursor=cursor, limit=limit)
        pages.append(page)
        if cursor is None:
            return pages


def _fields(record: SessionRecord, **changes: Any) -> SessionRecord:
    values = {name: getattr(record, name) for name in SessionRecord.__slots__}
    return SessionRecord(**{**values, **changes})


# --- records ---------------------------------------------------------------------------------


async def test_create_then_get_round_trips_every_field(store: SessionStore) -> None:
    record = SessionRecord(
        "s1",
        cwd="/work/a",
        owner="alice",
        additional_directories=("/work/b", "/work/c"),
        title="A title",
        mode_id="code",
        config={"model": "small", "temperature": 0.5, "tools": ["a", "b"], "on": True},
    )
    created = await store.create(record)
    assert TS.match(created.created_at)
    assert created.updated_at == created.created_at
    assert created == _fields(record, created_at=created.created_at, updated_at=created.updated_at)
    assert await store.get("alice", "s1") == created
    assert await store.get("alice", "nope") is None


async def test_a_record_has_defaults_for_everything_but_id_and_cwd(store: SessionStore) -> None:
    created = await store.create(SessionRecord("s", cwd="/"))
    assert (created.owner, created.additional_directories, created.title) == (ME, (), None)
    assert (created.mode_id, created.config) == (None, {})
    assert await store.get(ME, "s") == created


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
    assert await store.get(ME, "s") == created


async def test_create_duplicate_id_is_refused_whoever_asks(store: SessionStore) -> None:
    await store.create(SessionRecord("dup", cwd="/a"))
    for owner in (ME, "mallory"):
        with pytest.raises(InvalidParams, match="dup"):
            await store.create(SessionRecord("dup", cwd="/b", owner=owner))
    record = await store.get(ME, "dup")
    assert record is not None
    assert record.cwd == "/a"
    assert await store.get("mallory", "dup") is None


async def test_stored_config_is_not_aliased(store: SessionStore) -> None:
    config: dict[str, Any] = {"k": [1]}
    await store.create(SessionRecord("s", cwd="/", config=config))
    config["k"].append(2)
    got = await store.get(ME, "s")
    assert got is not None
    assert got.config == {"k": [1]}
    got.config["k"].append(3)
    again = await store.get(ME, "s")
    assert again is not None
    assert again.config == {"k": [1]}


async def test_update_replaces_the_fields_and_bumps_updated_at(store: SessionStore) -> None:
    created = await store.create(
        SessionRecord("s", cwd="/a", title="t", mode_id="ask", config={"a": 1})
    )
    changed = SessionRecord(
        "s",
        cwd="/b",
        additional_directories=("/x", "/y"),
        title=None,
        mode_id="code",
        config={"b": 2},
        created_at="1999-01-01T00:00:00.000000Z",  # ignored
        updated_at="1999-01-01T00:00:00.000000Z",  # ignored
    )
    updated = await store.update(changed)
    assert updated == _fields(changed, created_at=created.created_at, updated_at=updated.updated_at)
    assert updated.updated_at > created.updated_at
    assert await store.get(ME, "s") == updated


async def test_update_of_an_unknown_or_foreign_session_names_it(store: SessionStore) -> None:
    await store.create(SessionRecord("mine", cwd="/", title="kept"))
    for record in (SessionRecord("ghost", cwd="/"), SessionRecord("mine", cwd="/", owner="eve")):
        with pytest.raises(ResourceNotFound, match=record.session_id) as info:
            await store.update(record)
        assert info.value.data == {"sessionId": record.session_id}
    got = await store.get(ME, "mine")
    assert got is not None
    assert got.title == "kept"


async def test_timestamps_strictly_increase_even_with_a_stuck_clock(
    make_store: MakeStore,
) -> None:
    frozen = datetime(2030, 5, 6, 7, 8, 9, tzinfo=timezone.utc)
    store = await make_store(clock=lambda: frozen)
    a = await store.create(SessionRecord("a", cwd="/"))
    b = await store.create(SessionRecord("b", cwd="/"))
    assert a.created_at == "2030-05-06T07:08:09.000000Z"
    assert b.created_at == "2030-05-06T07:08:09.000001Z"
    c = await store.update(SessionRecord("a", cwd="/", title="x"))
    assert c.updated_at == "2030-05-06T07:08:09.000002Z"


async def test_timestamps_are_utc_from_an_aware_clock(make_store: MakeStore) -> None:
    plus_two = timezone(timedelta(hours=2))
    store = await make_store(clock=lambda: datetime(2030, 1, 1, 2, 0, tzinfo=plus_two))
    record = await store.create(SessionRecord("a", cwd="/"))
    assert record.created_at == "2030-01-01T00:00:00.000000Z"


# --- owners ----------------------------------------------------------------------------------


async def test_each_owner_sees_only_its_own_sessions(store: SessionStore) -> None:
    await store.create(SessionRecord("a1", cwd="/", owner="alice"))
    await store.create(SessionRecord("b1", cwd="/", owner="bob"))
    await store.create(SessionRecord("a2", cwd="/", owner="alice"))
    await store.write_turn(TurnWrite("a1", "t", begin=[user("secret")], end="end_turn"))

    assert await ids(store, "alice") == ["a1", "a2"]  # the turn made a1 the newest
    assert await ids(store, "bob") == ["b1"]
    assert await ids(store, ME) == []
    assert await store.get("bob", "a1") is None
    with pytest.raises(ResourceNotFound, match="a1"):
        await store.load_history("bob", "a1")
    assert await store.delete("bob", "a1") is False
    assert [t.updates for t in await store.load_history("alice", "a1")] == [(user("secret"),)]
    assert await store.delete("alice", "a1") is True
    assert await ids(store, "alice") == ["a2"]


# --- list ------------------------------------------------------------------------------------


async def test_list_is_newest_first_and_filters_on_cwd(store: SessionStore) -> None:
    for sid, cwd in [("a", "/x"), ("b", "/y"), ("c", "/x"), ("d", "/x")]:
        await store.create(SessionRecord(sid, cwd=cwd))
    await store.update(SessionRecord("a", cwd="/x", title="touched"))

    page, cursor = await store.list(ME)
    assert [r.session_id for r in page] == ["a", "d", "c", "b"]
    assert page[0].title == "touched"
    assert cursor is None
    assert await ids(store, cwd="/x") == ["a", "d", "c"]
    assert await store.list(ME, cwd="/nowhere") == ([], None)


async def test_list_breaks_timestamp_ties_by_session_id(store: SessionStore) -> None:
    same = "2024-01-01T00:00:00.000000Z"
    for sid in ["m", "z", "a"]:
        await store.create(SessionRecord(sid, cwd="/", created_at=same, updated_at=same))
    assert await ids(store) == ["z", "m", "a"]
    pages = await all_pages(store, limit=1)
    assert [p[0].session_id for p in pages] == ["z", "m", "a"]


async def test_list_of_an_empty_store(store: SessionStore) -> None:
    assert await store.list(ME) == ([], None)


@pytest.mark.parametrize("limit", [1, 2, 3])
async def test_pagination_yields_every_session_exactly_once(
    store: SessionStore, limit: int
) -> None:
    for i in range(7):
        await store.create(SessionRecord(f"s{i}", cwd="/even" if i % 2 == 0 else "/odd"))
    everything, cursor = await store.list(ME, limit=100)
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
    page, cursor = await store.list(ME, limit=2)
    assert cursor is not None
    page, cursor = await store.list(ME, limit=2, cursor=cursor)
    assert len(page) == 2
    assert cursor is None


async def test_pagination_is_stable_under_concurrent_inserts(store: SessionStore) -> None:
    for i in range(6):
        await store.create(SessionRecord(f"old{i}", cwd="/"))
    first, cursor = await store.list(ME, limit=2)
    for i in range(5):
        await store.create(SessionRecord(f"new{i}", cwd="/"))
    seen = [r.session_id for r in first]
    while cursor is not None:
        page, cursor = await store.list(ME, limit=2, cursor=cursor)
        seen += [r.session_id for r in page]
    assert sorted(seen) == sorted(f"old{i}" for i in range(6))
    assert len(seen) == len(set(seen))


def _b64(value: Any) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).decode()


@pytest.mark.parametrize(
    "cursor",
    ["garbage", "", "é", "!!!!", _b64([1, 2]), _b64(["a"]), _b64({"a": "b"}), _b64(["a", "b", 1])],
)
async def test_a_bad_cursor_is_invalid_params(store: SessionStore, cursor: str) -> None:
    await store.create(SessionRecord("s", cwd="/"))
    with pytest.raises(InvalidParams):
        await store.list(ME, cursor=cursor)


async def test_limit_must_be_positive(store: SessionStore) -> None:
    with pytest.raises(ValueError, match="limit"):
        await store.list(ME, limit=0)


# --- delete ----------------------------------------------------------------------------------


async def test_delete_removes_the_record_and_its_history(store: SessionStore) -> None:
    await store.create(SessionRecord("gone", cwd="/"))
    await store.create(SessionRecord("kept", cwd="/"))
    await store.write_turn(
        TurnWrite("gone", "t0", begin=[user("hi")], updates=[chunk("hello")], end="x")
    )
    await store.write_turn(TurnWrite("gone", "t1", begin=[user("open")]))

    assert await store.delete(ME, "gone") is True
    assert await store.get(ME, "gone") is None
    assert await ids(store) == ["kept"]
    with pytest.raises(ResourceNotFound, match="gone"):
        await store.load_history(ME, "gone")
    with pytest.raises(ResourceNotFound, match="gone"):
        await store.write_turn(TurnWrite("gone", "t1", updates=[chunk("late")]))
    assert await store.delete(ME, "gone") is False
    assert await store.delete(ME, "never") is False

    # The id can be reused, and nothing of the old history comes back.
    await store.create(SessionRecord("gone", cwd="/"))
    assert await store.load_history(ME, "gone") == []
    with pytest.raises(ResourceNotFound, match="t1"):
        await store.write_turn(TurnWrite("gone", "t1", updates=[chunk("x")]))
