"""A person stops a turn and sends the next message at once, on real agent processes.

``session/cancel`` and the next ``session/prompt`` come in one write while the first turn
is answered and its last write not yet saved: that write is held open by the test
(``held_write.py``), so the window is hit every time. The cancel answers the first turn
``cancelled``; the next prompt waits for the write, then runs. Run for the built-in agent
and each adapter (pydantic-ai, LangGraph, OpenAI Agents SDK) on the fake endpoint.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import anyio
import anyio.to_thread
import orjson
import pytest

from acp_agent.llm.fake_server import FakeModelServer
from tests.helpers.wire_client import FULL_CAPS, is_response, spawn

from .serving import SLOW, loaded, new_session

pytestmark = pytest.mark.anyio

#: agent -> (spec, the package it needs, the first prompt)
AGENTS = {
    "reference": ("reference", None, "/echo first"),
    "pydantic-ai": ("tests.adapters.example_pydantic:agent", "pydantic_ai", "fake:chunked"),
    "langgraph": ("tests.adapters.lg_agent:agent", "langgraph", "fake:chunked"),
    "openai-agents": ("tests.adapters.oa_agent:served", "agents", "fake:chunked"),
}
NEXT = "next-prompt"  # the id of the prompt sent with the cancel


def frame(message: dict[str, object]) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", **message}) + b"\n"


@pytest.mark.parametrize("name", sorted(AGENTS))
async def test_a_prompt_right_after_a_cancel_waits_for_the_last_write_then_runs(
    name: str, fake: FakeModelServer, tmp_path: Path
) -> None:
    spec, package, first = AGENTS[name]
    if package is not None and importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed")
    held, go = tmp_path / "held", tmp_path / "go"
    os.mkfifo(held)
    os.mkfifo(go)
    command = [sys.executable, "-m", "tests.adapters.held_write", spec]
    command += [str(tmp_path / "s.db"), str(held), str(go)]
    async with spawn(command, env={"ACP_FAKE_BASE_URL": fake.base_url}) as client:
        await client.call("initialize", {"protocolVersion": 1, "clientCapabilities": FULL_CAPS})
        await loaded(client)
        sid = await new_session(client, tmp_path)
        request = await client.start_prompt(sid, first)
        with anyio.fail_after(SLOW):  # the turn ran; its last write is in the store, held
            assert await anyio.to_thread.run_sync(held.read_text, abandon_on_cancel=True)
        assert client.process.stdin is not None
        await client.process.stdin.send(
            frame({"method": "session/cancel", "params": {"sessionId": sid}})
            + frame(
                {
                    "id": NEXT,
                    "method": "session/prompt",
                    "params": {"sessionId": sid, "prompt": [{"type": "text", "text": first}]},
                }
            )
        )
        turn = await client.finish_prompt(request)
        assert turn.response.get("result") == {"stopReason": "cancelled"}, turn.response
        # A request answered meanwhile: the next prompt is not answered while the write
        # is held (it used to be refused, "the last turn ... is still being written").
        _, before = await client.call("session/list", {})
        answered = [m for m in before if is_response(m, NEXT)]  # type: ignore[arg-type]
        assert answered == [], answered
        with anyio.fail_after(SLOW):
            await anyio.to_thread.run_sync(go.write_text, "go\n", abandon_on_cancel=True)
        after = await client.finish_prompt(NEXT, timeout=SLOW)  # type: ignore[arg-type]
        assert after.response.get("result") == {"stopReason": "end_turn"}, after.response
        assert after.texts(), after.updates  # the agent ran it
        _, replay = await client.call(
            "session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
        )
    prompts = [m for m in replay if m["params"]["update"]["sessionUpdate"] == "user_message_chunk"]
    assert len(prompts) == 2, replay  # both turns were saved, in order
