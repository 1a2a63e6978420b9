"""Sessions shared by two real ``acp-agent`` host processes on one PostgreSQL database.

Host A runs on trio, host B on the default loop (uvloop where installed), each its own
process with ``--store postgresql://...`` and a short ``--lease-timeout``. A session made
on A is continued on B with exact replay; B is refused a session A serves; a host killed
mid-turn loses nothing it had written and B takes over once its lease expires; a host
paused past its lease (SIGSTOP) finds its late write refused when it resumes. With
``--busy-policy queue``, prompts waiting for a busy session are kept in the database and run
in order, on the next owner if their host dies.

Waiting for a lease to expire is waiting for the database's clock: B retries a refused
load after the ``retryAfterMs`` the refusal names (bounded), and what another process
has written is polled from the database; nothing else sleeps.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers.wire_client import FULL_CAPS, Message, ProcessClient, spawn
from tests.server.test_durability import allow, replay_without_extras

pytestmark = pytest.mark.anyio

LEASE = 2.0  # seconds: short, so that takeovers happen within the test (renewed each 2/3 s)
SESSION_LEASED = -32030


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the test's own loop; the hosts choose theirs (--backend)


def host(url: str, backend: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "acp_agent",
        "--store",
        url,
        "--lease-timeout",
        str(LEASE),
        "--backend",
        backend,
    ]


@asynccontextmanager
async def started(url: str, backend: str, *flags: str) -> AsyncIterator[ProcessClient]:
    async with spawn([*host(url, backend), *flags]) as agent:
        agent.on_request = allow
        await agent.initialize(FULL_CAPS)
        yield agent


async def load(agent: ProcessClient, sid: str, work: Path) -> tuple[Message, list[Message]]:
    """``session/load``: its response and the frames before it."""
    request_id = await agent.request(
        "session/load", {"sessionId": sid, "cwd": str(work), "mcpServers": []}
    )
    return await agent.expect(lambda m: m.get("id") == request_id and "method" not in m)


async def load_when_free(agent: ProcessClient, sid: str, work: Path) -> list[Message]:
    """Load, retrying while another host's lease is live (as the refusal says to)."""
    with anyio.fail_after(10 * LEASE + 10):
        while True:
            response, frames = await load(agent, sid, work)
            error = response.get("error")
            if error is None:
                return frames
            assert error["code"] == SESSION_LEASED, error
            assert error["data"]["reason"] == "leased"
            await anyio.sleep(error["data"]["retryAfterMs"] / 1000 + 0.05)


def user(text: str) -> Message:
    return {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}}


async def query(url: str, sql: str, *params: object) -> list[tuple[Any, ...]]:
    import psycopg

    async with await psycopg.AsyncConnection.connect(url) as conn:
        cursor = await conn.execute(sql, params)  # type: ignore[arg-type]
        return await cursor.fetchall()


async def eventually(check: Callable[[], Awaitable[bool]]) -> None:
    """Wait until ``check()`` holds (it reads what another process writes)."""
    with anyio.fail_after(10):
        while not await check():  # noqa: ASYNC110 - another process; no shared clock
            await anyio.sleep(0.02)


async def stored(url: str, sid: str, needle: str) -> None:
    """Wait until an update of the session holding ``needle`` is in the database."""

    async def found() -> bool:
        rows = await query(
            url,
            "SELECT count(*) FROM acp_updates u, unnest(u.items) AS item "
            "WHERE u.session_id = %s AND strpos(item, %s) > 0",
            sid,
            needle,
        )
        return bool(rows[0][0])

    await eventually(found)


