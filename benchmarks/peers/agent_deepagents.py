"""The benchmark's Deep Agents graph, for ``acp-agent-kit --agent
benchmarks.peers.agent_deepagents:agent`` and for ``deepagents-acp``
(``deepagents_acp_agent.py``), on the fake endpoint in ``ACP_FAKE_BASE_URL``:
``create_deep_agent`` with ``agent_langgraph``'s model, its ``read_file`` (in place of
Deep Agents' own, which takes ``file_path``) and ``run_command``, which asks through
``interrupt_on``.
:func:`build` makes the same graph with a checkpointer. It imports nothing of this
project, so either side's interpreter runs it."""

from __future__ import annotations

from typing import Any

from deepagents import create_deep_agent

from benchmarks.peers import bench_tools
from benchmarks.peers.agent_langgraph import model, read_file, run_command


def build(checkpointer: Any = None) -> Any:
    """The graph, compiled with ``checkpointer`` if one is given."""
    return create_deep_agent(
        model,
        [read_file, run_command],
        system_prompt=bench_tools.INSTRUCTIONS,
        interrupt_on={"run_command": {"allowed_decisions": ["approve", "reject"]}},
        checkpointer=checkpointer,
    )


agent = build()
