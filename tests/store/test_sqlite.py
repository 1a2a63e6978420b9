"""What only the SQLite store promises: persistence, migrations, WAL, sharing, crash safety."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import sys
import threading
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import orjson
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from acp_agent.errors import IllegalTransition
from acp_agent.store import SchemaVersionError, SessionRecord, SqliteSessionStore, TurnRecord
from acp_agent.store import sqlite as sqlite_store
from acp_agent.store.sqlite import APPLY_AT, SCHEMA_VERSION

pytestmark = pytest.mark.anyio

CHILD = Path(__file__).with_name("_child.py")
REPO = Path(__file__).resolve().parents[2]


def raw(path: Path, sql: str) -> list[tuple[Any, ...]]:
    """Run one statement on a separate plain connection (closed at once)."""
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql).fetchall()


async def test_everything_survives_a_reopen_and_an_open_turn_is_interrupted(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.sqlite3"
    record = SessionRecord(
        "s", cwd="/w", additional_directories=("/x",), title="t", mode_id="m", config={"a": 1}
    )
    async with await SqliteSessionStore.open(db) as first:
        await first.create(record)
        await first.begin_turn("s", "done", [{"p": 0}])
        await first.end_turn("s", "done", "end_turn")
        await first.begin_turn("s", "open", [{"p": 1}])
        await first.append_updates("s", "open", [{"u": i} for i in range(5)])
        await first.append_updates("s", "open", [{"u": 5}])
        assert [t.interrupted for t in await first.load_history("s")] == [False, False]
        final = await first.get("s")

        # A second instance on the same file does not have the turn open.
        async with await SqliteSessionStore.open(db) as other:
            assert [t.interrupted for t in await other.load_history("s")] == [False, True]

    async with await SqliteSessionStore.open(db) as second:
        assert await second.get("s") == final
        assert await second.load_history("s") == [
            TurnRecord("done", 0, ({"p": 0},), "end_turn", False),
            TurnRecord("open", 1, ({"p": 1}, *({"u": i} for i in range(6))), None, True),
        ]
        # An interrupted turn can still be closed, and then it is no longer interrupted.
        await second.end_turn("s", "open", "cancelled")
        await second.begin_turn("s", "next", [])
        history = await second.load_history("s")
        assert [(t.turn_id, t.seq, t.stop_reason, t.interrupted) for t in history] == [
            ("done", 0, "end_turn", False),
            ("open", 1, "cancelled", False),
            ("next", 2, None, False),
        ]


async def test_updated_at_survives_a_reopen(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    async with await SqliteSessionStore.open(db) as first:
        await first.create(SessionRecord("s", cwd="/"))
        await first.begin_turn("s", "t", [])
        before = await first.get("s")
    async with await SqliteSessionStore.open(db) as second:
        assert await second.get("s") == before


async def test_an_empty_file_is_migrated_and_reopening_is_idempotent(tmp_path: Path) -> None:
    db = tmp_path / "v0.sqlite3"
    db.touch()
    assert raw(db, "PRAGMA user_version") == [(0,)]
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))
    schema = raw(db, "SELECT type, name, sql FROM sqlite_master ORDER BY name")
    assert raw(db, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert {"sessions", "turns", "updates", "sessions_by_cwd", "sessions_by_updated"} <= {
        name for _, name, _ in schema
    }
    for _ in range(2):
        async with await SqliteSessionStore.open(db) as store:
            assert (await store.get("s")) is not None
        assert raw(db, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
        assert raw(db, "SELECT type, name, sql FROM sqlite_master ORDER BY name") == schema


async def test_a_v0_database_with_foreign_tables_is_migrated(tmp_path: Path) -> None:
    db = tmp_path / "other.sqlite3"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE unrelated (x)")
        conn.commit()
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))
    assert raw(db, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert raw(db, "SELECT count(*) FROM unrelated") == [(0,)]


async def test_a_v1_database_keeps_its_history_through_the_v2_migration(tmp_path: Path) -> None:
    # A file written by schema 1: history rows only in ``updates``, a (cwd, ...) index.
    from acp_agent.store.sqlite import _MIGRATIONS

    db = tmp_path / "v1.sqlite3"
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        for statement in _MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 1")
        conn.execute(
            "INSERT INTO sessions (id, cwd, created_at, updated_at) VALUES ('s', '/w', 'a', 'b')"
        )
        conn.execute(
            "INSERT INTO turns (session_id, turn_id, seq, stop_reason, started_at) "
            "VALUES ('s', 'old', 0, 'end_turn', 'a')"
        )
        for idx, body in enumerate(['{"p":0}\n{"u":1}', '{"u":2}']):
            conn.execute(
                "INSERT INTO updates (session_id, turn_id, idx, body) VALUES ('s', 'old', ?, ?)",
                (idx, body),
            )
    async with await SqliteSessionStore.open(db) as store:
        assert raw(db, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
        await store.write_turn("s", "new", begin=[{"p": 1}], updates=[{"u": 3}], end="end_turn")
        await store.begin_turn("s", "open", [{"p": 2}])
        await store.append_updates("s", "open", [{"u": 4}])
        history = await store.load_history("s")
        assert [(t.turn_id, t.updates, t.stop_reason) for t in history] == [
            ("old", ({"p": 0}, {"u": 1}, {"u": 2}), "end_turn"),
            ("new", ({"p": 1}, {"u": 3}), "end_turn"),
            ("open", ({"p": 2}, {"u": 4}), None),
        ]
        records, _ = await store.list(cwd="/w")
        assert [r.session_id for r in records] == ["s"]
    # A short turn is one row: its history rides in the turn's row.
    assert raw(db, "SELECT count(*) FROM updates WHERE turn_id = 'new'") == [(0,)]


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "future.sqlite3"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(SchemaVersionError, match="newer"):
        await SqliteSessionStore.open(db)


async def test_wal_mode_foreign_keys_and_parents(tmp_path: Path) -> None:
    db = tmp_path / "a" / "b" / "s.sqlite3"
    async with await SqliteSessionStore.open(db) as store:
        assert raw(db, "PRAGMA journal_mode") == [("wal",)]
        await store.create(SessionRecord("s", cwd="/"))
        await store.begin_turn("s", "t", [{"a": 1}, {"b": 2}])
        await store.get("s")  # any operation applies the queued writes first
        # the first batch (the two prompt updates together) rides in the turn's row...
        assert raw(db, "SELECT count(*) FROM updates") == [(0,)]
        assert raw(db, "SELECT body FROM turns") == [('{"a":1}\n{"b":2}',)]
        # ...and each later batch is one row
        await store.append_updates("s", "t", [{"c": 3}, {"d": 4}])
        await store.get("s")
        assert raw(db, "SELECT count(*) FROM updates") == [(1,)]
        assert await store.delete("s") is True
        # ON DELETE CASCADE removed the turn and its updates, not just the session row.
        assert raw(db, "SELECT count(*) FROM turns") == [(0,)]
        assert raw(db, "SELECT count(*) FROM updates") == [(0,)]


async def test_the_list_queries_use_the_indexes(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    async with await SqliteSessionStore.open(db):
        pass
    page = "(updated_at, id) < ('2025', 's')"
    for where, index in [
        ("", "sessions_by_updated"),
        (f"WHERE {page} ", "sessions_by_updated"),
        ("WHERE cwd = '/x' ", "sessions_by_cwd"),
        (f"WHERE cwd = '/x' AND {page} ", "sessions_by_cwd"),
    ]:
        plan = raw(
            db,
            f"EXPLAIN QUERY PLAN SELECT * FROM sessions {where}"
            "ORDER BY updated_at DESC, id DESC LIMIT 3",
        )
        details = " ".join(str(row[-1]) for row in plan)
        assert index in details
        assert "TEMP B-TREE" not in details
    plan = raw(
        db,
        "EXPLAIN QUERY PLAN SELECT body FROM updates WHERE session_id = 's' ORDER BY turn_id, idx",
    )
    assert "TEMP B-TREE" not in " ".join(str(row[-1]) for row in plan)


async def test_open_is_required_and_happens_once(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "s.sqlite3")
    assert not (tmp_path / "s.sqlite3").exists()  # no I/O in __init__
    with pytest.raises(anyio.ClosedResourceError, match="never opened"):
        await store.get("s")
    await store.aopen()
    try:
        with pytest.raises(RuntimeError, match="once"):
            await store.aopen()
    finally:
        await store.aclose()


@asynccontextmanager
async def child(
    mode: str, db: Path, n: int
) -> AsyncIterator[tuple[Process, BufferedByteReceiveStream]]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    process = await anyio.open_process(
        [sys.executable, str(CHILD), mode, str(db), str(n)], env=env, cwd=str(REPO)
    )
    try:
        assert process.stdout is not None
        yield process, BufferedByteReceiveStream(process.stdout)
    finally:
        if process.returncode is None:
            process.kill()
        await process.aclose()


async def readline(stream: BufferedByteReceiveStream) -> bytes:
    return await stream.receive_until(b"\n", 1 << 20)


async def test_two_processes_share_one_file(tmp_path: Path) -> None:
    db = tmp_path / "shared.sqlite3"
    n = 200
    with anyio.fail_after(50):
        async with await SqliteSessionStore.open(db) as store:
            await store.create(SessionRecord("parent", cwd="/parent"))
            await store.begin_turn("parent", "t0", [{"who": "parent", "prompt": True}])
            async with child("share", db, n) as (process, out):
                assert await readline(out) == b"ready"
                for i in range(n):  # while the child appends too
                    await store.append_updates("parent", "t0", [{"who": "parent", "i": i}])
                await store.end_turn("parent", "t0", "end_turn")
                assert await readline(out) == b"written"
                assert process.stdin is not None
                await process.stdin.send(b"go\n")
                seen_by_child = orjson.loads(await readline(out))
                assert await process.wait() == 0

            assert seen_by_child["sessions"] == ["child", "parent"]
            parent_updates = [{"who": "parent", "prompt": True}] + [
                {"who": "parent", "i": i} for i in range(n)
            ]
            assert seen_by_child["turns"] == [[parent_updates, "end_turn", False]]

            [turn] = await store.load_history("child")
            assert turn.updates == (
                {"who": "child", "prompt": True},
                *({"who": "child", "i": i} for i in range(n)),
            )
            assert (turn.stop_reason, turn.interrupted) == ("end_turn", False)
            records, _ = await store.list()
            assert [r.session_id for r in records] in (["child", "parent"], ["parent", "child"])


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
async def test_a_killed_process_loses_nothing_it_appended(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "crash.sqlite3"
    n = 100
    with anyio.fail_after(50):
        async with child("crash", db, n) as (process, out):
            assert await readline(out) == b"ready"
            os.kill(process.pid, signal.SIGKILL)
            assert await process.wait() == -signal.SIGKILL

    # The turn's writes were still journaled (its begin and n / 10 appends); the next
    # instance applies them when it opens.
    assert queued_rows(db) == 1 + n // 10
    # Had it been killed in the middle of a write, the record's first bytes would be there.
    [segment] = journal_files(db)
    torn = sqlite_store._encode_record(("crash", "t0", "now", False, None, "{}"))[:-3]
    with segment.open("ab") as file:
        file.write(torn)
    caplog.set_level(logging.WARNING, logger="acp_agent.store.sqlite")
    async with await SqliteSessionStore.open(db) as store:
        # Applied, then deleted (its writer is gone), the torn record with it; the one
        # left is the new instance's own.
        assert not segment.exists()
        assert len(journal_files(db)) == 1
        assert f"dropped {len(torn)} bytes of a torn write" in caplog.text
        assert segment.name in caplog.text
        record = await store.get("crash")
        assert record is not None
        assert record.title == "dies mid-turn"
        [turn] = await store.load_history("crash")
        assert turn.updates == (
            {"sessionUpdate": "user_message_chunk", "n": -1},
            *({"i": j, "text": "ü" * j} for j in range(n)),
        )
        assert turn.stop_reason is None
        assert turn.interrupted is True


async def test_rows_from_before_batching_still_load(tmp_path: Path) -> None:
    """A file whose rows each hold one item (as written before batching) reads the same."""
    db = tmp_path / "s.sqlite3"
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))
        await store.begin_turn("s", "t", [{"a": 1}])
        await store.append_updates("s", "t", [{"b": "line\nbreak"}, {"c": 3}])
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "INSERT INTO updates (session_id, turn_id, idx, body) VALUES ('s', 't', 9, ?)",
            ('{"d":4}',),
        )
    conn.close()
    async with await SqliteSessionStore.open(db) as store:
        (turn,) = await store.load_history("s")
        assert turn.updates == ({"a": 1}, {"b": "line\nbreak"}, {"c": 3}, {"d": 4})


async def test_a_turn_write_never_holds_the_event_loop_while_another_writer_has_the_lock(
    tmp_path: Path,
) -> None:
    db = tmp_path / "locked.sqlite3"
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))
        other = sqlite3.connect(db, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # another process is writing
            # A short turn is journaled: it needs no database lock at all.
            with anyio.fail_after(2):
                await store.write_turn("s", "short", begin=[{"p": 0}], end="end_turn")
            assert queued_rows(db) == 1
            # A large one waits for the lock on the worker thread, not on the event loop.
            written = anyio.Event()

            async def write() -> None:
                big = {"p": "x" * (sqlite_store.INLINE_CHARS + 1)}
                await store.write_turn("s", "large", begin=[big], end="end_turn")
                written.set()

            # Had the write waited for the lock on this thread, the loop would be stuck
            # inside it and nothing below would run until busy_timeout (5 s) ran out.
            with anyio.fail_after(2):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(write)
                    await anyio.wait_all_tasks_blocked()
                    assert not written.is_set()
                    other.execute("COMMIT")
            assert written.is_set()
        finally:
            other.close()
        turns = await store.load_history("s")
        assert [(t.turn_id, t.stop_reason) for t in turns] == [
            ("short", "end_turn"),
            ("large", "end_turn"),
        ]


async def test_a_long_burst_of_short_turns_is_applied_and_checkpointed_as_it_goes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "wal.sqlite3"
    wal = Path(f"{db}-wal")
    rounds = 3
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))
        for i in range(rounds * APPLY_AT):
            await store.write_turn("s", f"t{i}", begin=[{"p": i}], end="end_turn")
        assert store._worker is not None
        await store._worker.run(lambda: None)  # after what the burst handed the worker
        # Each turn appends a page to the WAL; unchecked it would hold them all (about
        # 13 MB here); applied, checkpointed and restarted, it is cut back.
        assert (await anyio.Path(wal).stat()).st_size < 2 * sqlite_store.WAL_BYTES
        assert queued_rows(db) < APPLY_AT
        history = await store.load_history("s")
        assert len(history) == rounds * APPLY_AT


def journal_files(db: Path) -> list[Path]:
    """The journal segments beside ``db`` (temporary files too)."""
    directory = Path(f"{db}-queue")
    return sorted(directory.iterdir()) if directory.exists() else []


def short_journal_writes(
    monkeypatch: pytest.MonkeyPatch, store: SqliteSessionStore, count: int
) -> list[int]:
    """Make the store's next ``count`` journal writes take half their record (a full disk);
    the list returned holds how many are still to come."""
    real_write = os.write
    left = [count]

    def short_write(fd: int, data: bytes) -> int:
        if fd == store._segment_fd and left[0]:
            left[0] -= 1
            return real_write(fd, data[: len(data) // 2])
        return real_write(fd, data)

    monkeypatch.setattr(sqlite_store.os, "write", short_write)
    return left


def queued_rows(db: Path) -> int:
    """The writes that are journaled (or queued by schema 3) and not applied yet."""
    count = int(raw(db, "SELECT count(*) FROM queued_writes")[0][0])
    progress = dict(raw(db, "SELECT segment, applied FROM journal_progress"))
    directory = Path(f"{db}-queue")
    for name in sqlite_store._journal_segments(directory):
        data = (directory / name).read_bytes()[progress.get(name, 0) :]
        count += len(sqlite_store._decode_records(data)[0])
    return count


@pytest.fixture
def queue_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A database path, with the worker's background apply (on quiet) switched off."""
    monkeypatch.setattr(sqlite_store, "APPLY_IDLE", 3600.0)
    return tmp_path / "q.sqlite3"


