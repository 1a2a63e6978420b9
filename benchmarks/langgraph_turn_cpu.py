"""`python -m benchmarks.langgraph_turn_cpu`: CPU of the agent process per two-tool turn, by
turn of one session, for ``ours-langgraph`` and acpkit's ``langchain-acp`` (the graph as
given, and compiled with an ``InMemorySaver`` so that it remembers).

Each agent runs ``--sessions`` sessions turn by turn in lockstep: turn k of every session,
then turn k+1; the agent's CPU time (:func:`benchmarks.client.agent_cpu`) over turn k of all
the sessions, divided by their number, is that turn's figure. One unmeasured turn in another
session comes first. Prints one line per agent and the figures as JSON;
``benchmarks/README.md`` ("Later turns of one LangGraph session") reads them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile

from acp_agent.llm.fake_server import FakeModelServer
from benchmarks.adapter_client import new_session, peer_python, run_turn, start
from benchmarks.client import AgentSpec, agent_cpu
from benchmarks.scenarios import agent_environment

TWO_TOOLS = "fake:parallel"


def spec(name: str, env: dict[str, str], peer: str) -> AgentSpec:
    argv = {
        "ours": [
            sys.executable,
            "-m",
            "acp_agent",
            "--agent",
            "benchmarks.peers.agent_langgraph:agent",
        ],
        "peer": [peer, "-m", "benchmarks.peers.acpkit_agents", "langchain"],
        "peer-remembering": [peer, "-m", "benchmarks.peers.acpkit_agents", "langchain", "--memory"],
    }[name]
    return AgentSpec(name, argv, env)


async def per_turn(agent_spec: AgentSpec, cwd: str, sessions: int, turns: int) -> list[float]:
    agent, _, _ = await start(agent_spec, 120)
    try:
        ids = [await new_session(agent, cwd) for _ in range(sessions)]
        await run_turn(agent, await new_session(agent, cwd), TWO_TOOLS, 60)
        figures = []
        for _ in range(turns):
            before = agent_cpu(agent.pid)
            for session_id in ids:
                done = await run_turn(agent, session_id, TWO_TOOLS, 60)
                if done.stop_reason != "end_turn":
                    raise RuntimeError(f"{agent_spec.name}: {done.response}")
            figures.append((agent_cpu(agent.pid) - before) * 1000 / sessions)
        return figures
    finally:
        await agent.close()


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="acp-lg-turns-") as home:
        env = agent_environment(home)
        env["HOME"] = home
        async with FakeModelServer.running() as fake:
            env["ACP_FAKE_BASE_URL"] = fake.base_url
            cwd = tempfile.mkdtemp(dir=home)
            peers = [name for name in args.agent if name != "ours"]
            python = peer_python(print) if peers else None
            if peers and python is None:
                raise SystemExit("acpkit could not be installed for the peers")
            results = {}
            for name in args.agent:
                agent_spec = spec(name, env, str(python))
                figures = await per_turn(agent_spec, cwd, args.sessions, args.turns)
                results[name] = figures
                print(name, " ".join(f"{ms:.0f}" for ms in figures), flush=True)
    print(json.dumps(results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", action="append", choices=["ours", "peer", "peer-remembering"])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    args.agent = args.agent or ["ours", "peer", "peer-remembering"]
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
