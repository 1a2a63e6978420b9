"""The benchmark's agents served by acpkit: ``python -m benchmarks.peers.acpkit_agents
pydantic|langchain [--memory] [--file-store DIR]``, run with the throw-away virtualenv's
interpreter (``pydantic-acp`` / ``langchain-acp``, never a dependency of this project).

The agents are the very objects ``acp-agent-kit --agent`` serves (``agent_pydantic``,
``agent_langgraph``), handed to each package's documented entry point, ``run_acp``;
``--file-store`` gives it its file session store (durable sessions), else its default.
``--memory`` hands ``langchain-acp`` the same graph compiled with an ``InMemorySaver``:
it keeps a graph's own checkpointer (and so the session's earlier turns), where a graph
without one is recompiled with a fresh ``MemorySaver`` at every prompt.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("framework", choices=["pydantic", "langchain"])
    parser.add_argument("--memory", action="store_true", help="langchain: graph's own checkpointer")
    parser.add_argument("--file-store", type=Path)
    args = parser.parse_args()
    if args.framework == "pydantic":
        from pydantic_acp import AdapterConfig, FileSessionStore, run_acp

        from benchmarks.peers.agent_pydantic import agent

        config = AdapterConfig()
        if args.file_store is not None:
            config = AdapterConfig(session_store=FileSessionStore(root=args.file_store))
        run_acp(agent=agent, config=config)
    else:
        from langchain_acp import AdapterConfig, FileSessionStore, run_acp
        from langgraph.checkpoint.memory import InMemorySaver

        from benchmarks.peers.agent_langgraph import agent, build

        graph = build(InMemorySaver()) if args.memory else agent
        config = AdapterConfig()
        if args.file_store is not None:
            config = AdapterConfig(session_store=FileSessionStore(root=args.file_store))
        run_acp(graph=graph, config=config)


if __name__ == "__main__":
    main()
