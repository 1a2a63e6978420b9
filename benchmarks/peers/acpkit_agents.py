"""The benchmark's agents served by acpkit: ``python -m benchmarks.peers.acpkit_agents
pydantic|langchain [--file-store DIR]``, run with the throw-away virtualenv's interpreter
(``pydantic-acp`` / ``langchain-acp``, never a dependency of this project).

The agents are the very objects ``acp-agent-kit --agent`` serves (``agent_pydantic``,
``agent_langgraph``), handed to each package's documented entry point, ``run_acp``;
``--file-store`` gives it its file session store (durable sessions), else its default.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("framework", choices=["pydantic", "langchain"])
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

        from benchmarks.peers.agent_langgraph import agent as graph

        config = AdapterConfig()
        if args.file_store is not None:
            config = AdapterConfig(session_store=FileSessionStore(root=args.file_store))
        run_acp(graph=graph, config=config)


if __name__ == "__main__":
    main()
