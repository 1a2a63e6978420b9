"""The hostile campaign's findings against the store (issue 24), each on real agent
processes and a real SQLite file: a turn acknowledged is a turn saved, in the order it was
answered, and a store that cannot save says so before it runs anything more."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_agent.errors import INTERNAL_ERROR, SESSION_LEASED
from tests.helpers.wire_client import FULL_CAPS, ROOT, Message, ProcessClient, child_env, spawn

pytestmark = pytest.mark.anyio


def agent(db: Path) -> list[str]:
    return [sys.executable, "-m", "acp_agent", "--store", str(db)]


@asynccontextmanager
async def serving(
    db: Path, work: Path, env: dict[str, str] | None = None
) -> AsyncIterator[ProcessClient]:
    async with spawn(agent(db), env=env) as client:
        client.on_request = allow
        await client.initialize(FULL_CAPS)
        yield client


async def allow(request: Message) -> Any:
    if request["method"] == "session/request_permission":
        return {"outcome": {"outcome": "selected", "optionId": "allow_once"}}
    if request["method"] == "fs/write_text_file":
        await anyio.Path(request["params"]["path"]).write_text(request["params"]["content"])
        return {}
    raise AssertionError(request)


async def load(client: ProcessClient, sid: str, work: Path) -> Message:
    """``session/load``: the response, with the replayed prompts' texts as ``prompts``."""
    request = await client.request(
        "session/load", {"sessionId": sid, "cwd": str(work), "mcpServers": []}
    )
    response, frames = await client.expect(lambda m: m.get("id") == request and "method" not in m)
    response["prompts"] = [
        f["params"]["update"]["content"]["text"]
        for f in frames
        if f.get("method") == "session/update"
        and f["params"]["update"]["sessionUpdate"] == "user_message_chunk"
    ]
    return response


async def stored_prompts(db: Path, sid: str, work: Path) -> list[str]:
    """The prompts a fresh agent process replays for the session, in order."""
    async with serving(db, work) as client:
        loaded = await load(client, sid, work)
        assert "result" in loaded, loaded
        prompts: list[str] = loaded["prompts"]
        return prompts


async def wait_for_stderr(client: ProcessClient, text: str) -> None:
    """Wait until the agent has logged ``text`` (polling its captured stderr)."""
    with anyio.fail_after(10):
        while text.encode() not in client.stderr:  # noqa: ASYNC110 - another process logs it
            await anyio.sleep(0.01)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


# --- two processes on one file ----------------------------------------------------------------


async def test_a_session_open_in_another_process_is_refused_then_taken_over(
    tmp_path: Path, work: Path
) -> None:
    # Two editor windows on the default file, the same session open in both: the second is
    # refused (on the old code both wrote, and the stored order was the journals' batches').
    db = tmp_path / "s.sqlite3"
    async with serving(db, work) as first:
        sid, _, _ = await first.new_session(work)
        assert (await first.prompt(sid, "/echo t0")).stop_reason == "end_turn"
        async with serving(db, work) as second:
            refused = await load(second, sid, work)
            assert refused["error"]["code"] == SESSION_LEASED
            assert refused["error"]["data"] == {
                "sessionId": sid,
                "reason": "leased",
                "retryAfterMs": 1000,
            }
            assert refused["prompts"] == []  # nothing replayed
            assert (await first.prompt(sid, "/echo t1")).stop_reason == "end_turn"
            await first.process.stdin.aclose()  # type: ignore[union-attr]  # the window closes
            assert await first.process.wait() == 0
            taken = await load(second, sid, work)
            assert taken["prompts"] == ["/echo t0", "/echo t1"]
            assert (await second.prompt(sid, "/echo t2")).stop_reason == "end_turn"
    assert await stored_prompts(db, sid, work) == ["/echo t0", "/echo t1", "/echo t2"]


async def test_a_killed_process_acknowledged_turns_are_there_for_a_live_one(
    tmp_path: Path, work: Path
) -> None:
    db = tmp_path / "s.sqlite3"
    async with serving(db, work) as other:
        await other.new_session(work)  # this process has the file open before the kill
        async with serving(db, work) as doomed:
            sid, _, _ = await doomed.new_session(work)
            for n in range(5):
                assert (await doomed.prompt(sid, f"/echo t{n}")).stop_reason == "end_turn"
            doomed.process.send_signal(signal.SIGKILL)
            await doomed.process.wait()
        loaded = await load(other, sid, work)  # taken over at once: its holder is gone
        assert loaded["prompts"] == [f"/echo t{n}" for n in range(5)]
        assert (await other.prompt(sid, "/echo t5")).stop_reason == "end_turn"
    assert await stored_prompts(db, sid, work) == [f"/echo t{n}" for n in range(6)]


# --- another process holding the write lock ---------------------------------------------------


@asynccontextmanager
async def write_lock(db: Path) -> AsyncIterator[sqlite3.Connection]:
    """Hold the database's write lock (as a `sessions prune` or another agent would)."""
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")


