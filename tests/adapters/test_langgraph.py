"""What only the LangGraph adapter does: every way a graph asks for approval (the
human-in-the-loop middleware batched and per call, ``interrupt()`` inside a tool), plans
from langchain's ``write_todos``, reasoning blocks as thoughts. End to end, as in
``test_frameworks.py``, on the agents of ``lg_agent.py``; the approval tests share one
process per way of asking (each in its own session)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("langgraph")

from acp_agent.llm.fake_server import FakeModelServer
from tests.helpers.wire_client import is_response

from .serving import SLOW, Shared, answering, calls, new_session, one_test, served, statuses, text

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", params=["per_call", "interrupt"])
async def asking(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, Shared]]:
    """One way of asking for approval, and one process of the agent that asks so."""
    approval, spec = str(request.param), "tests.adapters.lg_agent:agent"
    env = {"ACP_TEST_APPROVAL": approval}
    async with FakeModelServer.running() as fake, served(spec, fake, env=env) as client:
        yield approval, Shared(spec, client, fake)


@pytest.mark.parametrize("option", ["allow_once", "reject_once"])
async def test_each_way_of_asking_becomes_a_permission_on_the_streamed_call(
    asking: tuple[str, Shared], option: str, tmp_path: Path
) -> None:
    approval, shared = asking
    async with one_test(shared):
        client = shared.client
        client.on_request = answering(option)
        sid = await new_session(client, tmp_path)
        turn = await client.prompt(sid, "fake:run echo hi", timeout=SLOW)
    assert turn.stop_reason == "end_turn"
    [request] = turn.requests
    [(call_id, updates)] = calls(turn).items()
    assert request["params"]["toolCall"] == {"toolCallId": call_id}
    ran = option == "allow_once"
    assert ("ran echo hi" in text(updates)) is ran
    if approval == "per_call":  # asked before the tool starts: still pending
        assert statuses(updates) == (
            ["pending", "in_progress", "completed"] if ran else ["pending", "failed"]
        )
    else:  # the tool itself asks, while it runs; a rejection is its own answer
        assert statuses(updates) == ["pending", "in_progress", "completed"]


async def test_write_todos_becomes_the_plan(fake: FakeModelServer, tmp_path: Path) -> None:
    todos = (
        '{"todos": [{"content": "Read the code", "status": "in_progress"},'
        ' {"content": "Fix it", "status": "pending"}]}'
    )
    async with served("tests.adapters.lg_agent:planner", fake) as client:
        sid = await new_session(client, tmp_path)
        turn = await client.prompt(sid, f"fake:call write_todos {todos}", timeout=SLOW)
    assert turn.stop_reason == "end_turn"
    [plan] = [u for u in turn.updates if u["sessionUpdate"] == "plan"]
    assert plan["entries"] == [
        {"content": "Read the code", "priority": "medium", "status": "in_progress"},
        {"content": "Fix it", "priority": "medium", "status": "pending"},
    ]


async def test_reasoning_blocks_are_thoughts(fake: FakeModelServer, tmp_path: Path) -> None:
    async with served("tests.adapters.lg_agent:thinker", fake) as client:
        sid = await new_session(client, tmp_path)
        turn = await client.prompt(sid, "hello", timeout=SLOW)
    assert turn.kinds() == ["agent_thought_chunk", "agent_message_chunk"]
    assert turn.texts("agent_thought_chunk") == ["The user greets me."]
    assert turn.texts() == ["Hello!"]


async def test_trio_is_refused_with_one_clear_error(fake: FakeModelServer, tmp_path: Path) -> None:
    async with served(
        "tests.adapters.lg_agent:thinker", fake, "memory", "--backend", "trio"
    ) as client:
        sid = await new_session(client, tmp_path)
        turn = await client.prompt(sid, "hello", timeout=SLOW)
    assert turn.error is not None and "asyncio" in turn.error["message"]


@pytest.mark.parametrize("allowed", ["reject", "respond", "edit,reject"])
async def test_where_approve_is_not_allowed_only_rejecting_is_offered(
    allowed: str, fake: FakeModelServer, tmp_path: Path
) -> None:
    async with served(
        "tests.adapters.lg_agent:agent", fake, env={"ACP_TEST_ALLOWED": allowed}
    ) as client:
        client.on_request = answering("reject_once")
        sid = await new_session(client, tmp_path)
        turn = await client.prompt(sid, "fake:run echo hi", timeout=SLOW)
    assert turn.stop_reason == "end_turn"
    [request] = turn.requests
    offered = [option["optionId"] for option in request["params"]["options"]]
    assert offered == ["reject_once", "reject_always"]
    [(_, updates)] = calls(turn).items()
    assert statuses(updates) == ["pending", "failed"]  # it never ran
    told = [m for m in fake.requests[-1]["messages"] if m["role"] == "tool"]
    if allowed == "respond":  # the middleware's own way of declining: the tool's answer
        assert told[-1]["content"] == "The user declined to run this tool."
    else:
        assert "User rejected the tool call" in told[-1]["content"]
        assert "edited" not in told[-1]["content"].lower()


async def test_a_call_that_may_only_be_edited_is_an_error_not_a_question(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    async with served(
        "tests.adapters.lg_agent:agent", fake, env={"ACP_TEST_ALLOWED": "edit"}
    ) as client:
        sid = await new_session(client, tmp_path)
        turn = await client.prompt(sid, "fake:run echo hi", timeout=SLOW)
    assert turn.requests == []
    assert turn.error is not None and "may only be edited" in turn.error["message"]


async def test_a_cancelled_turn_releases_the_terminal_it_opened(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    async with served("tests.adapters.lg_agent:terminals", fake) as client:
        sid = await new_session(client, tmp_path)
        prompt = await client.start_prompt(sid, "fake:run sleep 30")
        asked: list[str] = []
        while True:
            message = await client.receive(timeout=SLOW)
            method = message.get("method")
            if is_response(message, prompt):
                break
            if method is None or method == "session/update":
                continue
            asked.append(method)
            if method == "terminal/wait_for_exit":  # never answered: the command runs on
                await client.notify("session/cancel", {"sessionId": sid})
                continue
            result = {"terminalId": "term-1"} if method == "terminal/create" else {}
            await client.send({"jsonrpc": "2.0", "id": message["id"], "result": result})
    assert message["result"]["stopReason"] == "cancelled"
    assert asked[0] == "terminal/create" and asked.count("terminal/release") == 1
    assert asked.index("terminal/release") > asked.index("terminal/wait_for_exit")


@pytest.mark.parametrize("spec", ["reasoner", "plain_reasoner"])
async def test_reasoning_content_is_thought_where_the_model_class_keeps_it(
    spec: str, fake: FakeModelServer, tmp_path: Path
) -> None:
    async with served(f"tests.adapters.lg_agent:{spec}", fake) as client:
        sid = await new_session(client, tmp_path)
        turn = await client.prompt(sid, "fake:reasoning", timeout=SLOW)
    assert "".join(turn.texts()) == "The answer is 42."
    kept = spec == "reasoner"  # ChatOpenAI drops the provider's field: no thought at all
    assert turn.texts("agent_thought_chunk") == (
        ["Let me think. ", "Six times seven."] if kept else []
    )
