"""``python -m benchmarks.initialize_wait [ROUNDS] [--base TREE]``: spawn -> ``initialize``
answered and spawn -> first ``session/new`` answered, for ``--agent`` serving a plain
``Agent`` and the three frameworks, this tree's code against another checkout's (default
``/work/main``), alternating at every spawn (the S1 measurement of
``benchmarks.adapters``: ``adapter_client.start``); prints a markdown table of medians.

Each tree's code is run with ``python -P`` and ``PYTHONPATH`` set to the tree, so the
working directory's copy does not win. It owns this one comparison, nothing else.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from .adapter_client import new_session, start
from .client import AgentSpec

AGENTS = {
    "plain": "tests.adapters.plain_agent:agent",
    "pydantic-ai": "benchmarks.peers.agent_pydantic:agent",
    "langgraph": "benchmarks.peers.agent_langgraph:agent",
    "openai-agents": "benchmarks.peers.agent_openai:agent",
}


async def measure(trees: dict[str, str], rounds: int) -> dict[tuple[str, str, str], list[float]]:
    seconds: dict[tuple[str, str, str], list[float]] = {}
    cwd = tempfile.mkdtemp()
    for r in range(rounds):
        for name, target in AGENTS.items():
            order = list(trees.items())
            for tree, path in order if r % 2 == 0 else reversed(order):
                env = {"PYTHONPATH": path, "ACP_FAKE_BASE_URL": "http://127.0.0.1:9/v1"}
                argv = [sys.executable, "-P", "-m", "acp_agent", "--store", "memory"]
                spawned = time.perf_counter()
                agent, took, _ = await start(
                    AgentSpec(f"{tree}-{name}", [*argv, "--agent", target], env), 120.0
                )
                try:
                    await new_session(agent, cwd)
                    ready = time.perf_counter() - spawned
                finally:
                    await agent.close()
                seconds.setdefault((name, tree, "initialize"), []).append(took)
                seconds.setdefault((name, tree, "session/new"), []).append(ready)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.initialize_wait")
    parser.add_argument("rounds", nargs="?", type=int, default=5)
    parser.add_argument("--base", default="/work/main", help="the other checkout")
    args = parser.parse_args()
    trees = {"base": args.base, "this": str(Path(__file__).parents[1])}
    seconds = anyio.run(measure, trees, args.rounds)
    print("| `--agent` | spawn → initialize, base | this | spawn → session/new, base | this |")
    print("|---|---|---|---|---|")
    for name in AGENTS:
        cells = [
            f"{statistics.median(seconds[(name, tree, what)]) * 1000:.0f} ms"
            for what in ("initialize", "session/new")
            for tree in trees
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
