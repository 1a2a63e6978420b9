"""The stdio guarantees, per remote connection, over WebSocket and Streamable HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

from acp_agent.store import MemorySessionStore
from tests.helpers.wire_client import is_response

from ._support import KINDS, Limits, connect, running_server, workdir

pytestmark = pytest.mark.anyio


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_a_turn_streams_its_updates_before_its_answer(kind: str, tmp_path: Path) -> None:
    async with running_server() as url, connect(url, kind) as client:
        await client.initialize()
        session_id, _, _ = await client.new_session(workdir(tmp_path))
        turn = await client.prompt(session_id, "/stream 50 8")
        assert turn.stop_reason == "end_turn"
        assert [len(text) for text in turn.texts()] == [8] * 50
        echo = await client.prompt(session_id, "/echo over the wire")
        assert echo.texts() == ["over the wire"]


async def test_one_prompt_per_session_and_cancel_answers_cancelled(
    kind: str, tmp_path: Path
) -> None:
    async with running_server() as url, connect(url, kind) as client:
        await client.initialize()
        session_id, _, _ = await client.new_session(workdir(tmp_path))
        first = await client.start_prompt(session_id, "/sleep 60000")
        second = await client.start_prompt(session_id, "/echo too soon")
        refused, _ = await client.expect(lambda m: is_response(m, second))
        assert refused["error"]["code"] == -32010
        turn = await client.cancel(session_id, first)
        assert turn.stop_reason == "cancelled"
        assert (await client.prompt(session_id, "/echo again")).texts() == ["again"]


async def test_client_calls_follow_the_capabilities(kind: str, tmp_path: Path) -> None:
    (Path(workdir(tmp_path)) / "note.txt").write_text("hello")
    async with running_server() as url, connect(url, kind) as client:
        await client.initialize(capabilities={})
        session_id, _, _ = await client.new_session(workdir(tmp_path))
        turn = await client.prompt(session_id, "/read note.txt")
        assert turn.requests == []
        assert "readTextFile" in " ".join(turn.texts())

    async with running_server() as url, connect(url, kind) as client:
        await client.initialize()

        async def read(request: dict) -> dict:
            assert request["method"] == "fs/read_text_file"
            return {"content": "hello"}

        client.on_request = read
        session_id, _, _ = await client.new_session(workdir(tmp_path))
        turn = await client.prompt(session_id, "/read note.txt")
        assert [r["method"] for r in turn.requests] == ["fs/read_text_file"]
        assert turn.texts() == ["read 5 chars"]


async def test_bad_input_is_answered_and_the_connection_goes_on(kind: str, tmp_path: Path) -> None:
    async with running_server() as url, connect(url, kind) as client:
        await client.initialize()
        await client.send_raw(b'{"jsonrpc": "2.0", "id": 41, "method": "session/new", "params": \n')
        garbled = await client.receive()
        assert garbled["error"]["code"] == -32700
        request_id = await client.request("no/such_method", {})
        missing, _ = await client.expect(lambda m: is_response(m, request_id))
        assert missing["error"]["code"] == -32601
        session_id, _, _ = await client.new_session(workdir(tmp_path))
        assert (await client.prompt(session_id, "/echo fine")).texts() == ["fine"]


async def test_a_message_over_the_cap_is_refused_and_not_fatal(kind: str, tmp_path: Path) -> None:
    limits = Limits(max_message=4096)
    async with running_server(limits=limits) as url, connect(url, kind) as client:
        await client.initialize()
        session_id, _, _ = await client.new_session(workdir(tmp_path))
        request_id = await client.start_prompt(session_id, "/echo " + "y" * 5000)
        answer, _ = await client.expect(lambda m: is_response(m, request_id))
        assert answer["error"]["code"] in (-32012, -32603)
        assert (await client.prompt(session_id, "/echo small")).texts() == ["small"]


async def test_too_many_pending_requests_are_refused(kind: str, tmp_path: Path) -> None:
    async with running_server(limits=Limits(pending=2)) as url, connect(url, kind) as client:
        await client.initialize()
        one, _, _ = await client.new_session(workdir(tmp_path))
        two, _, _ = await client.new_session(workdir(tmp_path))
        three, _, _ = await client.new_session(workdir(tmp_path))
        first = await client.start_prompt(one, "/sleep 60000")
        second = await client.start_prompt(two, "/sleep 60000")
        third = await client.start_prompt(three, "/echo no room")
        refused, _ = await client.expect(lambda m: is_response(m, third))
        assert refused["error"]["code"] == -32013
        await client.notify("session/cancel", {"sessionId": one})
        await client.notify("session/cancel", {"sessionId": two})
        # two sessions' turns: their answers may come in either order
        waiting = {first, second}
        while waiting:
            answer, _ = await client.expect(lambda m: "method" not in m and m.get("id") in waiting)
            assert answer["result"]["stopReason"] == "cancelled"
            waiting.discard(answer["id"])
        assert (await client.prompt(three, "/echo room now")).texts() == ["room now"]


async def test_a_dropped_connection_cancels_its_turn_and_the_session_stays_loadable(
    kind: str, tmp_path: Path
) -> None:
    store = MemorySessionStore()
    async with running_server(store=store) as url:
        async with connect(url, kind) as client:
            await client.initialize()
            session_id, _, _ = await client.new_session(workdir(tmp_path))
            await client.prompt(session_id, "/echo before the drop")
            await client.start_prompt(session_id, "/stream 1000000 8")
            await client.expect(lambda m: m.get("method") == "session/update")
        # the connection is gone mid-turn; a new one loads the session
        async with connect(url, kind) as client:
            await client.initialize()
            _, replay = await client.call(
                "session/load",
                {"sessionId": session_id, "cwd": workdir(tmp_path), "mcpServers": []},
            )
            texts = [
                m["params"]["update"].get("content", {}).get("text")
                for m in replay
                if m.get("method") == "session/update"
            ]
            assert "before the drop" in texts
            assert (await client.prompt(session_id, "/echo after")).texts() == ["after"]
