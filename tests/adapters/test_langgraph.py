"""What only the LangGraph adapter does: every way a graph asks for approval (the
human-in-the-loop middleware batched and per call, ``interrupt()`` inside a tool), plans
from langchain's ``write_todos``, reasoning blocks as thoughts. End to end, as in
``test_frameworks.py``, on the agents of ``lg_agent.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("langgraph")

from acp_agent.llm.fake_server import FakeModelServer

from .serving import SLOW, answering, calls, new_session, served, statuses, text

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("approval", ["per_call", "interrupt"])
@pytest.mark.parametrize("option", ["allow_once", "reject_once"])
async def test_each_way_of_asking_becomes_a_permission_on_the_streamed_call(
    approval: str, option: str, fake: FakeModelServer, tmp_path: Path
) -> None:
    async with served(
        "tests.adapters.lg_agent:agent", fake, env={"ACP_TEST_APPROVAL": approval}
    ) as client:
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
