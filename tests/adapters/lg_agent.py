"""LangChain ``create_agent`` agents for the LangGraph adapter's tests, on the fake endpoint
named by ``ACP_FAKE_BASE_URL``, compiled without a checkpointer.

``agent`` has one plain tool and one that needs approval; ``ACP_TEST_APPROVAL`` says how it
asks: the human-in-the-loop middleware ``batched`` (the default) or ``per_call``, or
``interrupt``: the tool calls LangGraph's ``interrupt()`` itself; ``ACP_TEST_ALLOWED`` lists
the middleware's ``allowed_decisions`` (default ``approve,reject``). ``chooser`` offers two
models (its model follows ``configurable["model"]``); ``terminals`` runs commands in the
client's terminal without asking; ``reasoner`` and ``plain_reasoner`` answer the fake
endpoint's reasoning scenario with a model that keeps ``reasoning_content`` (as provider
packages such as langchain-deepseek do) and with ``ChatOpenAI``, which drops it.
``mcp_user`` takes the session's MCP servers' tools (``session_mcp``). ``planner`` keeps a
todo list (langchain's ``write_todos``); ``thinker`` answers with a
reasoning block; ``served`` is the agent conformance runs (the reference agent's commands,
the editor's tools).
"""

from __future__ import annotations

import os
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware, TodoListMiddleware
from langchain.chat_models import init_chat_model
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.types import interrupt

from acp_agent.adapters.langgraph import LangGraphAgent, editor_tools, session_mcp
from acp_agent.adapters.turns import current_turn
from acp_agent.errors import CapabilityError

APPROVAL = os.environ.get("ACP_TEST_APPROVAL", "batched")
ALLOWED = os.environ.get("ACP_TEST_ALLOWED", "approve,reject").split(",")


@tool
def read_file(path: str) -> str:
    """Read a file of the project."""
    return f"contents of {path}"


@tool
def run_command(command: str) -> str:
    """Run a shell command."""
    if APPROVAL == "interrupt":
        answer: Any = interrupt({"description": f"Run {command}?"})
        if answer.get("type") != "approve":
            return "The user rejected running it."
    return f"ran {command}"


read_file.metadata = {"acp_kind": "read", "acp_path": "path"}
run_command.metadata = {"acp_kind": "execute"}

model = ChatOpenAI(
    model="fake",
    base_url=os.environ.get("ACP_FAKE_BASE_URL", "http://127.0.0.1:9/v1"),
    api_key="sk-test",  # type: ignore[arg-type]
    stream_usage=True,
    max_retries=0,
)
middleware = (
    []
    if APPROVAL == "interrupt"
    else [
        HumanInTheLoopMiddleware(
            interrupt_on={"run_command": {"allowed_decisions": ALLOWED}},  # type: ignore[dict-item]
            interrupt_mode=APPROVAL,  # type: ignore[arg-type]
        )
    ]
)
agent = create_agent(model, [read_file, run_command], middleware=middleware)

mcp_user = create_agent(model, [read_file], middleware=[session_mcp()])

planner = create_agent(model, [read_file], middleware=[TodoListMiddleware()])

chooser = LangGraphAgent(
    create_agent(
        init_chat_model(
            "fake",
            model_provider="openai",
            configurable_fields=("model",),
            base_url=os.environ.get("ACP_FAKE_BASE_URL", "http://127.0.0.1:9/v1"),
            api_key="sk-test",
            max_retries=0,
        ),
        [read_file],
    ),
    models=["fake", "fake-large"],
)

terminals = create_agent(model, editor_tools(approve_commands=False))


class KeepsReasoning(ChatOpenAI):
    """``ChatOpenAI`` keeping a Chat Completions delta's ``reasoning_content`` in the chunk's
    ``additional_kwargs``, where langchain-core reads reasoning from for a provider other
    than ``openai`` (whose translator ignores it): what langchain-deepseek's ``ChatDeepSeek``
    does."""

    def _convert_chunk_to_generation_chunk(
        self, chunk: dict[str, Any], default_chunk_class: type, base_generation_info: Any
    ) -> ChatGenerationChunk | None:
        made = super()._convert_chunk_to_generation_chunk(
            chunk, default_chunk_class, base_generation_info
        )
        choices = chunk.get("choices") or [{}]
        reasoning = (choices[0].get("delta") or {}).get("reasoning_content")
        if made is not None:
            metadata = made.message.response_metadata
            made.message.response_metadata = {**metadata, "model_provider": "compatible"}
            if isinstance(reasoning, str):
                made.message.additional_kwargs["reasoning_content"] = reasoning
        return made


reasoner = create_agent(
    KeepsReasoning(
        model="fake",
        base_url=os.environ.get("ACP_FAKE_BASE_URL", "http://127.0.0.1:9/v1"),
        api_key="sk-test",  # type: ignore[arg-type]
        max_retries=0,
    ),
    [],
)
plain_reasoner = create_agent(model, [])

thought = AIMessage(
    content=[
        {"type": "reasoning", "reasoning": "The user greets me."},
        {"type": "text", "text": "Hello!"},
    ]
)
thinker = create_agent(FakeMessagesListChatModel(responses=[thought]), [])


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
    client = current_turn().client
    if not client.capabilities.compaction:
        return "the editor does not take compactions"
    compaction = await client.compaction()
    for i in range(parts):
        await compaction.chunk(f"summary {i}")
    await compaction.complete()
    return f"compacted in {parts} parts"


add.metadata = {"acp_kind": "think"}
update_plan.metadata = {"acp_kind": "think", "acp_plan": True}
COMMANDS = ("tools", "write", "read", "run", "plan", "notice", "compact", "echo", "stream")
served = LangGraphAgent(
    create_agent(model, [add, update_plan, notify, compact_context, *editor_tools()]),
    commands=[{"name": n, "description": f"/{n}, answered by the model"} for n in COMMANDS],
)
