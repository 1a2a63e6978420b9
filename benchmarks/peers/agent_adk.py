"""The benchmark's Google ADK agent, for ``acp-agent-kit --agent
benchmarks.peers.agent_adk:agent``, on the fake endpoint in ``ACP_FAKE_BASE_URL`` through
ADK's LiteLLM model (Chat Completions): ``run_command`` asks through ADK's tool
confirmation (``require_confirmation=True``)."""

from __future__ import annotations

from google.adk.agents import LlmAgent
from google.adk.models.lite_llm import LiteLlm
from google.adk.tools import FunctionTool

from acp_agent.adapters.google_adk import GoogleAdkAgent
from benchmarks.peers import bench_tools

model = LiteLlm(
    model="openai/fake", api_base=bench_tools.BASE_URL, api_key="sk-test", num_retries=0
)
adk_agent = LlmAgent(
    name="bench",
    instruction=bench_tools.INSTRUCTIONS,
    model=model,
    tools=[bench_tools.read_file, FunctionTool(bench_tools.run_command, require_confirmation=True)],
)
agent = GoogleAdkAgent(
    adk_agent,
    tool_metadata={
        "read_file": {"acp_kind": "read", "acp_path": "path"},
        "run_command": {"acp_kind": "execute"},
    },
)
