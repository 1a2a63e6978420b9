"""What only the journaled SQLite store promises: a turn's end made durable by its journal is
in the tables once, whoever applies it, even after its process was killed."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import orjson
import pytest

from acp_agent.store import DEFAULT_OWNER, SessionRecord, SqliteSessionStore, TurnRecord, journal

from .test_sqlite import child, readline

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(sys.platform == "win32", reason="no flock: nothing is journaled"),
]

ME = DEFAULT_OWNER


def item(**fields: object) -> str:
    return orjson.dumps(fields).decode()


def journals(db: Path) -> list[str]:
    return sorted(os.listdir(f"{db}.journals"))


def leave(db: Path, files: dict[str, bytes]) -> None:
    """Journal files as a process that died (or is making one) leaves them."""
    directory = Path(f"{db}.journals")
    directory.mkdir()
    for name, data in files.items():
        (directory / name).write_bytes(data)


async def test_a_turns_end_is_journaled_and_reaches_the_tables(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    async with await journal.JournaledStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))
        assert store.write_turn_now("s", "t0", begin=[item(p=0)], updates=[item(u=0)], end="x")
        await store.write_turn("s", "t1", begin=[item(p=1)])
        assert store.write_turn_now("s", "t1", updates=[item(u=1)], end="end_turn")
        [name] = journals(db)
        assert name.endswith(".journal")
        # Any later operation sees the journaled writes.
        assert await store.load_history(ME, "s") == [
            TurnRecord("t0", (item(p=0), item(u=0)), "x"),
            TurnRecord("t1", (item(p=1), item(u=1)), "end_turn"),
        ]
    assert journals(db) == []  # applied and removed at close
    async with await SqliteSessionStore.open(db) as plain:
        assert len(await plain.load_history(ME, "s")) == 2


async def test_only_what_memory_can_check_is_journaled(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    async with await SqliteSessionStore.open(db) as plain:
        await plain.create(SessionRecord("old", cwd="/"))
    async with await journal.JournaledStore.open(db) as store:
        # A session neither created nor loaded here: its turn ids are unknown here.
        await store.get(ME, "old")
        assert not store._known("old", "t", [])
        await store.load_history(ME, "old")
        assert store._known("old", "t", [])
        # A turn not begun here, or not running.
        assert not store._known("old", "t", None)
        await store.write_turn("old", "t", begin=[item(p=0)])
        assert store._known("old", "t", None)
        await store.write_turn("old", "t", end="end_turn")
        assert not store._known("old", "t", None)
        assert not store._known("old", "t", [])


async def test_an_abandoned_journal_is_applied_once_by_the_next_opener(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    async with await SqliteSessionStore.open(db) as plain:
        await plain.create(SessionRecord("s", cwd="/"))
        await plain.write_turn("s", "t0", begin=[item(p=0)], end="end_turn")
    records = [
        journal._encode(("s", "t0", [item(p=0)], [], "end_turn")),  # applied before it died
        journal._encode(("s", "t1", [item(p=1)], [item(u=1)], "cancelled")),
        journal._encode(("s", "t2", [item(p=2)], [], "end_turn"))[:-3],  # torn: not answered
    ]
    leave(db, {"1-dead.journal": b"".join(records), "2-being-made.new": records[2]})
    async with await journal.JournaledStore.open(db) as store:
        assert await store.load_history(ME, "s") == [
            TurnRecord("t0", (item(p=0),), "end_turn"),
            TurnRecord("t1", (item(p=1), item(u=1)), "cancelled"),
        ]
        assert "1-dead.journal" not in journals(db)
    assert journals(db) == ["2-being-made.new"]


async def test_a_live_processs_journal_is_left_to_it(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    async with await journal.JournaledStore.open(db) as first:
        await first.create(SessionRecord("s", cwd="/"))
        [mine] = journals(db)
        async with await journal.JournaledStore.open(db) as second:
            assert mine in journals(db)  # locked: not touched
            assert len(journals(db)) == 2
            await second.get(ME, "s")
        assert first.write_turn_now("s", "t", begin=[item(p=0)], end="end_turn")
    async with await SqliteSessionStore.open(db) as plain:
        [turn] = await plain.load_history(ME, "s")
        assert turn.stop_reason == "end_turn"


async def test_a_killed_process_loses_no_journaled_turn(tmp_path: Path) -> None:
    db = tmp_path / "crash.sqlite3"
    n = 200
    with anyio.fail_after(50):
        async with child("journal-crash", db, n) as (process, out):
            assert await readline(out) == b"ready"
            os.kill(process.pid, signal.SIGKILL)
            assert await process.wait() == -signal.SIGKILL
    async with await journal.JournaledStore.open(db) as store:
        turns = await store.load_history(ME, "crash")
    assert turns == [TurnRecord(f"t{i}", (item(prompt=i), item(i=i)), "end_turn") for i in range(n)]
    assert journals(db) == []
