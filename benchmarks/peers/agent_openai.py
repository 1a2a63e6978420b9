"""The benchmark's OpenAI Agents SDK agent, for ``acp-agent-kit --agent
benchmarks.peers.agent_openai:agent``, on the fake endpoint in ``ACP_FAKE_BASE_URL``
(Chat Completions: the fake endpoint has no Responses API)."""

from __future__ import annotations

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from acp_agent.adapters.openai_agents import OpenAIAgentsAgent
from benchmarks.peers import bench_tools

set_tracing_disabled(True)
client = AsyncOpenAI(base_url=bench_tools.BASE_URL, api_key="sk-test", max_retries=0)
sdk_agent = Agent(
    name="bench",
    instructions=bench_tools.INSTRUCTIONS,
    model=OpenAIChatCompletionsModel(model="fake", openai_client=client),
    model_settings=ModelSettings(include_usage=True),
    tools=[
        function_tool(bench_tools.read_file),
        function_tool(bench_tools.run_command, needs_approval=True),
    ],
)
agent = OpenAIAgentsAgent(
    sdk_agent,
    tool_metadata={
        "read_file": {"acp_kind": "read", "acp_path": "path"},
        "run_command": {"acp_kind": "execute"},
    },
)
