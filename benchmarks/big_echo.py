"""S5's 50 MiB ``/echo`` on its own, with the payload the full run uses or one that does not
compress, agents interleaved round by round.

    python -m benchmarks.big_echo [--rounds 3] [--incompressible] [--agent NAME=COMMAND ...]

The full run's payload is one repeated character, which zlib shrinks a thousandfold; an agent
that compresses what it keeps (acp-agent does) is measured there at its best. With
``--incompressible`` the text is base64 of random bytes, which zlib can shrink by only a
quarter, at great cost: the agent's worst case. Each line printed is one turn: the agent, the
turn's time from the request's write to the response, and the peak RSS (VmHWM). Agents start
as in the full run (one unmeasured warm-up start each, per-run XDG directories).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import statistics
import sys
import tempfile

from benchmarks.client import FULL, MIB, AgentSpec
from benchmarks.driver import default_agents, parse_agent
from benchmarks.scenarios import (
    AgentResult,
    BigPayloads,
    agent_environment,
    scenario_big_echo,
    warm_up,
)


def payload(size: int, incompressible: bool) -> BigPayloads:
    big = BigPayloads.build(size)
    if not incompressible:
        return big
    text = base64.b64encode(os.urandom(size * 3 // 4 + 3)).decode()[:size]
    return BigPayloads(size, big.content_json, text)


async def run(specs: list[AgentSpec], rounds: int, big: BigPayloads) -> None:
    with tempfile.TemporaryDirectory(prefix="acp-bench-echo-") as home:
        env = agent_environment(home)
        specs = [AgentSpec(s.name, s.argv, env) for s in specs]
        results = {spec.name: AgentResult(spec) for spec in specs}
        for result in results.values():
            await warm_up(result, FULL, lambda text: print(text, file=sys.stderr))
        for _ in range(rounds):
            for spec in specs:
                result = results[spec.name]
                if not result.started:
                    continue
                await scenario_big_echo(spec, FULL, result, os.getcwd(), big)
                ms, hwm = result.values["s5_echo_ms"][-1], result.values["s5_echo_hwm"][-1]
                print(f"{spec.name}: {ms:.0f} ms, peak RSS {hwm:.0f} MB", flush=True)
        for name, result in results.items():
            if not result.values.get("s5_echo_ms"):
                continue
            ms = statistics.median(result.values["s5_echo_ms"])
            print(f"{name}: median {ms:.0f} ms over {rounds} turns")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.big_echo", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mib", type=int, default=50)
    parser.add_argument("--incompressible", action="store_true")
    parser.add_argument("--agent", action="append", type=parse_agent, metavar="NAME=COMMAND")
    args = parser.parse_args()
    specs = args.agent or [s for s in default_agents() if s.name in ("acp-agent", "sdk")]
    asyncio.run(run(specs, args.rounds, payload(args.mib * MIB, args.incompressible)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