async def test_a_short_turn_write_is_queued_and_applied_once_by_whichever_instance_comes_next(
    queue_db: Path,
) -> None:
    db = queue_db
    first = await SqliteSessionStore.open(db)
    try:
        await first.create(SessionRecord("s", cwd="/"))
        for i in range(5):
            await first.write_turn(
                "s", f"t{i}", begin=[{"p": i}], updates=[{"u": i}], end="end_turn"
            )
        await first.begin_turn("s", "open", [{"p": 5}])
        await first.append_updates("s", "open", [{"u": 5}])
        # Durable (journaled) but not applied: the process could be killed now.
        assert queued_rows(db) == 7
        assert raw(db, "SELECT count(*) FROM turns") == [(0,)]

        # Another instance (a restarted agent) applies them when it opens.
        async with await SqliteSessionStore.open(db) as second:
            assert queued_rows(db) == 0
            history = await second.load_history("s")
            assert [(t.turn_id, t.updates, t.stop_reason) for t in history] == [
                *((f"t{i}", ({"p": i}, {"u": i}), "end_turn") for i in range(5)),
                ("open", ({"p": 5}, {"u": 5}), None),
            ]
            assert history[-1].interrupted  # not this instance's turn

        # The first instance finds nothing left to apply, so nothing is applied twice, and
        # its turn is still its own.
        await first.end_turn("s", "open", "end_turn")
        history = await first.load_history("s")
        assert [t.seq for t in history] == list(range(6))
        assert (history[-1].updates, history[-1].stop_reason) == (
            ({"p": 5}, {"u": 5}),
            "end_turn",
        )
    finally:
        await first.aclose()
    assert queued_rows(db) == 0


