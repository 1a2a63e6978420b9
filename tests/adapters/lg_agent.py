"""LangChain ``create_agent`` agents for the LangGraph adapter's tests, on the fake endpoint
named by ``ACP_TEST_BASE_URL``, compiled without a checkpointer.

``agent`` has one plain tool and one that needs approval; ``ACP_TEST_APPROVAL`` says how it
asks: the human-in-the-loop middleware ``batched`` (the default) or ``per_call``, or
``interrupt``: the tool calls LangGraph's ``interrupt()`` itself. ``planner`` keeps a todo
list (langchain's ``write_todos``); ``thinker`` answers with a reasoning block.
"""

from __future__ import annotations

import os
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware, TodoListMiddleware
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.types import interrupt

APPROVAL = os.environ.get("ACP_TEST_APPROVAL", "batched")


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
    base_url=os.environ.get("ACP_TEST_BASE_URL", "http://127.0.0.1:9/v1"),
    api_key="sk-test",  # type: ignore[arg-type]
    stream_usage=True,
    max_retries=0,
)
middleware = (
    []
    if APPROVAL == "interrupt"
    else [
        HumanInTheLoopMiddleware(
            interrupt_on={"run_command": {"allowed_decisions": ["approve", "reject"]}},
            interrupt_mode=APPROVAL,  # type: ignore[arg-type]
        )
    ]
)
agent = create_agent(model, [read_file, run_command], middleware=middleware)

planner = create_agent(model, [read_file], middleware=[TodoListMiddleware()])

thought = AIMessage(
    content=[
        {"type": "reasoning", "reasoning": "The user greets me."},
        {"type": "text", "text": "Hello!"},
    ]
)
thinker = create_agent(FakeMessagesListChatModel(responses=[thought]), [])