async def test_a_write_lock_held_for_a_while_is_waited_out_before_the_answer(
    tmp_path: Path, work: Path
) -> None:
    db = tmp_path / "s.sqlite3"
    async with serving(db, work) as client:
        sid, _, _ = await client.new_session(work)
        async with write_lock(db) as holder:
            request = await client.start_prompt(sid, "/echo during")
            await wait_for_stderr(client, "another process holds the write lock; waiting")
            holder.execute("ROLLBACK")
            turn = await client.finish_prompt(request)
        assert turn.stop_reason == "end_turn"
        await wait_for_stderr(client, "got the write lock after")
        assert (await client.prompt(sid, "/echo after")).stop_reason == "end_turn"
    assert await stored_prompts(db, sid, work) == ["/echo during", "/echo after"]


async def test_a_failed_write_refuses_the_next_prompt_before_the_agent_runs_then_recovers(
    tmp_path: Path, work: Path
) -> None:
    db = tmp_path / "s.sqlite3"
    written = work / "side-effect.txt"
    async with serving(db, work, env={"ACP_AGENT_LOCK_WAIT": "0.5"}) as client:
        sid, _, _ = await client.new_session(work)
        assert (await client.prompt(sid, "/echo t0")).stop_reason == "end_turn"
        async with write_lock(db):
            lost = await client.prompt(sid, "/echo t1")
            assert lost.error is not None and lost.error["code"] == INTERNAL_ERROR
            message = lost.error["message"]
            assert message.startswith(f"session store {db}: ")
            assert "held the write lock for more than 0.5 s" in message
            assert message.endswith("this turn was not saved")
            refused = await client.prompt(sid, f"/write {written} x")
            assert refused.error is not None
            assert refused.error["message"].endswith("the prompt was not run")
            assert refused.updates == [] and refused.requests == []  # the agent never ran
            assert not written.exists()
        # The lock is free: the next prompt first saves the turn that failed, then runs.
        assert (await client.prompt(sid, f"/write {written} y")).stop_reason == "end_turn"
        assert written.read_text() == "y"
    assert b"Traceback" not in client.stderr
    assert await stored_prompts(db, sid, work) == ["/echo t0", "/echo t1", f"/write {written} y"]


# --- the database file deleted or replaced ----------------------------------------------------


@pytest.mark.parametrize("how", ["deleted", "replaced"])
async def test_a_database_file_deleted_or_replaced_is_never_acknowledged(
    tmp_path: Path, work: Path, how: str
) -> None:
    db = tmp_path / "s.sqlite3"
    async with serving(db, work) as client:
        sid, _, _ = await client.new_session(work)
        assert (await client.prompt(sid, "/echo kept")).stop_reason == "end_turn"
        if how == "deleted":
            db.unlink()
        else:
            other = tmp_path / "other.sqlite3"
            with closing(sqlite3.connect(other)) as conn:
                conn.execute("CREATE TABLE t (x)")
            os.replace(other, db)
        for text in ("/echo one", "/echo two"):
            turn = await client.prompt(sid, text)
            assert turn.error is not None, turn.response
            assert turn.error["message"].startswith(f"session store {db}: ")
            assert "the database file was deleted or replaced" in turn.error["message"]
    assert b"Traceback" not in client.stderr
    errors = [line for line in client.stderr.splitlines() if b" ERROR " in line]
    assert errors and all(b"deleted or replaced" in line for line in errors)


# --- side directories and stores that cannot be used ------------------------------------------


async def test_no_side_directory_can_fail_the_agent(tmp_path: Path, work: Path) -> None:
    # The old journal lived in <database>.journals/: unusable, it failed every session
    # request and exited 1 with a traceback. The store keeps nothing there now.
    db = tmp_path / "s.sqlite3"
    (tmp_path / "s.sqlite3.journals").write_text("not a directory")
    async with serving(db, work) as client:
        sid, _, _ = await client.new_session(work)
        assert (await client.prompt(sid, "/echo hi")).stop_reason == "end_turn"
    assert client.process.returncode == 0
    assert b"Traceback" not in client.stderr and b" ERROR " not in client.stderr
    assert await stored_prompts(db, sid, work) == ["/echo hi"]


def corrupt(tmp_path: Path) -> Path:
    """A SQLite file whose pages after the header are garbage (an I/O error's leftovers)."""
    path = tmp_path / "corrupt.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.commit()
    data = bytearray(path.read_bytes())
    data[100:] = b"\xff" * (len(data) - 100)
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(
    ("store", "reason"),
    [
        (lambda tmp: Path("/proc/nope/x.db"), "cannot be created or opened"),
        (lambda tmp: tmp, "is a directory"),
        (lambda tmp: corrupt(tmp), "corrupt.db: "),
    ],
    ids=["uncreatable", "directory", "corrupt"],
)
def test_a_store_that_cannot_be_opened_exits_2_in_one_line(
    tmp_path: Path, store: Any, reason: str
) -> None:
    path = store(tmp_path)
    initialize = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'
    new = '{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}\n'
    done = subprocess.run(
        agent(path),
        input=initialize + new,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=child_env(),
        timeout=30,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""  # nothing served, not even the initialize answer
    [line] = done.stderr.splitlines()
    assert line.startswith(f"acp-agent-kit: session store {path}: ")
    assert reason in line
