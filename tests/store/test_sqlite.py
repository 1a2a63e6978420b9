"""What only the SQLite store promises: persistence, its schema, WAL, sharing a file between
processes, crash safety and private files."""

from __future__ import annotations

import base64
import logging
import os
import signal
import sqlite3
import stat
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, closing, contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import orjson
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from acp_agent.errors import SessionLeased
from acp_agent.store import (
    DEFAULT_OWNER,
    PackedJson,
    SessionRecord,
    SqliteSessionStore,
    StoreFailed,
    TurnRecord,
    TurnWrite,
    sqlite_checkpoints,
)
from acp_agent.store import sqlite as sqlite_store
from acp_agent.store.sqlite import SCHEMA_VERSION

pytestmark = pytest.mark.anyio

CHILD = Path(__file__).with_name("_child.py")
REPO = Path(__file__).resolve().parents[2]
ME = DEFAULT_OWNER


def raw(path: Path, sql: str) -> list[tuple[Any, ...]]:
    """Run one statement on a separate plain connection (closed at once)."""
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql).fetchall()


def item(**fields: object) -> str:
    return orjson.dumps(fields).decode()


async def test_everything_survives_a_reopen(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    record = SessionRecord(
        "s", cwd="/w", additional_directories=("/x",), title="t", mode_id="m", config={"a": 1}
    )
    async with await SqliteSessionStore.open(db) as first:
        await first.create(record)
        await first.write_turn(TurnWrite("s", "done", begin=[item(p=0)], end="end_turn"))
        await first.write_turn(TurnWrite("s", "open", begin=[item(p=1)], updates=[item(u=0)]))
        await first.write_turn(TurnWrite("s", "open", updates=[item(u=1)]))
        stored = await first.get(ME, "s")
    async with await SqliteSessionStore.open(db) as second:
        assert await second.get(ME, "s") == stored
        assert await second.load_history(ME, "s") == [
            TurnRecord("done", (item(p=0),), "end_turn"),
            TurnRecord("open", (item(p=1), item(u=0), item(u=1)), None),
        ]
        # the open turn goes on in the new instance
        await second.write_turn(TurnWrite("s", "open", end="cancelled"))
        assert [t.stop_reason for t in await second.load_history(ME, "s")] == [
            "end_turn",
            "cancelled",
        ]


async def test_the_schema_starts_at_version_1_in_wal_mode(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))
    assert SCHEMA_VERSION == 1
    assert raw(db, "PRAGMA user_version") == [(1,)]
    assert raw(db, "PRAGMA journal_mode") == [("wal",)]
    async with await SqliteSessionStore.open(db) as again:  # reopening changes nothing
        assert [r.session_id for r in (await again.list(ME))[0]] == ["s"]


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 3, 0])
async def test_a_file_of_another_schema_is_refused_and_left_alone(
    tmp_path: Path, version: int
) -> None:
    db = tmp_path / "other.sqlite3"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE theirs (x)")
        conn.execute(f"PRAGMA user_version = {version}")
        conn.commit()
    with pytest.raises(StoreFailed, match=f"version {version}"):
        await SqliteSessionStore.open(db)
    assert raw(db, "SELECT name FROM sqlite_master") == [("theirs",)]


