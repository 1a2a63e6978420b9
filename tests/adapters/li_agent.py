"""LlamaIndex agents for its adapter's tests, on the fake endpoint named by
``ACP_FAKE_BASE_URL`` through LlamaIndex's LiteLLM LLM (Chat Completions).

``served`` has one plain tool (``read_file``) and one that needs approval
(``run_command``); ``chooser`` offers two models; ``conformance`` is the agent conformance
runs (the reference agent's commands, the editor's tools).
"""

from __future__ import annotations

import os

import litellm
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.llms.litellm import LiteLLM

from acp_agent.adapters.llama_index import LlamaIndexAgent, editor_tools, needs_approval
from acp_agent.adapters.turns import current_turn
from acp_agent.errors import CapabilityError

# the fake endpoint's models, as LiteLLM would know a hosted one: tools, a large window
for _name in ("fake", "fake-large"):
    litellm.register_model(
        {
            f"openai/{_name}": {
                "litellm_provider": "openai",
                "mode": "chat",
                "max_input_tokens": 128_000,
                "max_output_tokens": 4_096,
                "supports_function_calling": True,
            }
        }
    )


def model(name: str) -> LiteLLM:
    return LiteLLM(
        model=f"openai/{name}",
        api_base=os.environ.get("ACP_FAKE_BASE_URL", "http://127.0.0.1:9/v1"),
        api_key="sk-test",
        max_retries=0,
    )


def read_file(path: str) -> str:
    """Read a file of the project."""
    return f"contents of {path}"


def run_command(command: str) -> str:
    """Run a shell command."""
    return f"ran {command}"


agent = FunctionAgent(
    name="helper",
    system_prompt="Be brief.",
    llm=model("fake"),
    tools=[read_file, needs_approval(run_command)],
)
served = LlamaIndexAgent(
    agent,
    tool_metadata={
        "read_file": {"acp_kind": "read", "acp_path": "path"},
        "run_command": {"acp_kind": "execute"},
    },
)
chooser = LlamaIndexAgent(agent, models=[model("fake"), model("fake-large")])


# -- for conformance: the reference agent's commands, answered by the fake endpoint's model
# (acp_agent.llm.fake_commands) with calls of these tools and the editor's


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def update_plan(entries: list[dict[str, str]]) -> str:
    """Replace the plan: each entry has content and status."""
    return f"the plan has {len(entries)} entries"


async def notify(severity: str, title: str) -> str:
    """Show a notice to the person (info, warning or error)."""
    try:
        await current_turn().client.notice(severity, title)
    except CapabilityError:
        return "the editor does not show notices"
    return "shown"


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
conformance = LlamaIndexAgent(
    FunctionAgent(
        name="conformance",
        llm=model("fake"),
        tools=[add, update_plan, notify, compact_context, *editor_tools()],
    ),
    tool_metadata={"add": {"acp_kind": "think"}, "update_plan": {"acp_plan": True}},
    commands=[{"name": n, "description": f"/{n}, answered by the model"} for n in COMMANDS],
)
