"""The benchmark's Deep Agents graph served by ``deepagents-acp``: ``python -m
benchmarks.peers.deepagents_acp_agent [--sqlite FILE]``, run with the throw-away
virtualenv's interpreter (``deepagents-acp``, never a dependency of this project).

The graph is the one ``acp-agent-kit --agent`` serves (``agent_deepagents``), handed to
the package's documented entry point, ``AgentServerACP`` under ``acp.run_agent``. Without
``--sqlite`` the graph has no checkpointer and the server gives it a ``MemorySaver`` (its
quickstart's memory); with it, the graph is compiled with langgraph's
``AsyncSqliteSaver`` on ``FILE`` and ``load_sessions=True``: durable sessions, as
its README's "Persist and load sessions" describes.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sqlite", type=Path, help="durable sessions in this SQLite file")
    args = parser.parse_args()
    from acp import run_agent
    from deepagents_acp.server import AgentServerACP

    from benchmarks.peers.agent_deepagents import agent, build

    if args.sqlite is None:
        await run_agent(AgentServerACP(agent))
        return
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    args.sqlite.parent.mkdir(parents=True, exist_ok=True)
    async with AsyncSqliteSaver.from_conn_string(str(args.sqlite)) as saver:
        await run_agent(AgentServerACP(build(saver), load_sessions=True))


if __name__ == "__main__":
    asyncio.run(main())