async def test_every_operation_sees_the_writes_queued_before_it(queue_db: Path) -> None:
    db = queue_db
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("a", cwd="/"))
        await store.create(SessionRecord("b", cwd="/"))
        await store.write_turn("a", "t", begin=[{"p": 0}], end="end_turn")
        assert queued_rows(db) == 1
        records, _ = await store.list()  # applied first, so "a" is the most recent
        assert [r.session_id for r in records] == ["a", "b"]
        assert queued_rows(db) == 0
        # A large write (not queued) after a queued one keeps their order.
        await store.begin_turn("b", "t", [{"p": 1}])
        await store.append_updates("b", "t", [{"big": "x" * (sqlite_store.INLINE_CHARS + 1)}])
        assert queued_rows(db) == 0
        [turn] = await store.load_history("b")
        assert [u.keys() for u in turn.updates] == [{"p"}, {"big"}]
        # A queued begin of a turn id that is still queued is refused like any other.
        await store.write_turn("b", "u", begin=[], end="end_turn")
        with pytest.raises(IllegalTransition, match="ended"):
            await store.begin_turn("b", "u", [])


async def test_the_worker_applies_queued_writes_once_the_store_is_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "q.sqlite3"
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))
        applied = threading.Event()
        apply = store._apply_queued

        def observed(conn: sqlite3.Connection) -> None:
            apply(conn)
            applied.set()

        monkeypatch.setattr(store, "_apply_queued", observed)
        await store.write_turn("s", "t", begin=[{"p": 0}], end="end_turn")
        # No call of ours makes it: the worker's idle timer does (a thread event, waited
        # for off the event loop).
        assert await anyio.to_thread.run_sync(applied.wait, 10.0)
        assert queued_rows(db) == 0
        assert raw(db, "SELECT turn_id, stop_reason FROM turns") == [("t", "end_turn")]


