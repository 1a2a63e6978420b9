"""The benchmark's LangChain ``create_agent`` graph, for ``acp-agent-kit --agent
benchmarks.peers.agent_langgraph:agent``, on the fake endpoint in ``ACP_FAKE_BASE_URL``:
``run_command`` asks through the human-in-the-loop middleware. :func:`build` makes the same
graph compiled with a checkpointer (the ``langchain-acp+memory`` peer)."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.base import BaseCheckpointSaver

from benchmarks.peers import bench_tools

read_file = tool(bench_tools.read_file)
run_command = tool(bench_tools.run_command)
read_file.metadata = {"acp_kind": "read", "acp_path": "path"}
run_command.metadata = {"acp_kind": "execute"}
model = ChatOpenAI(
    model="fake",
    base_url=bench_tools.BASE_URL,
    api_key="sk-test",  # type: ignore[arg-type]
    stream_usage=True,
    max_retries=0,
)
approve = HumanInTheLoopMiddleware(
    interrupt_on={"run_command": {"allowed_decisions": ["approve", "reject"]}}
)


def build(checkpointer: BaseCheckpointSaver[Any] | None = None) -> Any:
    """The graph, compiled with ``checkpointer`` if one is given (none: the quickstart's)."""
    return create_agent(
        model,
        [read_file, run_command],
        system_prompt=bench_tools.INSTRUCTIONS,
        middleware=[approve],
        checkpointer=checkpointer,
    )


agent = build()