async def test_delete_cascades_to_turns_and_updates(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    async with await SqliteSessionStore.open(db) as store:
        for sid in ("gone", "kept"):
            await store.create(SessionRecord(sid, cwd="/"))
            await store.write_turn(TurnWrite(sid, "t", begin=[item(a=1)], updates=[item(b=2)]))
            await store.write_turn(TurnWrite(sid, "t", updates=[item(c=3)], end="end_turn"))
        assert raw(db, "SELECT count(*) FROM updates") == [(4,)]
        assert await store.delete(ME, "gone") is True
        assert raw(db, "SELECT count(*) FROM turns") == [(1,)]
        assert raw(db, "SELECT count(*) FROM updates") == [(2,)]


async def test_the_queries_use_the_indexes(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    async with await SqliteSessionStore.open(db):
        pass
    for query in [
        "UPDATE sessions SET updated_at = 'x' WHERE id = 's'",
        "SELECT id, stop_reason FROM turns WHERE session_id = 's' AND turn_id = 't'",
        "SELECT id, turn_id, stop_reason FROM turns WHERE session_id = 's' ORDER BY id",
        "SELECT u.turn, u.body FROM updates u JOIN turns t ON u.turn = t.id "
        "WHERE t.session_id = 's' ORDER BY u.id",
    ]:
        plan = " ".join(str(row[-1]) for row in raw(db, f"EXPLAIN QUERY PLAN {query}"))
        assert "SCAN" not in plan, (query, plan)


async def test_open_is_required_and_happens_once(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "s.sqlite3")
    assert not (tmp_path / "s.sqlite3").exists()  # no I/O in __init__
    with pytest.raises(anyio.ClosedResourceError, match="never opened"):
        await store.get(ME, "s")
    await store.aopen()
    try:
        with pytest.raises(RuntimeError, match="once"):
            await store.aopen()
    finally:
        await store.aclose()


def size(path: Path) -> int:
    return path.stat().st_size


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
@pytest.mark.parametrize("umask", [0o000, 0o022, 0o277])
async def test_the_database_and_its_side_files_are_private_whatever_the_umask(
    tmp_path: Path, umask: int
) -> None:
    db = tmp_path / "new" / "deeper" / "s.sqlite3"
    old = os.umask(umask)
    try:
        async with await SqliteSessionStore.open(db) as store:
            await store.create(SessionRecord("s", cwd="/"))
            await store.write_turn(TurnWrite("s", "t", begin=[item(secret=1)]))
            files = sorted(p.name for p in db.parent.iterdir())
            assert files == ["s.sqlite3", "s.sqlite3-shm", "s.sqlite3-wal", "s.sqlite3.locks"]
            assert {p.name: mode(p) for p in db.parent.iterdir()} == dict.fromkeys(files, 0o600)
    finally:
        os.umask(old)
    assert mode(tmp_path / "new") == mode(tmp_path / "new" / "deeper") == 0o700
    assert mode(db) == 0o600


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
            await store.write_turn(
                TurnWrite("parent", "t0", begin=[item(who="parent", prompt=True)])
            )
            async with child("share", db, n) as (process, out):
                assert await readline(out) == b"ready"
                for i in range(n):  # while the child writes too
                    update = [item(who="parent", i=i)]
                    await store.write_turn(TurnWrite("parent", "t0", updates=update))
                await store.write_turn(TurnWrite("parent", "t0", end="end_turn"))
                assert await readline(out) == b"written"
                assert process.stdin is not None
                await process.stdin.send(b"go\n")
                seen_by_child = orjson.loads(await readline(out))
                assert await process.wait() == 0

            assert seen_by_child["sessions"] == ["child", "parent"]
            parent = [item(who="parent", prompt=True), *(item(who="parent", i=i) for i in range(n))]
            assert seen_by_child["turns"] == [[parent, "end_turn"]]
            [turn] = await store.load_history(ME, "child")
            assert turn == TurnRecord(
                "t0",
                (item(who="child", prompt=True), *(item(who="child", i=i) for i in range(n))),
                "end_turn",
            )


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
async def test_a_killed_process_loses_nothing_it_wrote(tmp_path: Path) -> None:
    db = tmp_path / "crash.sqlite3"
    n = 100
    with anyio.fail_after(50):
        async with child("crash", db, n) as (process, out):
            assert await readline(out) == b"ready"
            os.kill(process.pid, signal.SIGKILL)
            assert await process.wait() == -signal.SIGKILL
    async with await SqliteSessionStore.open(db) as store:
        record = await store.get(ME, "crash")
        assert record is not None
        assert record.title == "dies mid-turn"
        [turn] = await store.load_history(ME, "crash")
        assert turn == TurnRecord(
            "t0", (item(sessionUpdate="user_message_chunk"), *(item(i=j) for j in range(n))), None
        )


async def test_packed_items_are_stored_compressed_and_come_back_as_text(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    big = item(text="x" * 3_000_000 + " 日本語 🎉")
    prompt = item(text="p" * 300_000)
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))
        await store.write_turn(
            TurnWrite(
                "s", "t", begin=[PackedJson.pack(prompt.encode()), item(a=1)], updates=[item(b=2)]
            )
        )
        await store.write_turn(
            TurnWrite(
                "s", "t", updates=[item(c=3), PackedJson.pack(big.encode()), item(d=4)], end="x"
            )
        )
        [turn] = await store.load_history(ME, "s")
        assert turn.updates == (prompt, item(a=1), item(b=2), item(c=3), big, item(d=4))
        [(_, stored)] = (await store.sizes(ME)).items()
        assert stored[1] < 100_000  # the 3.3 MB of text went in compressed


async def test_packed_items_that_do_not_compress_are_stored_as_they_are(tmp_path: Path) -> None:
    text = item(text=base64.b64encode(os.urandom(300_000)).decode())
    packed = PackedJson.pack(text.encode())
    assert not packed.compressed  # zlib would save a quarter of it, at great cost
    async with await SqliteSessionStore.open(tmp_path / "s.sqlite3") as store:
        await store.create(SessionRecord("s", cwd="/"))
        await store.write_turn(TurnWrite("s", "t", begin=[packed, item(a=1)], end="end_turn"))
        [turn] = await store.load_history(ME, "s")
        assert turn.updates == (text, item(a=1))
        [(_, (_, stored))] = (await store.sizes(ME)).items()
        assert stored == len(text.encode()) + len(item(a=1))


async def test_items_written_together_share_one_row_and_come_back_one_by_one(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.sqlite3"
    pretty = orjson.dumps({"a": [1, 2]}, option=orjson.OPT_INDENT_2).decode()  # raw newlines
    big = item(text="x" * 200_000)
    first = [item(n=i, text="line\nbreak") for i in range(100)]  # escaped: no raw newline
    second = [item(e=""), pretty, item(f=1), PackedJson.pack(big.encode()), item(g=2)]
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))
        await store.write_turn(TurnWrite("s", "t", begin=[item(p=0)], updates=first))
        await store.write_turn(TurnWrite("s", "t", updates=second, end="end_turn"))
        [turn] = await store.load_history(ME, "s")
    assert turn.updates == (item(p=0), *first, item(e=""), pretty, item(f=1), big, item(g=2))
    kinds = raw(db, "SELECT typeof(body) FROM updates ORDER BY id")
    # the prompt and the 100 updates; then one line; the pretty item; one line; the big
    # item; one line
    assert [kind for (kind,) in kinds] == ["text", "text", "blob", "text", "blob", "text"]