async def test_a_queued_write_that_cannot_be_applied_is_dropped_and_the_rest_applied(
    queue_db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = queue_db
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("gone", cwd="/"))
        await store.create(SessionRecord("kept", cwd="/"))
        await store.write_turn("gone", "t", begin=[{"p": 0}], end="end_turn")
        await store.write_turn("kept", "t", begin=[{"p": 1}], end="end_turn")
        # Another process deletes the session before its queued turn is applied.
        with closing(sqlite3.connect(db, isolation_level=None)) as other:
            other.execute("DELETE FROM sessions WHERE id = 'gone'")
        [turn] = await store.load_history("kept")
        assert turn.updates == ({"p": 1},)
        assert queued_rows(db) == 0
    assert "dropped a queued write to turn t of gone" in caplog.text


async def test_a_large_write_is_checkpointed_after_it(tmp_path: Path) -> None:
    db = tmp_path / "big.sqlite3"
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))
        big = {"text": "x" * (2 * sqlite_store.WAL_BYTES)}
        await store.write_turn("s", "t", begin=[big], end="end_turn")
        # Checkpointed and cut back to the limit when the WAL restarted.
        assert (await anyio.Path(f"{db}-wal").stat()).st_size <= sqlite_store.WAL_BYTES
        [turn] = await store.load_history("s")
        assert turn.updates == (big,)


