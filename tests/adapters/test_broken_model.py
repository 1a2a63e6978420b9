"""A model that fails is a turn that fails, under every adapter: a stream cut mid-body or
ending with no ``finish_reason`` and no ``[DONE]``, an empty response, a body that is not
JSON and an HTTP error with an HTML page end the turn with a ``-32603`` error naming the
reason, and what streamed of the failed answer is not in the next request to the model.

One ``acp-agent-kit --agent`` process per adapter serves every case (each in its own
session), on the fake endpoint.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("langgraph")
pytest.importorskip("agents")

from acp_agent.llm.fake_server import FakeModelServer

from .serving import SLOW, Shared, new_session, one_test, served

pytestmark = pytest.mark.anyio

AGENTS = {
    "pydantic-ai": "tests.adapters.example_pydantic:agent",
    "langgraph": "tests.adapters.lg_agent:agent",
    "openai-agents": "tests.adapters.oa_agent:served",
}

#: scenario -> what the error's message names (one of), and text the turn streamed first
CASES = {
    "truncated": (("stream ended before it finished",), "This answer"),
    "no-finish": (("stream ended before it finished",), "No finish"),
    "empty": (("empty response",), None),
    "no-choices": (("empty response", "stream ended before it finished"), None),
    "not-json": (("empty response", "without content", "no readable chunk"), None),
    "html-error": (("502",), None),
}


@pytest.fixture(scope="module")
async def shared_fake() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer.running() as server:
        yield server


@pytest.fixture(scope="module", params=sorted(AGENTS))
async def shared_process(
    request: pytest.FixtureRequest, shared_fake: FakeModelServer
) -> AsyncIterator[Shared]:
    spec = AGENTS[str(request.param)]
    async with served(spec, shared_fake) as client:
        yield Shared(spec, client, shared_fake)


@pytest.fixture
async def agent(shared_process: Shared) -> AsyncIterator[Shared]:
    async with one_test(shared_process) as shared:
        yield shared


@pytest.mark.parametrize("scenario", sorted(CASES))
async def test_a_broken_answer_fails_the_turn_and_is_not_remembered(
    agent: Shared, scenario: str, tmp_path: Path
) -> None:
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