# --- what the store checks so that a write is never acknowledged without being in the file ---


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX record locks")
async def test_a_session_open_in_another_process_is_refused_until_it_lets_go(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.sqlite3"
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("held", cwd="/"))
        await store.release("held")  # create held it for this process
        with anyio.fail_after(30):
            async with child("hold", db, 0) as (process, out):
                assert await readline(out) == b"ready"
                with pytest.raises(SessionLeased) as caught:
                    await store.acquire("held")
                assert caught.value.data == {
                    "sessionId": "held",
                    "reason": "leased",
                    "retryAfterMs": 1000,
                }
                # the holder is named: a process of this machine, not another host
                holder = f"process {process.pid}" if sys.platform == "linux" else "another process"
                assert caught.value.message == (
                    f"session 'held' is served by {holder} on this host; retry in 1.0 s, "
                    "or once that process closes it"
                )
                assert process.stdin is not None
                await process.stdin.send(b"go\n")
                assert await readline(out) == b"released"
                await store.acquire("held")  # let go: this process holds it now
                await store.release("held")
            # A process that dies drops its hold: the session is taken over at once.
            async with child("hold", db, 0) as (process, out):
                assert await readline(out) == b"ready"
                with pytest.raises(SessionLeased):
                    await store.acquire("held")
                process.kill()
                await process.wait()
                await store.acquire("held")