async def test_a_failure_while_applying_leaves_the_writes_queued(
    queue_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = queue_db
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))
        await store.write_turn("s", "t0", begin=[{"p": 0}], end="end_turn")
        await store.write_turn("s", "t1", begin=[{"p": 1}], end="end_turn")
        apply = store._apply_new_turns
        failures = [sqlite3.OperationalError("disk I/O error")]

        def flaky(*args: Any) -> None:
            apply(*args)  # the rows are written, then the disk fails
            if failures:
                raise failures.pop()

        monkeypatch.setattr(store, "_apply_new_turns", flaky)
        with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
            await store.get("s")
        assert queued_rows(db) == 2  # nothing dropped, nothing half-applied
        assert raw(db, "SELECT count(*) FROM turns") == [(0,)]
        assert [t.turn_id for t in await store.load_history("s")] == ["t0", "t1"]
        assert queued_rows(db) == 0


async def test_the_journal_moves_to_a_fresh_segment_and_applied_ones_are_deleted(
    queue_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = queue_db
    monkeypatch.setattr(sqlite_store, "SEGMENT_BYTES", 1024)
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))
        for i in range(20):
            await store.write_turn("s", f"t{i}", begin=[{"p": i, "pad": "x" * 100}], end="end_turn")
        segments = journal_files(db)
        assert len(segments) > 2  # each written up to about 1 KiB, then a fresh one
        assert queued_rows(db) == 20
        history = await store.load_history("s")  # applied in the order written
        assert [t.turn_id for t in history] == [f"t{i}" for i in range(20)]
        assert queued_rows(db) == 0
        assert store._worker is not None
        await store._worker.run(lambda: store._flush(store._conn))  # type: ignore[arg-type]
        # The segments it has left are gone; the one it appends to stays.
        assert journal_files(db) == segments[-1:]
    assert journal_files(db) == []
    assert raw(db, "SELECT count(*) FROM journal_progress") == [(0,)]


