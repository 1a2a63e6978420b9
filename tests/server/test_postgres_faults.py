"""A real ``acp-agent`` host on PostgreSQL while the database restarts, pauses or loses
its connections.

Each test starts a PostgreSQL server of its own (tests/helpers/postgres.py), because it stops,
pauses (SIGSTOP of the postmaster and every backend, as a hung server or a network partition
looks to a client) or restarts that server's processes. The host runs with a short store call
timeout (``ACP_AGENT_STORE_TIMEOUT``) so that a bounded call ends within the test. What each
test waits for is an answer on the wire or a row in the database; nothing sleeps as
synchronisation.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from tests.helpers.pg_proxy import CommitCutter, Cut
from tests.helpers.postgres import PostgresServer, fresh_schema_url
from tests.helpers.wire_client import FULL_CAPS, Message, ProcessClient, spawn, update_kind
from tests.server.test_durability import allow

pytestmark = pytest.mark.anyio

CALL_TIMEOUT = 2.0  # seconds: the host's bound on one store call


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test's own (it will be stopped, paused or restarted)."""
    from tests.helpers.postgres import NoPostgres

    try:
        import psycopg  # noqa: F401

        pg = PostgresServer()
        pg.start()
    except (ImportError, NoPostgres) as exc:
        pytest.skip(f"PostgreSQL fault tests skipped: {exc}")
    try:
        yield pg
    finally:
        pg.stop()


def processes(pg: PostgresServer) -> list[int]:
    """The postmaster's pid and its children's (the backends and the server's workers)."""
    postmaster = int((pg.data / "postmaster.pid").read_text().split()[0])
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                children.append(int(entry.name))
    return [postmaster, *children]


def pause(pg: PostgresServer) -> list[int]:
    paused = []
    for pid in processes(pg):
        with contextlib.suppress(ProcessLookupError):  # a backend that just exited
            os.kill(pid, signal.SIGSTOP)
            paused.append(pid)
    return paused


def resume(paused: list[int]) -> None:
    for pid in paused:
        # a backend that had exited (a zombie when paused) is reaped once the postmaster runs
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def restart(pg: PostgresServer) -> None:
    """``pg_ctl restart`` (fast): every connection is closed; same port, same data."""
    log = str(pg.root / "server.log")
    done = pg._run(
        "pg_ctl", "restart", "-m", "fast", "-w", "-t", "60", "-D", str(pg.data), "-l", log
    )
    assert done.returncode == 0, done.stderr


