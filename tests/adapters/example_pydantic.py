"""A small pydantic-ai agent for the adapter tests and conformance, on the fake endpoint
whose URL is in ACP_FAKE_BASE_URL: a plain tool (``add``), one that needs approval
(``delete_file``), a plan tool, the client's editor as tools, and two tools that reach the
ACP client directly (a notice, a context compaction) through ``current_turn()``.

It advertises the reference agent's commands; their text goes to the model as typed, and
the fake endpoint answers them with calls of these tools (acp_agent.llm.fake_commands).
"""

from __future__ import annotations

import os

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from acp_agent.adapters.pydantic_ai import PydanticAIAgent, editor_toolset
from acp_agent.adapters.turns import current_turn
from acp_agent.errors import CapabilityError

BASE_URL = os.environ.get("ACP_FAKE_BASE_URL", "http://127.0.0.1:9/v1")
model = OpenAIChatModel("fake", provider=OpenAIProvider(base_url=BASE_URL, api_key="test-key"))
agent = Agent(model, instructions="You are a careful assistant.", toolsets=[editor_toolset()])


@agent.tool_plain(metadata={"acp_kind": "think"})
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@agent.tool_plain(requires_approval=True, metadata={"acp_kind": "delete", "acp_path": "path"})
def delete_file(path: str) -> str:
    """Delete a file (pretends to)."""
    return f"deleted {path}"


@agent.tool_plain(metadata={"acp_kind": "think", "acp_plan": True})
def update_plan(entries: list[dict[str, str]]) -> str:
    """Replace the plan: each entry has content and status (pending, in_progress, completed)."""
    return f"the plan has {len(entries)} entries"


@agent.tool_plain
async def notify(severity: str, title: str) -> str:
    """Show a notice to the person (info, warning or error)."""
    try:
        await current_turn().client.notice(severity, title)
    except CapabilityError:
        return "the editor does not show notices"
    return "shown"


@agent.tool_plain
async def compact_context(parts: int) -> str:
    """Summarise the conversation so far in a number of parts."""
    client = current_turn().client
    if not client.capabilities.compaction:
        return "the editor does not take compactions"
    compaction = await client.compaction()
    for i in range(parts):
        await compaction.chunk(f"summary {i}")
    await compaction.complete()
    return f"compacted in {parts} parts"


COMMANDS = ("tools", "write", "read", "run", "plan", "notice", "compact", "echo", "stream")
served = PydanticAIAgent(
    agent, commands=[{"name": n, "description": f"/{n}, answered by the model"} for n in COMMANDS]
)