async def test_a_failed_journal_write_is_cut_off_and_the_write_goes_to_the_database(
    queue_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = queue_db
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))
        await store.write_turn("s", "t0", begin=[{"p": 0}], end="end_turn")
        [segment] = journal_files(db)
        whole = segment.stat().st_size
        short = short_journal_writes(monkeypatch, store, 1)
        await store.write_turn("s", "t1", begin=[{"p": 1}], end="end_turn")
        assert short == [0]  # it was made
        assert segment.stat().st_size == whole  # the half record is cut off
        await store.write_turn("s", "t2", begin=[{"p": 2}], end="end_turn")  # journaled
        assert queued_rows(db) == 1
        history = await store.load_history("s")
        assert [(t.turn_id, t.updates) for t in history] == [
            ("t0", ({"p": 0},)),
            ("t1", ({"p": 1},)),
            ("t2", ({"p": 2},)),
        ]


async def test_a_live_instance_keeps_its_segment_while_another_applies_it(
    queue_db: Path,
) -> None:
    db = queue_db
    async with await SqliteSessionStore.open(db) as first:
        await first.create(SessionRecord("s", cwd="/"))
        await first.begin_turn("s", "t", [{"p": 0}])
        [segment] = journal_files(db)
        async with await SqliteSessionStore.open(db) as second:
            [turn] = await second.load_history("s")  # applied by the second instance
            assert turn.updates == ({"p": 0},)
            assert queued_rows(db) == 0
        # Its owner still holds it (locked), so the second one left it in place.
        assert segment in journal_files(db)
        await first.append_updates("s", "t", [{"u": 1}])
        await first.end_turn("s", "t", "end_turn")
        assert queued_rows(db) == 2
        [turn] = await first.load_history("s")
        assert (turn.updates, turn.stop_reason) == (({"p": 0}, {"u": 1}), "end_turn")
    assert journal_files(db) == []


