"""What an adapted agent saves with each turn does not grow with the session: twenty
two-tool turns of one session (the fake endpoint's ``fake:parallel``) each save about as
many bytes as the second did, for every adapter. Measured as the JSON the turn gave
``PromptTurn.save_state``; in process, on an in-memory store."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from acp_agent.agent import Agent, PromptTurn
from acp_agent.llm.fake_server import FakeModelServer
from acp_agent.testing import connect

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

TURNS = 20
#: how much a later turn may save beyond the second (ids and token counts vary in length)
SLACK = 64


def langgraph(base_url: str, http: httpx.AsyncClient) -> Agent:
    pytest.importorskip("langgraph")
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    from acp_agent.adapters.langgraph import LangGraphAgent

    @tool
    def read_file(path: str) -> str:
        """Read a file of the project."""
        return f"contents of {path}"

    model = ChatOpenAI(
        model="fake",
        base_url=base_url,
        api_key="sk-test",  # type: ignore[arg-type]
        max_retries=0,
        http_async_client=http,
    )
    return LangGraphAgent(create_agent(model, [read_file]))


def openai_agents(base_url: str, http: httpx.AsyncClient) -> Agent:
    pytest.importorskip("agents")
    from agents import Agent as SdkAgent
    from agents import OpenAIChatCompletionsModel, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    from acp_agent.adapters.openai_agents import OpenAIAgentsAgent

    set_tracing_disabled(True)

    @function_tool
    def read_file(path: str) -> str:
        """Read a file of the project."""
        return f"contents of {path}"

    client = AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0, http_client=http)
    model = OpenAIChatCompletionsModel(model="fake", openai_client=client)
    return OpenAIAgentsAgent(SdkAgent(name="helper", model=model, tools=[read_file]))


def pydantic_ai(base_url: str, http: httpx.AsyncClient) -> Agent:
    pytest.importorskip("pydantic_ai")
    from openai import AsyncOpenAI
    from pydantic_ai import Agent as PaiAgent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from acp_agent.adapters.pydantic_ai import PydanticAIAgent

    client = AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0, http_client=http)
    provider = OpenAIProvider(openai_client=client)
    model = OpenAIChatModel("fake", provider=provider)
    agent = PaiAgent(model)

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file of the project."""
        return f"contents of {path}"

    return PydanticAIAgent(agent)


@pytest.mark.parametrize("make", [langgraph, openai_agents, pydantic_ai])
async def test_each_turn_saves_the_same_bytes_however_long_the_session(
    make: Any, fake: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes: list[int] = []
    save_state = PromptTurn.save_state

    def measured(turn: PromptTurn, state: Any) -> None:
        sizes.append(len(orjson.dumps(state)))
        save_state(turn, state)

    monkeypatch.setattr(PromptTurn, "save_state", measured)
    async with httpx.AsyncClient() as http, connect(make(fake.base_url, http)) as client:
        session = await client.new_session()
        for _ in range(TURNS):
            turn = await session.prompt("fake:parallel")
            assert turn.stop_reason == "end_turn"
            assert turn.text.endswith("contents of a.txt | contents of b.txt")
    assert len(sizes) == TURNS
    assert max(sizes[1:]) - sizes[1] <= SLACK, sizes