async def test_a_session_moves_between_hosts_with_exact_replay(
    postgres_url: str, tmp_path: Path
) -> None:
    live: list[Message] = []
    async with started(postgres_url, "trio") as a:
        sid, _, _ = await a.new_session(tmp_path)
        for text in ["/echo one", "/think two", "/tools 2", "/plan 2"]:
            turn = await a.prompt(sid, text)
            assert turn.stop_reason == "end_turn", turn.response
            live += [user(text), *turn.updates]
        await a.call("session/close", {"sessionId": sid})

        async with started(postgres_url, "auto") as b:
            listed, _ = await b.call("session/list", {"cwd": str(tmp_path)})
            assert [s["sessionId"] for s in listed["sessions"]] == [sid]
            response, frames = await load(b, sid, tmp_path)
            assert response.get("result") is not None, response
            assert replay_without_extras(frames, sid) == live
            turn = await b.prompt(sid, "/echo three")
            assert turn.stop_reason == "end_turn" and turn.texts() == ["three"]

            # B serves it now: A is refused, naming the reason and when to retry.
            response, _ = await load(a, sid, tmp_path)
            error = response["error"]
            assert error["code"] == SESSION_LEASED
            assert error["data"]["reason"] == "leased"
            assert 0 < error["data"]["retryAfterMs"] <= LEASE * 1000
            assert "another host" in error["message"]
            # ... and a turn B is serving is not disturbed by the refusal.
            turn = await b.prompt(sid, "/echo four")
            assert turn.texts() == ["four"]


async def test_sigkill_mid_turn_then_another_host_takes_over(
    postgres_url: str, tmp_path: Path
) -> None:
    async with started(postgres_url, "trio") as a:
        sid, _, _ = await a.new_session(tmp_path)
        first = await a.prompt(sid, "/echo before the crash")
        # /write announces its tool call, then waits for the permission answer.
        a.on_request = never_answered
        await a.start_prompt(sid, f"/write {tmp_path}/b.txt never")
        _, skipped = await a.expect(lambda m: m.get("method") == "session/request_permission")
        sent = [m["params"]["update"] for m in skipped if m.get("method") == "session/update"]
        assert [u["sessionUpdate"] for u in sent] == ["tool_call"]
        await stored(postgres_url, sid, sent[0]["toolCallId"])

        async with started(postgres_url, "auto") as b:
            response, _ = await load(b, sid, tmp_path)  # A is alive: refused
            assert response["error"]["code"] == SESSION_LEASED
            a.process.send_signal(signal.SIGKILL)
            await a.process.wait()
            replay = replay_without_extras(await load_when_free(b, sid, tmp_path), sid)
            assert replay == [
                user("/echo before the crash"),
                *first.updates,
                user(f"/write {tmp_path}/b.txt never"),
                sent[0],
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": sent[0]["toolCallId"],
                    "status": "failed",
                },
            ]
            turn = await b.prompt(sid, "/echo after")
            assert turn.stop_reason == "end_turn" and turn.texts() == ["after"]


async def never_answered(request: Message) -> Any:
    await anyio.sleep_forever()


async def test_a_paused_host_cannot_write_over_the_new_owner(
    postgres_url: str, tmp_path: Path
) -> None:
    async with started(postgres_url, "trio") as a:
        sid, _, _ = await a.new_session(tmp_path)
        await a.prompt(sid, "/echo from a")
        sleeping = await a.start_prompt(sid, f"/sleep {int(LEASE * 3000)}")
        await stored(postgres_url, sid, "/sleep")
        a.process.send_signal(signal.SIGSTOP)
        try:
            async with started(postgres_url, "auto") as b:
                replay = replay_without_extras(await load_when_free(b, sid, tmp_path), sid)
                assert replay[-1] == user(f"/sleep {int(LEASE * 3000)}")  # interrupted
                turn = await b.prompt(sid, "/echo from b")
                assert turn.texts() == ["from b"]
                a.process.send_signal(signal.SIGCONT)
                late = await a.finish_prompt(sleeping, timeout=10 * LEASE + 10)
                assert late.error is not None, late.response
                assert late.error["code"] == SESSION_LEASED
                assert late.error["data"]["reason"] == "leaseLost"
                # A cannot start another turn either; B's history is untouched.
                again = await a.prompt(sid, "/echo from a again")
                assert again.error is not None and again.error["code"] == SESSION_LEASED
                await b.call("session/close", {"sessionId": sid})
                replay = replay_without_extras(await load_when_free(b, sid, tmp_path), sid)
                texts = [u["content"].get("text") for u in replay if "content" in u]
                assert texts == [
                    "/echo from a",
                    "from a",
                    f"/sleep {int(LEASE * 3000)}",
                    "/echo from b",
                    "from b",
                ]
        finally:
            a.process.send_signal(signal.SIGCONT)