async def test_acquisitions_in_one_store_are_counted(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    async with await SqliteSessionStore.open(db) as store:
        await store.acquire("held")
        await store.acquire("held")
        await store.release("held")
        with anyio.fail_after(30):
            async with child("hold", db, 0) as (process, _out):
                assert await process.wait() != 0  # still held once here: refused
            await store.release("held")
            async with child("hold", db, 0) as (_process, out):
                assert await readline(out) == b"ready"


@pytest.mark.parametrize("how", ["deleted", "replaced"])
async def test_a_database_file_deleted_or_replaced_fails_every_write(
    tmp_path: Path, how: str
) -> None:
    db = tmp_path / "s.sqlite3"
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))
        await store.write_turn(TurnWrite("s", "t0", begin=[item(n=0)], end="end_turn"))
        if how == "deleted":
            db.unlink()
        else:
            other = tmp_path / "other.sqlite3"
            async with await SqliteSessionStore.open(other) as elsewhere:
                await elsewhere.create(SessionRecord("s", cwd="/"))
            os.replace(other, db)
        for _ in range(2):
            with pytest.raises(StoreFailed, match="deleted or replaced") as caught:
                await store.write_turn(TurnWrite("s", "t1", begin=[item(n=1)], end="end_turn"))
            assert caught.value.message.startswith(f"session store {db}: ")
        with pytest.raises(StoreFailed, match="deleted or replaced"):
            await store.create(SessionRecord("new", cwd="/"))


class Records(logging.Handler):
    """Keeps the messages logged; ``seen`` is set by the first one containing ``word``."""

    def __init__(self, word: str) -> None:
        super().__init__()
        self.word = word
        self.messages: list[str] = []
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        if self.word in record.getMessage():
            self.seen.set()


@contextmanager
def recording(word: str) -> Iterator[Records]:
    logger = logging.getLogger("acp_agent.store.sqlite")
    handler = Records(word)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


async def test_another_process_holding_the_write_lock_is_waited_out(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    async with await SqliteSessionStore.open(db, lock_wait=60) as store:
        await store.create(SessionRecord("s", cwd="/"))
        with (
            closing(sqlite3.connect(db, isolation_level=None)) as other,
            recording("waiting") as log,
        ):
            other.execute("BEGIN IMMEDIATE")  # a `sessions prune`, another agent
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    store.write_turn, TurnWrite("s", "t", begin=[item(n=0)], end="end_turn")
                )
                assert await anyio.to_thread.run_sync(log.seen.wait, 20)  # a bound, no sync
                assert raw(db, "SELECT count(*) FROM turns") == [(0,)]  # not written yet
                other.execute("ROLLBACK")
        assert log.messages[0] == (
            f"session store {db}: another process holds the write lock; waiting up to 60 s"
        )
        assert log.messages[-1].startswith(f"session store {db}: got the write lock after ")
        [turn] = await store.load_history(ME, "s")
        assert turn == TurnRecord("t", (item(n=0),), "end_turn")


async def test_a_write_lock_held_too_long_fails_the_write_saying_so(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    async with await SqliteSessionStore.open(db, lock_wait=0.3) as store:
        await store.create(SessionRecord("s", cwd="/"))
        with closing(sqlite3.connect(db, isolation_level=None)) as other, recording("x") as log:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreFailed) as caught:
                await store.write_turn(TurnWrite("s", "t", begin=[item(n=0)]))
            other.execute("ROLLBACK")
        assert caught.value.message == (
            f"session store {db}: another process held the write lock for more than 0.3 s"
        )
        assert log.messages[-1] == caught.value.message  # logged once, as it is
        await store.write_turn(TurnWrite("s", "t", begin=[item(n=1)]))  # and usable again
        assert [t.updates for t in await store.load_history(ME, "s")] == [(item(n=1),)]


