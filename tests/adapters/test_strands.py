"""The Strands Agents adapter apart from what it shares with the other adapters
(``test_frameworks.py``: tool calls, approval, cancel, usage, memory in a new process,
the model chooser; ``test_sdk_clients.py``; ``test_broken_model.py``): nothing of Strands
is imported until an agent is adapted, the registry finds the adapter for Strands' agents,
a hook's rejection reaches the client as its call's content, and the sessions served by
one Strands ``Agent`` object do not share its memory.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("strands")

from acp_agent.llm.fake_server import FakeModelServer
from tests.helpers.wire_client import ROOT, child_env

from .serving import SLOW, Shared, answering, calls, new_session, one_test, served, statuses, text

pytestmark = pytest.mark.anyio

SPEC = "tests.adapters.st_agent:served"


@pytest.fixture(scope="module")
async def shared_process(shared_fake: FakeModelServer) -> AsyncIterator[Shared]:
    async with served(SPEC, shared_fake) as client:
        yield Shared(SPEC, client, shared_fake)


@pytest.fixture
async def agent(shared_process: Shared) -> AsyncIterator[Shared]:
    async with one_test(shared_process) as shared:
        yield shared


def test_importing_the_adapter_imports_no_framework() -> None:
    code = (
        "import sys, acp_agent.adapters, acp_agent.adapters.strands;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'strands', 'openai', 'mcp'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_strands_agent_is_served_by_its_adapter() -> None:
    from strands import Agent

    from acp_agent.adapters import framework_of

    found = framework_of(Agent(model="fake", callback_handler=None))
    assert found is not None and found.extra == "strands"


async def test_a_rejected_call_shows_what_the_hook_told_the_model(
    agent: Shared, tmp_path: Path
) -> None:
    client, fake = agent.client, agent.fake
    client.on_request = answering("reject_always")
    sid = await new_session(client, tmp_path)
    for _ in range(2):  # the second is rejected without asking
        turn = await client.prompt(sid, "fake:run echo hi", timeout=SLOW)
        assert turn.stop_reason == "end_turn"
        [(_, updates)] = calls(turn).items()
        assert statuses(updates) == ["pending", "failed"]
        assert text(updates) == "The person did not allow the command."
        tool_messages = [m for m in fake.requests[-1]["messages"] if m["role"] == "tool"]
        assert "The person did not allow the command." in str(tool_messages[-1]["content"])
    assert len(turn.requests) == 0


async def test_sessions_of_one_agent_object_do_not_share_its_memory(
    agent: Shared, tmp_path: Path
) -> None:
    client, fake = agent.client, agent.fake
    first = await new_session(client, tmp_path)
    second = await new_session(client, tmp_path)
    await client.prompt(first, "my word is zebra fake:cold", timeout=SLOW)
    await client.prompt(second, "fake:echo", timeout=SLOW)
    await client.prompt(first, "fake:echo", timeout=SLOW)
    by_request = [
        [str(m["content"]) for m in request["messages"] if m["role"] == "user"]
        for request in fake.requests[-2:]
    ]
    assert ["fake:echo" in u for u in by_request[0]] == [True]
    assert len(by_request[1]) == 2 and "zebra" in by_request[1][0]