async def test_rows_a_schema_3_process_queued_are_applied(tmp_path: Path) -> None:
    db = tmp_path / "v3.sqlite3"
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute(
            "INSERT INTO queued_writes (session_id, turn_id, at, begins, stop_reason, body) "
            "VALUES ('s', 't', '2026-01-01T00:00:00Z', 1, 'end_turn', '{\"p\":0}')"
        )
    async with await SqliteSessionStore.open(db) as store:
        [turn] = await store.load_history("s")
        assert (turn.turn_id, turn.updates, turn.stop_reason) == ("t", ({"p": 0},), "end_turn")
    assert raw(db, "SELECT count(*) FROM queued_writes") == [(0,)]


async def test_a_whole_record_that_is_not_a_write_is_skipped_with_a_warning(
    queue_db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = queue_db
    caplog.set_level(logging.WARNING, logger="acp_agent.store.sqlite")
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))
        await store.write_turn("s", "t0", begin=[{"p": 0}], end="end_turn")
        [segment] = journal_files(db)
        payload = b'"not a write"'  # its length and checksum are right, its content is not
        with segment.open("ab") as file:
            file.write(sqlite_store._HEAD.pack(len(payload), zlib.crc32(payload)) + payload)
        await store.write_turn("s", "t1", begin=[{"p": 1}], end="end_turn")
        history = await store.load_history("s")
        assert [t.turn_id for t in history] == ["t0", "t1"]
        assert queued_rows(db) == 0  # applied past it: it is not read again
    assert f"skipped an unreadable journal record of {len(payload)} bytes" in caplog.text


async def test_when_no_fresh_segment_can_be_made_the_current_one_goes_on(
    queue_db: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    db = queue_db
    monkeypatch.setattr(sqlite_store, "SEGMENT_BYTES", 200)
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))

        def no_room(directory: Path, name: str) -> int:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(sqlite_store, "_create_segment", no_room)
        for i in range(5):  # past the size for a fresh segment: it cannot be made
            await store.write_turn("s", f"t{i}", begin=[{"p": i}], end="end_turn")
        [segment] = journal_files(db)
        whole = segment.stat().st_size
        assert whole > 200
        assert "could not create a journal segment" in caplog.text
        short_journal_writes(monkeypatch, store, 1)
        await store.write_turn("s", "t5", begin=[{"p": 5}], end="end_turn")
        # Cut back to the last whole record, not to the start of the segment.
        assert segment.stat().st_size == whole
        assert queued_rows(db) == 0  # the failed write went to the worker, which applied all
        history = await store.load_history("s")
        assert [t.turn_id for t in history] == [f"t{i}" for i in range(6)]