async def test_prune_deletes_in_small_transactions_and_spares_held_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "PRUNE_BATCH", 7)
    db = tmp_path / "s.sqlite3"
    async with await SqliteSessionStore.open(db) as store:
        for sid in ("old", "held", "new"):
            await store.create(SessionRecord(sid, cwd="/"))
            await store.write_turn(TurnWrite(sid, "t", begin=[item(n=-1)]))
            for n in range(54):  # one row per write: 55 rows to delete
                await store.write_turn(TurnWrite(sid, "t", updates=[item(n=n)]))
        cutoff = (await store.get(ME, "new")).updated_at  # type: ignore[union-attr]
        await store.release("held")
        await store.release("old")
        statements: list[str] = []
        store._conn.set_trace_callback(statements.append)  # type: ignore[union-attr]
        async with child("hold", db, 0) as (_process, out):
            assert await readline(out) == b"ready"  # another agent has "held" open
            assert await store.prune(ME, cutoff) == ["old"]
        deletes = [s for s in statements if s.startswith("DELETE FROM updates")]
        assert len(deletes) == 55 // 7 + 2  # 55 rows, 7 a transaction, and the empty check
        assert statements.count("BEGIN IMMEDIATE") >= len(deletes) + 1
        assert sorted(r.session_id for r in (await store.list(ME))[0]) == ["held", "new"]
        assert raw(db, "SELECT count(*) FROM turns WHERE session_id = 'old'") == [(0,)]


async def test_commits_leave_checkpoints_to_a_thread_of_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_checkpoints, "CHECKPOINT_BYTES", 64 * 1024)
    db = tmp_path / "s.sqlite3"
    seen: list[str] = []
    checkpoint = sqlite_checkpoints.Checkpoints.passive

    def on_its_thread(checkpoints: sqlite_checkpoints.Checkpoints) -> None:
        seen.append(threading.current_thread().name)
        checkpoint(checkpoints)

    monkeypatch.setattr(sqlite_checkpoints.Checkpoints, "passive", on_its_thread)
    async with await SqliteSessionStore.open(db) as store:
        conn = store._conn
        assert conn is not None
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)  # none on commit
        assert conn.execute("PRAGMA busy_timeout").fetchone() == (0,)  # waits are the store's
        await store.create(SessionRecord("s", cwd="/"))
        before = db.stat().st_size
        big = item(text="x" * 20_000)
        for n in range(8):  # past 64 KiB of WAL
            await store.write_turn(TurnWrite("s", f"t{n}", begin=[big], end="end_turn"))
        running = store._checkpoints.running
        assert running is not None
        await anyio.to_thread.run_sync(running.join)
        assert seen and seen[0] == "acp-sqlite-checkpoint"
        assert threading.current_thread().name not in seen
        assert db.stat().st_size > before  # the WAL's pages are in the database file now
        assert len(await store.load_history(ME, "s")) == 8


async def test_a_wal_reused_from_its_start_is_checkpointed_by_commits_not_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The WAL file keeps its size once reused from its start: a checkpoint per commit
    # would follow if its size alone decided.
    monkeypatch.setattr(sqlite_checkpoints, "CHECKPOINT_BYTES", 64 * 1024)
    monkeypatch.setattr(sqlite_checkpoints, "CHECKPOINT_COMMITS", 10)
    db = tmp_path / "s.sqlite3"
    started: list[int] = []
    checkpoint = sqlite_checkpoints.Checkpoints.passive

    def counted(checkpoints: sqlite_checkpoints.Checkpoints) -> None:
        started.append(1)
        checkpoint(checkpoints)

    monkeypatch.setattr(sqlite_checkpoints.Checkpoints, "passive", counted)
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("s", cwd="/"))
        big = item(text="x" * 100_000)
        for n in range(12):  # a WAL of a few MiB: checkpoints by size
            await store.write_turn(TurnWrite("s", f"big{n}", begin=[big], end="end_turn"))
            store._checkpoints.join()
        by_size = len(started)
        assert by_size >= 1
        wal = size(Path(f"{db}-wal"))
        assert wal >= 64 * 1024
        for n in range(30):  # small turns in the reused WAL: one checkpoint per 10 commits
            await store.write_turn(TurnWrite("s", f"small{n}", begin=[item()], end="end_turn"))
            store._checkpoints.join()
        assert size(Path(f"{db}-wal")) == wal  # reused, not grown
        assert len(started) == by_size + 3
