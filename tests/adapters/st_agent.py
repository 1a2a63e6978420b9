"""Strands agents for its adapter's tests, on the fake endpoint named by
``ACP_FAKE_BASE_URL`` through Strands' OpenAI model (Chat Completions).

``served`` has one plain tool (``read_file``) and one that needs approval
(``run_command``: a ``BeforeToolCallEvent`` hook raising an interrupt, Strands' own way);
``chooser`` offers two models; ``conformance`` is the agent conformance runs (the
reference agent's commands, the editor's tools).
"""

from __future__ import annotations

import os
from typing import Any

from strands import Agent, tool
from strands.hooks import BeforeToolCallEvent, HookProvider, HookRegistry
from strands.models.openai import OpenAIModel

from acp_agent.adapters.strands import StrandsAgent, editor_tools
from acp_agent.adapters.turns import current_turn
from acp_agent.errors import CapabilityError


def model(name: str) -> OpenAIModel:
    return OpenAIModel(
        client_args={
            "base_url": os.environ.get("ACP_FAKE_BASE_URL", "http://127.0.0.1:9/v1"),
            "api_key": "sk-test",
            "max_retries": 0,
        },
        model_id=name,
        params={"stream_options": {"include_usage": True}},
    )


@tool
def read_file(path: str) -> str:
    """Read a file of the project."""
    return f"contents of {path}"


@tool
def run_command(command: str) -> str:
    """Run a shell command."""
    return f"ran {command}"


class AskBeforeCommands(HookProvider):
    """The person approves each command first: an interrupt, answered True or False."""

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(BeforeToolCallEvent, self.approve)

    def approve(self, event: BeforeToolCallEvent) -> None:
        if event.tool_use["name"] != "run_command":
            return
        if event.interrupt("approve_command", reason="run a command") is not True:
            event.cancel_tool = "The person did not allow the command."


def helper(name: str = "fake") -> Agent:
    return Agent(
        model=model(name),
        system_prompt="Be brief.",
        tools=[read_file, run_command],
        hooks=[AskBeforeCommands()],
        retry_strategy=None,
    )


served = StrandsAgent(
    helper(),
    tool_metadata={
        "read_file": {"acp_kind": "read", "acp_path": "path"},
        "run_command": {"acp_kind": "execute"},
    },
)
chooser = StrandsAgent(helper(), models=[model("fake"), model("fake-large")])


# -- for conformance: the reference agent's commands, answered by the fake endpoint's model
# (acp_agent.llm.fake_commands) with calls of these tools and the editor's


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def update_plan(entries: list[dict[str, str]]) -> str:
    """Replace the plan: each entry has content and status."""
    return f"the plan has {len(entries)} entries"


@tool
async def notify(severity: str, title: str) -> str:
    """Show a notice to the person (info, warning or error)."""
    try:
        await current_turn().client.notice(severity, title)
    except CapabilityError:
        return "the editor does not show notices"
    return "shown"


@tool
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
conformance = StrandsAgent(
    Agent(
        model=model("fake"),
        tools=[add, update_plan, notify, compact_context, *editor_tools()],
        retry_strategy=None,
    ),
    tool_metadata={"add": {"acp_kind": "think"}, "update_plan": {"acp_plan": True}},
    commands=[{"name": n, "description": f"/{n}, answered by the model"} for n in COMMANDS],
)