async def test_a_host_that_ends_releases_its_sessions_at_once(
    postgres_url: str, tmp_path: Path
) -> None:
    async with started(postgres_url, "trio") as a:
        sid, _, _ = await a.new_session(tmp_path)
        await a.prompt(sid, "/echo kept")
    # A's client went away (stdin closed) and A exited: no lease to wait for.
    async with started(postgres_url, "auto") as b:
        response, frames = await load(b, sid, tmp_path)
        assert response.get("result") is not None, response
        assert [u["sessionUpdate"] for u in replay_without_extras(frames, sid)] == [
            "user_message_chunk",
            "agent_message_chunk",
        ]


QUEUE = ("--busy-policy", "queue")


async def held_requests(url: str) -> list[str]:
    """The params of the prompts held in the database, in arrival order."""
    rows = await query(url, "SELECT request FROM acp_prompt_queue ORDER BY arrival")
    return [str(request) for (request,) in rows]


async def busy_with_waiting(
    agent: ProcessClient, url: str, sid: str, *texts: str
) -> tuple[int, list[int]]:
    """Keep the session busy and queue ``texts`` behind; return when they are held."""
    busy = await agent.start_prompt(sid, "/sleep 60000")
    waiting = [await agent.start_prompt(sid, text) for text in texts]

    async def all_held() -> bool:
        return len(await held_requests(url)) == len(texts)

    await eventually(all_held)
    return busy, waiting


async def test_queued_prompts_wait_in_the_database_and_run_in_order(
    postgres_url: str, tmp_path: Path
) -> None:
    async with started(postgres_url, "trio", *QUEUE) as a:
        sid, _, _ = await a.new_session(tmp_path)
        busy, (second, third) = await busy_with_waiting(
            a, postgres_url, sid, "/echo second", "/echo third"
        )
        requests = await held_requests(postgres_url)
        assert "/echo second" in requests[0] and "/echo third" in requests[1]
        await a.notify("session/cancel", {"sessionId": sid})
        assert (await a.finish_prompt(busy)).stop_reason == "cancelled"
        assert (await a.finish_prompt(second)).texts() == ["second"]
        assert (await a.finish_prompt(third)).texts() == ["third"]
        assert await held_requests(postgres_url) == []  # each went with its turn's first write


async def test_a_prompt_queued_on_a_dead_host_runs_on_the_next_owner(
    postgres_url: str, tmp_path: Path
) -> None:
    async with started(postgres_url, "trio", *QUEUE) as a:
        sid, _, _ = await a.new_session(tmp_path)
        await busy_with_waiting(a, postgres_url, sid, "/echo kept for later")
        await stored(postgres_url, sid, "/sleep 60000")  # the busy turn's own first write
        a.process.send_signal(signal.SIGKILL)
        await a.process.wait()

    async with started(postgres_url, "auto", *QUEUE) as b:
        await load_when_free(b, sid, tmp_path)
        # After the load's response, B runs what A had queued, streaming it to its client.
        update, _ = await b.expect(
            lambda m: (
                m.get("method") == "session/update"
                and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
            )
        )
        assert update["params"]["update"]["content"]["text"] == "kept for later"
        turn = await b.prompt(sid, "/echo mine")  # queued behind it, if it still runs
        assert turn.texts() == ["mine"]
        assert await held_requests(postgres_url) == []
        await b.call("session/close", {"sessionId": sid})
        replay = replay_without_extras(await load_when_free(b, sid, tmp_path), sid)
        texts = [u["content"].get("text") for u in replay if "content" in u]
        assert texts == [
            "/sleep 60000",
            "/echo kept for later",
            "kept for later",
            "/echo mine",
            "mine",
        ]
