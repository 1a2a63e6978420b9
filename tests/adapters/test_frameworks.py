"""The LangGraph, OpenAI Agents SDK and Strands adapters end to end: the real framework packages on
the project's fake OpenAI-compatible endpoint, served by a real ``acp-agent-kit --agent``
subprocess, driven over its pipes by the wire client.

Each test runs for each adapter, on the agents of ``lg_agent.py`` (a LangChain
``create_agent`` graph compiled without a checkpointer, approval by the human-in-the-loop
middleware), ``oa_agent.py`` (an Agents SDK agent on Chat Completions, approval by
``needs_approval``) and ``st_agent.py`` (a Strands agent on its OpenAI model, approval by a
``BeforeToolCallEvent`` hook's interrupt; skipped without ``strands``), each with one plain
tool (``read_file``) and one that needs approval (``run_command``).

The tests of one turn's fidelity, approval, cancel and errors share one process per adapter
(each in its own session); start-up, ``--unstable``, the model chooser and loading in a new
process have their own.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("agents")

from acp_agent.llm.fake_server import FakeModelServer
from tests.helpers.wire_client import ROOT, child_env

from .serving import (
    SLOW,
    Shared,
    answering,
    calls,
    new_session,
    one_test,
    served,
    statuses,
    text,
)

pytestmark = pytest.mark.anyio

AGENTS = {
    "langgraph": "tests.adapters.lg_agent:agent",
    "openai-agents": "tests.adapters.oa_agent:served",
    "strands": "tests.adapters.st_agent:served",
}


def installed(spec: str) -> str:
    """``spec``, skipping the test when its framework is not installed (Strands' is
    an extra of its own)."""
    if "st_agent" in spec:
        pytest.importorskip("strands")
    return spec


@pytest.fixture(params=sorted(AGENTS))
def spec(request: pytest.FixtureRequest) -> str:
    return installed(AGENTS[str(request.param)])


@pytest.fixture(scope="module", params=sorted(AGENTS))
async def shared_process(
    request: pytest.FixtureRequest, shared_fake: FakeModelServer
) -> AsyncIterator[Shared]:
    spec = installed(AGENTS[str(request.param)])
    async with served(spec, shared_fake) as client:
        yield Shared(spec, client, shared_fake)


@pytest.fixture
async def agent(shared_process: Shared) -> AsyncIterator[Shared]:
    """The adapter's process shared by this module's tests, for this test."""
    async with one_test(shared_process) as shared:
        yield shared


# ----------------------------------------------------------------------------- fidelity


async def test_text_streams_in_the_chunks_the_model_sent(agent: Shared, tmp_path: Path) -> None:
    client = agent.client
    sid = await new_session(client, tmp_path)
    turn = await client.prompt(sid, "fake:chunked", timeout=SLOW)
    assert turn.stop_reason == "end_turn"
    chunks = turn.texts()
    assert "".join(chunks) == "Streaming in many small pieces: naïve café ✓ done."
    assert len(chunks) > 5
    assert turn.kinds() == ["agent_message_chunk"] * len(chunks)  # nothing else said


async def test_a_plain_tool_goes_pending_running_completed_with_its_output(
    agent: Shared, tmp_path: Path
) -> None:
    client = agent.client
    sid = await new_session(client, tmp_path)
    turn = await client.prompt(sid, "fake:parallel", timeout=SLOW)
    assert turn.stop_reason == "end_turn"
    assert turn.requests == []
    by_call = calls(turn)
    assert len(by_call) == 2
    for updates, path in zip(by_call.values(), ["a.txt", "b.txt"], strict=True):
        first = updates[0]
        assert first["sessionUpdate"] == "tool_call"
        assert (first["name"], first["kind"], first["status"]) == ("read_file", "read", "pending")
        assert statuses(updates) == ["pending", "in_progress", "completed"]
        assert {"path": path} in [u.get("rawInput") for u in updates]
        assert [{"path": str(tmp_path / path)}] in [u.get("locations") for u in updates]
        assert text(updates) == f"contents of {path}"
    assert turn.texts()[-1] == "Both files read: contents of a.txt | contents of b.txt"


async def test_usage_is_on_the_result_with_unstable(
    spec: str, fake: FakeModelServer, tmp_path: Path
) -> None:
    async with served(spec, fake, "memory", "--unstable") as client:
        sid = await new_session(client, tmp_path)
        turn = await client.prompt(sid, "fake:parallel", timeout=SLOW)
    usage = turn.response["result"]["usage"]
    assert usage["inputTokens"] > 0 and usage["outputTokens"] == 14  # two requests, 7 each
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]


# ----------------------------------------------------------------------------- approval


@pytest.mark.parametrize("option", ["allow_once", "reject_once"])
async def test_approval_is_asked_on_the_streamed_call_before_it_runs(
    option: str, agent: Shared, tmp_path: Path
) -> None:
    client = agent.client
    client.on_request = answering(option)
    sid = await new_session(client, tmp_path)
    turn = await client.prompt(sid, "fake:run echo hi", timeout=SLOW)
    assert turn.stop_reason == "end_turn"
    [request] = turn.requests
    [(call_id, updates)] = calls(turn).items()
    assert request["params"]["toolCall"]["toolCallId"] == call_id
    assert (updates[0]["name"], updates[0]["kind"]) == ("run_command", "execute")
    said = turn.texts()[-1]
    if option == "allow_once":
        assert statuses(updates) == ["pending", "in_progress", "completed"]
        assert text(updates) == "ran echo hi"
        assert said == "The command said: ran echo hi"
    else:
        assert statuses(updates) == ["pending", "failed"]  # it never ran
        assert "ran echo hi" not in said


async def test_a_dismissed_approval_cancels_the_turn_and_keeps_history_valid(
    agent: Shared, tmp_path: Path
) -> None:
    client, fake = agent.client, agent.fake
    client.on_request = answering(None)
    sid = await new_session(client, tmp_path)
    turn = await client.prompt(sid, "fake:run echo hi", timeout=SLOW)
    assert turn.stop_reason == "cancelled"
    [(_, updates)] = calls(turn).items()
    assert statuses(updates) == ["pending", "failed"]
    assert "ran echo hi" not in str(turn.updates)
    after = await client.prompt(sid, "fake:echo", timeout=SLOW)
    assert after.stop_reason == "end_turn"
    assert fake.script.id_errors == []
    # the model's call got a result before the next user message: no dangling call
    roles = [m["role"] for m in fake.requests[-1]["messages"] if m["role"] != "system"]
    assert roles == ["user", "assistant", "tool", "user"]


# ----------------------------------------------------------------------------- cancel


async def test_cancel_ends_the_turn_cancelled_and_the_next_one_runs(
    agent: Shared, tmp_path: Path
) -> None:
    client = agent.client
    sid = await new_session(client, tmp_path)
    request_id = await client.start_prompt(sid, "fake:slow")
    await client.expect(
        lambda m: (
            m.get("method") == "session/update"
            and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        ),
        timeout=SLOW,
    )
    cancelled = await client.cancel(sid, request_id)
    assert cancelled.stop_reason == "cancelled"
    after = await client.prompt(sid, "fake:cold", timeout=SLOW)
    assert after.stop_reason == "end_turn"
    assert after.texts() == ["Hello from the fake model."]


# ----------------------------------------------------------------------------- memory


async def test_a_new_process_loads_the_session_and_the_model_remembers(
    spec: str, fake: FakeModelServer, tmp_path: Path
) -> None:
    store = str(tmp_path / "sessions.db")
    async with served(spec, fake, store) as client:
        client.on_request = answering("allow_always")
        sid = await new_session(client, tmp_path)
        first = await client.prompt(sid, "my word is zebra fake:cold", timeout=SLOW)
        assert first.stop_reason == "end_turn"
        ran = await client.prompt(sid, "fake:run echo one", timeout=SLOW)
        assert len(ran.requests) == 1
    async with served(spec, fake, store) as client:
        client.on_request = answering(None)  # asking again would dismiss: a failure
        _, replay = await client.call(
            "session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
        )
        assert any(u["params"]["update"].get("toolCallId") for u in replay)
        again = await client.prompt(sid, "fake:run echo two", timeout=SLOW)
        assert again.requests == []  # "always allow" was remembered with the session
        assert again.texts()[-1] == "The command said: ran echo two"
        echo = await client.prompt(sid, "fake:echo", timeout=SLOW)
    sent = fake.requests[-1]["messages"]
    users = [m["content"] for m in sent if m["role"] == "user"]
    said = ["my word is zebra fake:cold", "fake:run echo one", "fake:run echo two", "fake:echo"]
    assert [u if isinstance(u, str) else u[0]["text"] for u in users] == said  # (or parts)
    assert echo.texts()[-1].startswith("roles: ")
    assert fake.script.id_errors == []


# ----------------------------------------------------------------------------- cold start


def test_importing_the_adapters_imports_no_framework() -> None:
    code = (
        "import sys, acp_agent.adapters.langgraph, acp_agent.adapters.openai_agents;"
        "print(sorted({m.split('.')[0] for m in sys.modules}"
        " & {'langgraph', 'langchain', 'langchain_core', 'agents', 'openai'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


async def test_a_model_error_is_one_error_and_stays_out_of_the_history(
    agent: Shared, tmp_path: Path
) -> None:
    client, fake = agent.client, agent.fake
    sid = await new_session(client, tmp_path)
    failed = await client.prompt(sid, "fake:unauthorized", timeout=SLOW)
    assert failed.error is not None
    assert failed.error["code"] == -32603
    assert failed.error["data"]["status"] == 401
    assert "Incorrect API key provided" in failed.error["message"]
    after = await client.prompt(sid, "fake:echo", timeout=SLOW)
    assert after.stop_reason == "end_turn"
    sent = fake.requests[-1]["messages"]
    assert [m["role"] for m in sent if m["role"] != "system"][-1] == "user"
    assert not any(m["role"] in ("assistant", "tool") for m in sent)  # nothing of the failure


async def test_a_call_of_a_tool_the_agent_lacks(agent: Shared, tmp_path: Path) -> None:
    client = agent.client
    spec = agent.spec
    sid = await new_session(client, tmp_path)
    turn = await client.prompt(sid, "fake:call no_such_tool", timeout=SLOW)
    if "oa_agent" not in spec:  # LangGraph's tool node, Strands' executor: the call fails
        assert turn.stop_reason == "end_turn"
        [(_, updates)] = calls(turn).items()
        assert updates[0]["name"] == "no_such_tool" and statuses(updates)[-1] == "failed"
    else:  # the Agents SDK stops the run: the one model error
        assert turn.error is not None and turn.error["code"] == -32603
        assert "no_such_tool" in turn.error["data"]["reason"]


@pytest.mark.parametrize(
    "chooser",
    [
        "tests.adapters.lg_agent:chooser",
        "tests.adapters.oa_agent:chooser",
        "tests.adapters.st_agent:chooser",
    ],
)
async def test_the_chosen_model_runs_the_turn(
    chooser: str, fake: FakeModelServer, tmp_path: Path
) -> None:
    async with served(installed(chooser), fake) as client:
        result, _ = await client.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        [option] = result["configOptions"]
        assert (option["id"], option["currentValue"]) == ("model", "fake")
        assert [o["value"] for o in option["options"]] == ["fake", "fake-large"]
        sid = result["sessionId"]
        await client.prompt(sid, "fake:cold", timeout=SLOW)
        assert fake.requests[-1]["model"] == "fake"
        await client.call(
            "session/set_config_option",
            {"sessionId": sid, "configId": "model", "value": "fake-large"},
        )
        turn = await client.prompt(sid, "fake:cold", timeout=SLOW)
    assert turn.stop_reason == "end_turn"
    assert fake.requests[-1]["model"] == "fake-large"