def sql(url: str, query: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(query)
        return cursor.fetchall() if cursor.description else []


@asynccontextmanager
async def host(url: str, call_timeout: float = CALL_TIMEOUT) -> AsyncIterator[ProcessClient]:
    command = [sys.executable, "-m", "acp_agent", "--store", url, "--lease-timeout", "30"]
    env = {"ACP_AGENT_STORE_TIMEOUT": str(call_timeout)}
    async with spawn(command, env=env) as agent:
        agent.on_request = allow
        await agent.initialize(FULL_CAPS)
        yield agent
        clean_output(agent)


def clean_output(agent: ProcessClient) -> None:
    """No traceback anywhere (stdout is JSON only: the client parsed every line)."""
    assert b"Traceback" not in agent.stderr, agent.stderr.decode(errors="replace")


async def prompts_at_once(agent: ProcessClient, sids: list[str], text: str) -> list[Message]:
    """One prompt in each session, all sent before any answer is read; the responses."""
    ids = {await agent.start_prompt(sid, text): sid for sid in sids}
    answers: dict[int, Message] = {}
    with anyio.fail_after(30):
        while len(answers) < len(ids):
            message = await agent.receive(30)
            if "method" not in message and message.get("id") in ids:
                answers[message["id"]] = message
            elif "method" in message and "id" in message:
                await agent.answer(message)
    return [answers[request_id] for request_id in ids]


def stop_reason(response: Message) -> str:
    assert "result" in response, response
    reason: str = response["result"]["stopReason"]
    return reason


async def turns_in_db(url: str, sid: str) -> int:
    rows = await anyio.to_thread.run_sync(
        sql, url, f"SELECT count(*) FROM acp_turns WHERE session_id = '{sid}'"
    )
    return int(rows[0][0])


async def test_a_restart_while_idle_poisons_no_session(
    server: PostgresServer, tmp_path: Path
) -> None:
    url = fresh_schema_url(server.url)
    async with host(url) as agent:
        sids = [(await agent.new_session(tmp_path))[0] for _ in range(6)]
        # Turns of every session at once: the pool holds several connections now.
        for response in await prompts_at_once(agent, sids, "/echo before"):
            assert stop_reason(response) == "end_turn"
        await anyio.to_thread.run_sync(restart, server)
        for response in await prompts_at_once(agent, sids, "/echo after"):
            assert stop_reason(response) == "end_turn"
        for response in await prompts_at_once(agent, sids, "/echo again"):
            assert stop_reason(response) == "end_turn"
    for sid in sids:
        assert await turns_in_db(url, sid) == 3


@pytest.mark.parametrize("fault", ["pg_terminate_backend", "restart"])
async def test_connections_lost_mid_turn_end_it_cleanly(
    server: PostgresServer, tmp_path: Path, fault: str
) -> None:
    url = fresh_schema_url(server.url)
    async with host(url) as agent:
        sid, _, _ = await agent.new_session(tmp_path)
        other, _, _ = await agent.new_session(tmp_path)
        running = await agent.start_prompt(sid, "/sleep 60000")
        with anyio.fail_after(10):  # the turn's beginning is written while it sleeps
            while await turns_in_db(url, sid) == 0:  # noqa: ASYNC110 - another process
                await anyio.sleep(0.02)
        if fault == "restart":
            await anyio.to_thread.run_sync(restart, server)
        else:
            killed = await anyio.to_thread.run_sync(
                sql,
                server.url,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'",
            )
            assert killed, "the host had no connection to kill"
        # The other session is not held behind it, and its write goes through.
        turn = await agent.prompt(other, "/echo meanwhile")
        assert turn.stop_reason == "end_turn", turn.response
        # session/cancel ends the sleeping turn; its end is written on a fresh connection.
        turn = await agent.cancel(sid, running)
        assert turn.stop_reason == "cancelled", turn.response
        turn = await agent.prompt(sid, "/echo next")
        assert turn.stop_reason == "end_turn", turn.response
    rows = await anyio.to_thread.run_sync(
        sql, url, f"SELECT stop_reason FROM acp_turns WHERE session_id = '{sid}' ORDER BY seq"
    )
    assert rows == [("cancelled",), ("end_turn",)]


async def test_a_paused_server_bounds_every_call(server: PostgresServer, tmp_path: Path) -> None:
    url = fresh_schema_url(server.url)
    async with host(url) as agent:
        sid, _, _ = await agent.new_session(tmp_path)
        other, _, _ = await agent.new_session(tmp_path)
        assert (await agent.prompt(sid, "/echo before")).stop_reason == "end_turn"
        paused = await anyio.to_thread.run_sync(pause, server)
        try:
            with anyio.fail_after(4 * CALL_TIMEOUT + 5):
                stuck = await agent.start_prompt(sid, "/echo stuck")
                held = await agent.start_prompt(other, "/echo held")
                listing = await agent.request("session/list", {})
                await agent.notify("session/cancel", {"sessionId": sid})
                answers: dict[int, Message] = {}
                while len(answers) < 3:
                    message = await agent.receive(4 * CALL_TIMEOUT + 5)
                    if "method" not in message and "id" in message:
                        answers[message["id"]] = message
        finally:
            resume(paused)
        # The cancel ends the stuck prompt at once if it came while the turn's write
        # waited; if it came while the agent ran, that write's wait is bounded like the rest.
        cancelled = answers[stuck].get("result") == {"stopReason": "cancelled"}
        for request_id in (held, listing) if cancelled else (stuck, held, listing):
            error = answers[request_id].get("error")
            assert error is not None, answers[request_id]
            assert error["code"] == -32603
            assert "PostgreSQL" in error["message"], error
            assert f"no answer within {CALL_TIMEOUT:g} s" in error["message"] or (
                "no connection within" in error["message"]
            ), error
        # The server is back: the host serves the next prompts, nothing committed is lost.
        for target in (sid, other):
            with anyio.fail_after(30):
                while (turn := await agent.prompt(target, "/echo after")).error is not None:
                    # the stuck turn's write, answered cancelled, failed past its bound
                    assert "the prompt was not run" in turn.error["message"], turn.error
                    await anyio.sleep(0.05)  # the host waits on another process: polled
            assert turn.stop_reason == "end_turn", turn.response
    stored = await turns_in_db(url, sid)
    assert stored >= 2  # "before" and "after" (and "stuck", saved on the retry)


async def test_a_newer_schema_is_refused_at_start_in_one_line(
    server: PostgresServer, tmp_path: Path
) -> None:
    url = fresh_schema_url(server.url)
    async with host(url):
        pass
    sql(url, "UPDATE acp_schema_version SET version = version + 1")
    with anyio.fail_after(30):
        done = await anyio.run_process(
            [sys.executable, "-m", "acp_agent", "--store", url], check=False, input=b""
        )
    assert done.returncode == 2
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert "schema version" in lines[0] and "upgrade acp-agent" in lines[0], lines
    assert done.stdout == b""


@pytest.mark.parametrize("cut", ["answer", "commit"])
async def test_a_connection_lost_during_commit_stores_the_turn_once(
    server: PostgresServer, tmp_path: Path, cut: Cut
) -> None:
    """The COMMIT of a turn's write loses its connection: forwarded with its answer
    dropped (it committed), or never forwarded (it aborted). Either way the turn is
    answered as saved and stored exactly once, and the session goes on."""
    url = fresh_schema_url(server.url)
    with CommitCutter(server.port) as proxy:
        async with host(proxy.url(url)) as agent:
            sid, _, _ = await agent.new_session(tmp_path)
            assert (await agent.prompt(sid, "/echo one")).stop_reason == "end_turn"
            proxy.arm(cut)
            turn = await agent.prompt(sid, "/echo two")
            assert proxy.cut.is_set()
            assert turn.stop_reason == "end_turn", turn.response
            assert (await agent.prompt(sid, "/echo three")).stop_reason == "end_turn"
            assert agent.stderr.count(b"the connection broke during a commit") == 1
    rows = await anyio.to_thread.run_sync(
        sql, url, f"SELECT stop_reason FROM acp_turns WHERE session_id = '{sid}' ORDER BY seq"
    )
    assert rows == [("end_turn",)] * 3


@asynccontextmanager
async def row_locked(url: str, sid: str) -> AsyncIterator[None]:
    """Another connection holds the session's row (``SELECT ... FOR UPDATE``) meanwhile."""
    import psycopg

    locker = await anyio.to_thread.run_sync(psycopg.connect, url)
    try:
        query = "SELECT 1 FROM acp_sessions WHERE session_id = %s FOR UPDATE"
        await anyio.to_thread.run_sync(locker.execute, query, (sid,))
        yield
    finally:
        await anyio.to_thread.run_sync(locker.close)  # its transaction rolls back


async def wait_for_a_lock_wait(url: str) -> None:
    """Until a backend waits on a row lock: the host's write is in flight, stuck on it."""
    query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    with anyio.fail_after(10):
        while (await anyio.to_thread.run_sync(sql, url, query))[0][0] == 0:  # noqa: ASYNC110
            await anyio.sleep(0.02)  # another process: polled, with a bound


async def stored(url: str, sid: str) -> list[tuple[Any, ...]]:
    query = f"SELECT turn_id, stop_reason FROM acp_turns WHERE session_id = '{sid}' ORDER BY seq"
    return await anyio.to_thread.run_sync(sql, url, query)


async def test_a_session_whose_write_waits_on_a_lock_holds_no_other(
    server: PostgresServer, tmp_path: Path
) -> None:
    url = fresh_schema_url(server.url)
    async with host(url, call_timeout=20) as agent:
        stuck, _, _ = await agent.new_session(tmp_path)
        other, _, _ = await agent.new_session(tmp_path)
        async with row_locked(url, stuck):
            waiting = await agent.start_prompt(stuck, "/echo stuck")
            await wait_for_a_lock_wait(url)
            with anyio.fail_after(10):  # far less than the store's bound
                for n in range(3):
                    turn = await agent.prompt(other, f"/echo other {n}")
                    assert turn.stop_reason == "end_turn", turn.response
        turn = await agent.finish_prompt(waiting)
        assert turn.stop_reason == "end_turn", turn.response
    assert [reason for _, reason in await stored(url, stuck)] == ["end_turn"]
    assert [reason for _, reason in await stored(url, other)] == ["end_turn"] * 3


@pytest.mark.parametrize("cancel", ["session/cancel", "$/cancel_request"])
async def test_a_cancel_ends_a_prompt_whose_write_is_stuck_at_once(
    server: PostgresServer, tmp_path: Path, cancel: str
) -> None:
    """The turn's write is in flight (waiting on a row lock) when the server is paused:
    a cancel answers at once, the session's next prompt waits until the write is
    confirmed, and once the server is back every turn is stored once, in order."""
    url = fresh_schema_url(server.url)
    async with host(url, call_timeout=30) as agent:
        sid, _, _ = await agent.new_session(tmp_path)
        assert (await agent.prompt(sid, "/echo before")).stop_reason == "end_turn"
        async with row_locked(url, sid):
            request = await agent.start_prompt(sid, "/echo stuck")
            await wait_for_a_lock_wait(url)
            paused = await anyio.to_thread.run_sync(pause, server)
            try:
                if cancel == "session/cancel":
                    await agent.notify("session/cancel", {"sessionId": sid})
                else:
                    await agent.notify("$/cancel_request", {"requestId": request})
                turn = await agent.finish_prompt(request, timeout=5)  # the bound is 30 s
                assert turn.stop_reason == "cancelled", turn.response
                waiting = await agent.start_prompt(sid, "/echo after")  # not refused
            finally:
                resume(paused)
        # the write is confirmed soon after the lock is gone; then the prompt runs
        turn = await agent.finish_prompt(waiting, timeout=30)
        assert turn.stop_reason == "end_turn", turn.response
    async with host(url) as agent:  # a new host process loads the session
        params = {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
        _, replay = await agent.call("session/load", params)
    texts = [
        m["params"]["update"]["content"]["text"]
        for m in replay
        if update_kind(m) == "agent_message_chunk"
    ]
    assert texts == ["before", "stuck", "after"]
    rows = await stored(url, sid)
    assert len({turn_id for turn_id, _ in rows}) == len(rows) == 3
