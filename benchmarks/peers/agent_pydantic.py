"""The benchmark's pydantic-ai agent, served by ``acp-agent-kit --agent
benchmarks.peers.agent_pydantic:agent``, on the fake endpoint in ``ACP_FAKE_BASE_URL``."""

from __future__ import annotations

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from benchmarks.peers import bench_tools

model = OpenAIChatModel(
    "fake", provider=OpenAIProvider(base_url=bench_tools.BASE_URL, api_key="sk-test")
)
agent = Agent(model, instructions=bench_tools.INSTRUCTIONS)
agent.tool_plain(metadata={"acp_kind": "read", "acp_path": "path"})(bench_tools.read_file)
agent.tool_plain(requires_approval=True, metadata={"acp_kind": "execute"})(bench_tools.run_command)
