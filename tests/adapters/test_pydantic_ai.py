"""The pydantic-ai adapter end to end: the real pydantic-ai package in a real agent process
(``--agent tests.adapters.example_pydantic:agent``) on the fake OpenAI-compatible endpoint,
driven over pipes by the wire client.

The tests of approval, cancel, model errors and the editor tools share one process (each in
its own session, on one store on disk); the others start their own."""

from __future__ import annotations

import base64
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from acp_agent.llm.fake_server import FakeModelServer
from tests.helpers.wire_client import FULL_CAPS, Message, ProcessClient, Turn, spawn

from .serving import WAIT_FOR_IMPORT, Shared, conversation_is_valid, loaded, one_test

pytest.importorskip("pydantic_ai")
# a fresh agent process imports pydantic-ai and openai: seconds on a busy machine
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]
START_TIMEOUT = 60.0

AGENT = "tests.adapters.example_pydantic:agent"


@pytest.fixture
async def fake() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer.running() as server:
        yield server


@pytest.fixture(scope="module")
async def shared_process(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Shared]:
    store = tmp_path_factory.mktemp("pydantic-ai") / "s.db"
    async with FakeModelServer.running() as fake, agent(fake, store) as client:
        yield Shared(AGENT, client, fake)


@pytest.fixture
async def shared(shared_process: Shared) -> AsyncIterator[Shared]:
    """The agent process shared by this module's tests, for this test."""
    async with one_test(shared_process) as one:
        yield one


@asynccontextmanager
async def agent(
    fake: FakeModelServer,
    store: Path,
    *,
    unstable: bool = False,
    caps: Message | None = None,
    spec: str = AGENT,
) -> AsyncIterator[ProcessClient]:
    command = [sys.executable, "-m", "acp_agent", "--store", str(store), "--agent", spec]
    if unstable:
        command.append("--unstable")
    env = {"ACP_FAKE_BASE_URL": fake.base_url, **WAIT_FOR_IMPORT}
    async with spawn(command, env=env) as client:
        params = {"protocolVersion": 1, "clientCapabilities": FULL_CAPS if caps is None else caps}
        request_id = await client.request("initialize", params)
        answer, _ = await client.expect(lambda m: m.get("id") == request_id, START_TIMEOUT)
        assert "result" in answer, answer
        await loaded(client)
        yield client


async def new_session(client: ProcessClient, cwd: Path) -> str:
    result, _ = await client.call("session/new", {"cwd": str(cwd), "mcpServers": []})
    return str(result["sessionId"])


def permission(option: str | None) -> Callable[[Message], Any]:
    """Answer permission requests with ``option`` (None: the request is dismissed)."""

    async def answer(request: Message) -> Any:
        assert request["method"] == "session/request_permission", request
        if option is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": option}}

    return answer


def calls(turn: Turn) -> dict[str, list[Message]]:
    """The turn's tool call updates, by tool call id."""
    out: dict[str, list[Message]] = {}
    for update in turn.updates:
        if update["sessionUpdate"] in ("tool_call", "tool_call_update"):
            out.setdefault(update["toolCallId"], []).append(update)
    return out


def statuses(updates: list[Message]) -> list[str]:
    return [u["status"] for u in updates if "status" in u]


def text_of(update: Message) -> str:
    return "".join(
        c["content"]["text"] for c in update.get("content", []) if c["type"] == "content"
    )


