"""An OpenAI Agents SDK agent for its adapter's tests: one plain tool, one that needs
approval, on the fake endpoint named by ``ACP_TEST_BASE_URL`` through Chat Completions
(the fake endpoint has no Responses API)."""

from __future__ import annotations

import os

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from acp_agent.adapters.openai_agents import OpenAIAgentsAgent

set_tracing_disabled(True)


@function_tool
def read_file(path: str) -> str:
    """Read a file of the project."""
    return f"contents of {path}"


@function_tool(needs_approval=True)
def run_command(command: str) -> str:
    """Run a shell command."""
    return f"ran {command}"


client = AsyncOpenAI(
    base_url=os.environ.get("ACP_TEST_BASE_URL", "http://127.0.0.1:9/v1"),
    api_key="sk-test",
    max_retries=0,
)
agent = Agent(
    name="helper",
    instructions="Be brief.",
    model=OpenAIChatCompletionsModel(model="fake", openai_client=client),
    model_settings=ModelSettings(include_usage=True),
    tools=[read_file, run_command],
)
#: the same agent with its tools' kinds declared
served = OpenAIAgentsAgent(
    agent, kinds={"read_file": "read", "run_command": "execute"}, paths={"read_file": "path"}
)
