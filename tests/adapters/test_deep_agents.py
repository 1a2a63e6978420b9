"""A Deep Agents graph (``tests/adapters/da_agent.py``) served by the LangGraph adapter,
end to end: a real ``acp-agent-kit --agent`` subprocess on the fake endpoint, the SQLite
store on disk. Its ``write_todos`` is the plan, its file tools go through the client's
``fs/*``, its ``task`` subagent call is a tool call, ``interrupt_on`` asks permission on
the streamed call, and a new process loads the session with the model remembering. The
tests share one process (each in its own session); the load test starts a second."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("deepagents")

from acp_agent.llm.fake_server import FakeModelServer
from tests.helpers.wire_client import Message, Turn

from .serving import SLOW, Shared, calls, new_session, one_test, served, statuses, text

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

SPEC = "tests.adapters.da_agent:served"


@pytest.fixture(scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Shared]:
    store = str(tmp_path_factory.mktemp("deep") / "sessions.db")
    async with FakeModelServer.running() as fake, served(SPEC, fake, store) as client:
        yield Shared(SPEC, client, fake)


def editor(
    files: dict[str, str], option: str | None = "allow_once"
) -> Callable[[Message], Awaitable[Any]]:
    """A client answering ``fs/*`` from ``files`` (path -> text; writes land there) and
    permission requests with ``option`` (None: dismissed)."""

    async def answer(request: Message) -> Any:
        method, params = request["method"], request["params"]
        if method == "fs/read_text_file":
            return {"content": files[params["path"]]}
        if method == "fs/write_text_file":
            files[params["path"]] = params["content"]
            return {}
        assert method == "session/request_permission", request
        if option is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": option}}

    return answer


async def one_turn(shared: Shared, cwd: Path, prompt: str) -> Turn:
    """One turn of a new session of ``shared``, which ends ``end_turn``."""
    async with one_test(shared):
        sid = await new_session(shared.client, cwd)
        turn = await shared.client.prompt(sid, prompt, timeout=SLOW)
    assert turn.stop_reason == "end_turn", turn.response
    return turn


async def test_write_todos_is_the_plan(shared: Shared, tmp_path: Path) -> None:
    todos = (
        '{"todos": [{"content": "Read", "status": "in_progress"},'
        ' {"content": "Fix", "status": "pending"}]}'
    )
    turn = await one_turn(shared, tmp_path, f"fake:call write_todos {todos}")
    plans = [u for u in turn.updates if u["sessionUpdate"] == "plan"]
    assert plans[-1]["entries"] == [
        {"content": "Read", "priority": "medium", "status": "in_progress"},
        {"content": "Fix", "priority": "medium", "status": "pending"},
    ]


async def test_file_tools_read_and_edit_through_the_clients_editor(
    shared: Shared, tmp_path: Path
) -> None:
    notes = str(tmp_path / "notes.txt")
    files = {notes: "alpha\nbeta\n"}
    async with one_test(shared):
        client = shared.client
        client.on_request = editor(files)
        sid = await new_session(client, tmp_path)
        read = await client.prompt(
            sid, 'fake:call read_file {"file_path": "/notes.txt"}', timeout=SLOW
        )
        edit = await client.prompt(
            sid,
            'fake:call edit_file {"file_path": "/notes.txt", "old_string": "beta",'
            ' "new_string": "gamma"}',
            timeout=SLOW,
        )
    assert read.stop_reason == edit.stop_reason == "end_turn"
    [(_, updates)] = calls(read).items()
    assert updates[0]["kind"] == "read" and statuses(updates)[-1] == "completed"
    assert "beta" in text(updates)  # the editor's text, not a virtual file
    assert [r["method"] for r in read.requests] == ["fs/read_text_file"]
    assert [r["method"] for r in edit.requests] == ["fs/read_text_file", "fs/write_text_file"]
    assert files[notes] == "alpha\ngamma\n"


async def test_a_subagent_call_is_a_tool_call(shared: Shared, tmp_path: Path) -> None:
    task = '{"description": "fake:cold", "subagent_type": "helper"}'
    turn = await one_turn(shared, tmp_path, f"fake:call task {task}")
    [(_, updates)] = calls(turn).items()
    assert (updates[0]["title"], updates[0]["kind"]) == ("task", "think")
    assert statuses(updates)[-1] == "completed" and text(updates)


@pytest.mark.parametrize("option", ["allow_once", "reject_once", None])
async def test_interrupt_on_asks_on_the_streamed_call(
    shared: Shared, option: str | None, tmp_path: Path
) -> None:
    async with one_test(shared):
        client = shared.client
        client.on_request = editor({}, option)
        sid = await new_session(client, tmp_path)
        turn = await client.prompt(sid, "fake:call run_command command=ls", timeout=SLOW)
    [request] = turn.requests
    [(call_id, updates)] = calls(turn).items()
    assert request["params"]["toolCall"] == {"toolCallId": call_id}
    if option is None:
        assert turn.stop_reason == "cancelled"
        return
    assert turn.stop_reason == "end_turn"
    ran = option == "allow_once"
    assert ("ran ls" in text(updates)) is ran
    assert statuses(updates)[-1] == ("completed" if ran else "failed")


async def test_a_new_process_loads_the_session_and_the_model_remembers(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    store = str(tmp_path / "sessions.db")
    async with served(SPEC, fake, store) as client:
        sid = await new_session(client, tmp_path)
        turn = await client.prompt(sid, "fake:call add a=2 b=3", timeout=SLOW)
        assert turn.stop_reason == "end_turn", turn.response
    async with served(SPEC, fake, store) as client:
        await client.call(
            "session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
        )
        turn = await client.prompt(sid, "fake:echo", timeout=SLOW)
    assert turn.stop_reason == "end_turn", turn.response
    said = [m for m in fake.requests[-1]["messages"] if m["role"] in ("user", "tool")]
    assert [
        m["content"] if isinstance(m["content"], str) else m["content"][0]["text"] for m in said
    ][:2] == ["fake:call add a=2 b=3", "5"]
