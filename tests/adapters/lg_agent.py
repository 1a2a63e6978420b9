"""A LangChain ``create_agent`` agent for the LangGraph adapter's tests: one plain tool, one
that needs approval (the human-in-the-loop middleware), no checkpointer, on the fake
endpoint named by ``ACP_TEST_BASE_URL``."""

from __future__ import annotations

import os

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI


@tool
def read_file(path: str) -> str:
    """Read a file of the project."""
    return f"contents of {path}"


@tool
def run_command(command: str) -> str:
    """Run a shell command."""
    return f"ran {command}"


read_file.metadata = {"acp_kind": "read"}
run_command.metadata = {"acp_kind": "execute"}

model = ChatOpenAI(
    model="fake",
    base_url=os.environ.get("ACP_TEST_BASE_URL", "http://127.0.0.1:9/v1"),
    api_key="sk-test",  # type: ignore[arg-type]
    stream_usage=True,
    max_retries=0,
)
approval = HumanInTheLoopMiddleware(
    interrupt_on={"run_command": {"allowed_decisions": ["approve", "reject"]}},
    interrupt_mode=os.environ.get("ACP_TEST_HITL_MODE", "batched"),  # type: ignore[arg-type]
)
agent = create_agent(model, [read_file, run_command], middleware=[approval])
