"""A model that fails is a turn that fails, under every adapter: a stream cut mid-body or
ending with no ``finish_reason`` and no ``[DONE]``, an empty response, a body that is not
JSON and an HTTP error with an HTML page end the turn with a ``-32603`` error naming the
reason, and what streamed of the failed answer is not in the next request to the model.

The built-in LLM agent (``acp-agent-kit --model``) is held to the same. One process per
agent serves every case (each in its own session), on the fake endpoint.

Known gap: the OpenAI Agents SDK turns a Chat Completions stream with no finish reason into
a complete response (it checks for one only on api.openai.com), and its events do not say
which it was, so its cut-stream cases are not run.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("langgraph")
pytest.importorskip("agents")
pytest.importorskip("llama_index.core")

from acp_agent.llm.fake_server import FakeModelServer
from tests.helpers.wire_client import spawn

from .serving import SLOW, Shared, new_session, one_test, served

pytestmark = pytest.mark.anyio

BUILTIN = "the built-in LLM agent"
AGENTS = {
    "pydantic-ai": "tests.adapters.example_pydantic:agent",
    "langgraph": "tests.adapters.lg_agent:agent",
    "openai-agents": "tests.adapters.oa_agent:served",
    "llama-index": "tests.adapters.li_agent:served",
    "strands": "tests.adapters.st_agent:served",
    "builtin": BUILTIN,
}
#: the cases an agent is not held to (see the module's docstring)
GAPS = {"openai-agents": {"truncated", "no-finish"}}

#: scenario -> what the error's message names (one of), and text the turn streamed first
CASES = {
    "truncated": (("stream ended before it finished", "before it was complete"), "This answer"),
    "no-finish": (("stream ended before it finished", "before it was complete"), "No finish"),
    "empty": (("empty response",), None),
    "no-choices": (("empty response", "stream ended before it finished"), None),
    "not-json": (
        ("empty response", "without content", "no readable chunk", "not a chat completion"),
        None,
    ),
    "html-error": (("502",), None),
}


@pytest.fixture(scope="module", params=sorted(AGENTS))
async def shared_process(
    request: pytest.FixtureRequest, shared_fake: FakeModelServer
) -> AsyncIterator[Shared]:
    spec = AGENTS[str(request.param)]
    if "st_agent" in spec:
        pytest.importorskip("strands")  # an extra of its own
    if spec == BUILTIN:
        command = [sys.executable, "-m", "acp_agent", "--store", "memory"]
        command += ["--model", "fake", "--base-url", shared_fake.base_url]
        async with spawn(command) as client:
            await client.initialize()
            yield Shared(spec, client, shared_fake)
        return
    async with served(spec, shared_fake) as client:
        yield Shared(spec, client, shared_fake)


@pytest.mark.parametrize("scenario", sorted(CASES))
async def test_a_broken_answer_fails_the_turn_and_is_not_remembered(
    shared_process: Shared, scenario: str, tmp_path: Path
) -> None:
    async with one_test(shared_process) as agent:
        await _case(agent, scenario, tmp_path)


async def _case(agent: Shared, scenario: str, tmp_path: Path) -> None:
    if scenario in GAPS.get(next(k for k, v in AGENTS.items() if v == agent.spec), ()):
        pytest.skip("a known gap of the framework (see the module's docstring)")
    client, fake = agent.client, agent.fake
    sid = await new_session(client, tmp_path)
    turn = await client.prompt(sid, f"fake:{scenario} please", timeout=SLOW)
    expected, streamed = CASES[scenario]
    error = turn.response.get("error")
    assert error is not None, turn.response
    assert error["code"] == -32603
    assert any(words in error["message"] for words in expected), error
    if streamed is not None:
        assert streamed in "".join(turn.texts())
    before = len(fake.requests)
    after = await client.prompt(sid, "fake:echo", timeout=SLOW)
    assert after.stop_reason == "end_turn"
    sent = fake.requests[before]["messages"]
    said = [m for m in sent if m["role"] == "assistant"]
    assert said == [], sent
    # the person's prompt is remembered, as the replay shows it
    users = [str(m["content"]) for m in sent if m["role"] == "user"]
    assert any(f"fake:{scenario} please" in u for u in users), sent