async def test_streams_thoughts_text_and_a_plain_tool_call(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    async with agent(fake, tmp_path / "s.db", unstable=True) as client:
        session = await new_session(client, tmp_path)
        turn = await client.prompt(session, "fake:reasoning think")
        assert turn.stop_reason == "end_turn"
        assert turn.kinds()[:3] == ["agent_thought_chunk"] * 2 + ["agent_message_chunk"]
        assert "".join(turn.texts("agent_thought_chunk")) == "Let me think. Six times seven."
        assert "".join(turn.texts()) == "The answer is 42."
        usage = turn.response["result"]["usage"]
        assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"] > 0

        turn = await client.prompt(session, "fake:call add a=2 b=3")
        assert turn.stop_reason == "end_turn"
        [updates] = calls(turn).values()
        first = updates[0]
        assert (first["sessionUpdate"], first["name"], first["kind"]) == (
            "tool_call",
            "add",
            "think",
        )
        assert statuses(updates) == ["pending", "in_progress", "completed"]
        assert updates[1]["rawInput"] == {"a": 2, "b": 3}
        assert text_of(updates[-1]) == "5"
        assert "".join(turn.texts()).endswith("The tool said: 5")
        assert turn.requests == []


@pytest.mark.parametrize("option", ["allow_once", "reject_once", None])
async def test_an_approval_tool_asks_on_the_streamed_call(
    shared: Shared, tmp_path: Path, option: str | None
) -> None:
    client, fake = shared.client, shared.fake
    session = await new_session(client, tmp_path)
    client.on_request = permission(option)
    turn = await client.prompt(session, "fake:call delete_file path=notes.txt")
    [(call_id, updates)] = calls(turn).items()
    [asked] = turn.requests
    assert asked["params"]["toolCall"]["toolCallId"] == call_id
    assert updates[0]["kind"] == "delete"
    assert updates[1]["locations"] == [{"path": str(tmp_path / "notes.txt")}]
    if option == "allow_once":
        assert turn.stop_reason == "end_turn"
        assert statuses(updates) == ["pending", "in_progress", "completed"]
        assert text_of(updates[-1]) == "deleted notes.txt"
    elif option == "reject_once":
        assert turn.stop_reason == "end_turn"
        assert statuses(updates) == ["pending", "failed"]
        assert "rejected" in text_of(updates[-1])
        assert "rejected" in fake.requests[-1]["messages"][-1]["content"]
    else:
        assert turn.stop_reason == "cancelled"
        assert statuses(updates) == ["pending", "failed"]
        assert "dismissed" in text_of(updates[-1])
    # the model's history is valid for the next turn (no dangling tool call)
    client.on_request = permission("allow_once")
    after = await client.prompt(session, "fake:echo")
    assert after.stop_reason == "end_turn", after.response
    assert conversation_is_valid(fake.requests[-1]["messages"])
    assert fake.script.id_errors == []


async def test_cancel_ends_cancelled_and_the_next_turn_goes_on(
    shared: Shared, tmp_path: Path
) -> None:
    client, fake = shared.client, shared.fake
    session = await new_session(client, tmp_path)
    request_id = await client.start_prompt(session, "fake:slow")
    first, _ = await client.expect(lambda m: m.get("method") == "session/update")
    turn = await client.cancel(session, request_id)
    assert turn.stop_reason == "cancelled"
    seen = first["params"]["update"]["content"]["text"] + "".join(turn.texts())
    after = await client.prompt(session, "fake:echo")
    assert after.stop_reason == "end_turn"
    messages = fake.requests[-1]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    # the model remembers what the person saw of the cut answer, and nothing more
    assert messages[2]["content"] == seen


async def test_a_new_process_loads_the_session_and_the_model_remembers(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    store = tmp_path / "s.db"
    async with agent(fake, store) as client:
        session = await new_session(client, tmp_path)
        client.on_request = permission("reject_always")
        await client.prompt(session, "fake:call add a=2 b=3")
        await client.prompt(session, "fake:call delete_file path=a.txt")
    async with agent(fake, store) as client:
        _, replay = await client.call(
            "session/load", {"sessionId": session, "cwd": str(tmp_path), "mcpServers": []}
        )
        kinds = {m["params"]["update"]["sessionUpdate"] for m in replay}
        assert "_acp_agent_state" not in kinds and "tool_call" in kinds
        # "always reject" was remembered: no question this time
        turn = await client.prompt(session, "fake:call delete_file path=b.txt")
        assert turn.requests == []
        assert statuses(next(iter(calls(turn).values()))) == ["pending", "failed"]
        await client.prompt(session, "fake:echo")
    messages = fake.requests[-1]["messages"]
    users = [m["content"] for m in messages if m["role"] == "user"]
    assert users == [
        "fake:call add a=2 b=3",
        "fake:call delete_file path=a.txt",
        "fake:call delete_file path=b.txt",
        "fake:echo",
    ]
    assert next(m["content"] for m in messages if m["role"] == "tool") == "5"
    assert conversation_is_valid(messages)


async def test_a_text_prompt_is_one_string_an_image_prompt_a_list_of_parts(
    shared: Shared, tmp_path: Path
) -> None:
    client, fake = shared.client, shared.fake
    session = await new_session(client, tmp_path)
    link = {"type": "resource_link", "name": "notes", "uri": "file:///notes.txt"}
    text = [{"type": "text", "text": "fake:echo"}, {"type": "text", "text": "two"}, link]
    await client.prompt(session, text)
    said = fake.requests[-1]["messages"][-1]["content"]
    assert said == "fake:echo\ntwo\n[notes](file:///notes.txt)"
    pixel = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()  # only the header: never decoded
    image = {"type": "image", "mimeType": "image/png", "data": pixel}
    await client.prompt(session, [{"type": "text", "text": "fake:echo"}, image])
    parts = fake.requests[-1]["messages"][-1]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url"]


async def test_a_model_error_is_one_clear_error_and_no_answer_is_kept(
    shared: Shared, tmp_path: Path
) -> None:
    client, fake = shared.client, shared.fake
    logged = len(client.stderr)  # what the process said before this test
    session = await new_session(client, tmp_path)
    turn = await client.prompt(session, "fake:unauthorized", timeout=30)
    error = turn.error
    assert error is not None and error["code"] == -32603
    assert "401" in error["message"] and "Incorrect API key" in error["message"]
    assert error["data"]["status"] == 401
    await client.prompt(session, "fake:echo")
    # the prompt is remembered, as the replay shows it; no answer is
    sent = fake.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "user"]
    assert sent[1]["content"] == "fake:unauthorized"
    assert b"Traceback" not in client.stderr[logged:]


async def test_editor_tools_use_the_client_and_stay_in_the_roots(
    shared: Shared, fake: FakeModelServer, tmp_path: Path
) -> None:
    async def editor(request: Message) -> Any:
        assert request["method"] == "fs/read_text_file", request
        return {"content": f"text of {request['params']['path']}"}

    client = shared.client
    session = await new_session(client, tmp_path)
    client.on_request = editor
    turn = await client.prompt(session, "fake:call read_file path=notes.txt")
    [updates] = calls(turn).values()
    assert updates[0]["kind"] == "read"
    assert text_of(updates[-1]) == f"text of {tmp_path / 'notes.txt'}"
    turn = await client.prompt(session, "fake:call read_file path=/etc/hostname")
    assert turn.requests == []  # refused before asking the client
    [updates] = calls(turn).values()
    assert statuses(updates)[-1] == "failed"
    assert "outside the session's folders" in text_of(updates[-1])
    # a client without the editor capabilities: a process of its own (caps are per connection)
    async with agent(fake, tmp_path / "s.db", caps={}) as client:
        session = await new_session(client, tmp_path)
        await client.prompt(session, "fake:echo")
        offered = {t["function"]["name"] for t in fake.requests[-1]["tools"]}
        assert offered.isdisjoint({"read_file", "write_file", "run_command"})
        assert "add" in offered


async def test_commands_plans_and_the_acp_client_from_a_tool(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    caps = {**FULL_CAPS, "session": {"notices": {}}}
    spec = "tests.adapters.example_pydantic:served"
    async with agent(fake, tmp_path / "s.db", caps=caps, spec=spec) as client:
        await client.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        advertised, _ = await client.expect(lambda m: m.get("method") == "session/update")
        names = [c["name"] for c in advertised["params"]["update"]["availableCommands"]]
        assert "plan" in names and "tools" in names
        session = advertised["params"]["sessionId"]
        turn = await client.prompt(session, "/plan 3")
        [plan] = [u for u in turn.updates if u["sessionUpdate"] == "plan"]
        assert [e["content"] for e in plan["entries"]] == ["step 1", "step 2", "step 3"]
        assert {e["priority"] for e in plan["entries"]} == {"medium"}
        turn = await client.prompt(session, "/notice warning disk almost full")
        [notice] = [u for u in turn.updates if u["sessionUpdate"] == "notice"]
        assert (notice["severity"], notice["title"]) == ("warning", "disk almost full")
