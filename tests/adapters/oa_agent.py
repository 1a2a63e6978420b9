"""OpenAI Agents SDK agents for its adapter's tests, on the fake endpoint named by
``ACP_FAKE_BASE_URL`` through Chat Completions (the fake endpoint has no Responses API).

``served`` has one plain tool and one that needs approval; ``chooser`` offers two models;
``conformance`` is the agent conformance runs (the reference agent's commands, the editor's
tools).
"""

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
from pydantic import BaseModel

from acp_agent.adapters.openai_agents import OpenAIAgentsAgent, editor_tools
from acp_agent.adapters.turns import current_turn
from acp_agent.errors import CapabilityError

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
    base_url=os.environ.get("ACP_FAKE_BASE_URL", "http://127.0.0.1:9/v1"),
    api_key="sk-test",
    max_retries=0,
)
model = OpenAIChatCompletionsModel(model="fake", openai_client=client)
agent = Agent(
    name="helper",
    instructions="Be brief.",
    model=model,
    model_settings=ModelSettings(include_usage=True),
    tools=[read_file, run_command],
)
chooser = OpenAIAgentsAgent(
    agent, models=[model, OpenAIChatCompletionsModel(model="fake-large", openai_client=client)]
)
served = OpenAIAgentsAgent(
    agent,
    tool_metadata={
        "read_file": {"acp_kind": "read", "acp_path": "path"},
        "run_command": {"acp_kind": "execute"},
    },
)


# -- for conformance: the reference agent's commands, answered by the fake endpoint's model
# (acp_agent.llm.fake_commands) with calls of these tools and the editor's


@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


class PlanEntry(BaseModel):
    content: str
    status: str


@function_tool
def update_plan(entries: list[PlanEntry]) -> str:
    """Replace the plan: each entry has content and status."""
    return f"the plan has {len(entries)} entries"


@function_tool
async def notify(severity: str, title: str) -> str:
    """Show a notice to the person (info, warning or error)."""
    try:
        await current_turn().client.notice(severity, title)
    except CapabilityError:
        return "the editor does not show notices"
    return "shown"


@function_tool
async def compact_context(parts: int) -> str:
    """Summarise the conversation so far in a number of parts."""
    turn_client = current_turn().client
    if not turn_client.capabilities.compaction:
        return "the editor does not take compactions"
    compaction = await turn_client.compaction()
    for i in range(parts):
        await compaction.chunk(f"summary {i}")
    await compaction.complete()
    return f"compacted in {parts} parts"


COMMANDS = ("tools", "write", "read", "run", "plan", "notice", "compact", "echo", "stream")
conformance = OpenAIAgentsAgent(
    Agent(
        name="conformance",
        model=model,
        model_settings=ModelSettings(include_usage=True),
        tools=[add, update_plan, notify, compact_context, *editor_tools()],
    ),
    tool_metadata={"add": {"acp_kind": "think"}, "update_plan": {"acp_plan": True}},
    commands=[{"name": n, "description": f"/{n}, answered by the model"} for n in COMMANDS],
)
