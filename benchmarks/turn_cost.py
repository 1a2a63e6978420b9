"""``python -m benchmarks.turn_cost``: what one prompt turn costs the agent process, ours
against ``pydantic-acp``, on the same pydantic-ai agent and the fake endpoint.

Per turn, over many turns: CPU time of the agent process (all threads, and its main thread,
from /proc), session/update messages, and with ``--profile`` the Python function calls of
the main thread (cProfile, switched on around the turns by ``benchmarks/peers/profiled.py``).
Call counts are deterministic where CPU time on a shared machine is not.

The agents: ``ours`` (``acp-agent-kit --agent``, SQLite store), ``ours-memory``
(``--store memory``), ``pydantic-acp`` (acpkit, memory store), and ``ours@peer-venv``: ours
run by acpkit's interpreter, so on the pydantic-ai release acpkit pins, which tells our
side's cost apart from the framework's. The turns, each kind in its own sessions:
``trivial`` (``fake:cold``, 6 turns a session), ``tools`` (``fake:parallel``, 6 a session:
the history grows) and ``tools_new`` (``fake:parallel``, the first turn of a new session).

It owns these figures only; the agents and the client are ``adapter_client.py``'s, the
wall-clock figures ``adapters.py``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import signal
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from acp_agent.llm.fake_server import FakeModelServer
from benchmarks.adapter_client import Recorder, agent_specs, new_session, peer_python, run_turn
from benchmarks.adapter_client import start as start_agent
from benchmarks.client import AgentSpec, agent_cpu
from benchmarks.scenarios import agent_environment

PROFILED = Path(__file__).parent / "peers" / "profiled.py"
#: kind: (prompt, sessions, turns per session)
KINDS = {
    "trivial": ("fake:cold", 30, 6),
    "tools": ("fake:parallel", 20, 6),
    "tools_new": ("fake:parallel", 100, 1),
}
FIGURES = {
    "cpu_ms": "CPU, all threads, ms",
    "main_ms": "CPU, main thread, ms",
    "calls": "Python calls, main thread",
    "updates": "session/update messages",
}


def main_thread_ms(pid: int) -> float:
    """CPU time of the process's main thread so far (ns in schedstat), in ms."""
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0]) / 1e6


def acknowledged(ack: Path) -> str | None:
    """What the profiled agent last said it did (``on`` / ``off``), None before that."""
    return ack.read_text() if ack.exists() else None


async def switch(agent: Recorder, signum: int, ack: Path, state: str) -> None:
    """Switch the profiler and wait until the agent says it did."""
    os.kill(agent.pid, signum)
    for _ in range(2000):
        if acknowledged(ack) == state:
            return
        await asyncio.sleep(0.005)
    raise RuntimeError("the profiled agent did not answer the signal")


async def measure(
    spec: AgentSpec, cwd: str, scale: float, profile: Path | None
) -> dict[str, dict[str, float]]:
    """Each kind's figures per turn, from one agent process."""
    agent, _, _ = await start_agent(spec, 120.0)
    figures: dict[str, dict[str, float]] = {}
    try:
        for text in ("fake:cold", "fake:parallel"):  # unmeasured: first use of each path
            session = await new_session(agent, cwd)
            for _ in range(2):
                await run_turn(agent, session, text, 60.0)
        for n, (kind, (text, sessions, turns)) in enumerate(KINDS.items(), 1):
            sessions = max(1, round(sessions * scale))
            if profile is not None:
                await switch(agent, signal.SIGUSR1, Path(f"{profile}.ack"), "on")
            cpu, main = agent_cpu(agent.pid), main_thread_ms(agent.pid)
            updates = 0
            for _ in range(sessions):
                session = await new_session(agent, cwd)
                for _ in range(turns):
                    turn = await run_turn(agent, session, text, 60.0)
                    if turn.stop_reason != "end_turn":
                        raise RuntimeError(f"{kind} turn ended {turn.stop_reason or turn.error}")
                    updates += len(turn.updates())
            count = sessions * turns
            row = {
                "cpu_ms": (agent_cpu(agent.pid) - cpu) * 1000 / count,
                "main_ms": (main_thread_ms(agent.pid) - main) / count,
                "updates": updates / count,
            }
            if profile is not None:
                await switch(agent, signal.SIGUSR2, Path(f"{profile}.ack"), "off")
                row["calls"] = pstats.Stats(f"{profile}.{n}.prof").total_calls / count
            figures[kind] = row
    finally:
        await agent.close()
    return figures


def specs_of(env: dict[str, str], home: str, peer: Path | None) -> dict[str, AgentSpec]:
    base = {s.name: s for s in agent_specs(env, peer, ["ours-pydantic-ai", "pydantic-acp"])}
    ours = base["ours-pydantic-ai"]
    specs = {
        "ours": ours,
        "ours-memory": AgentSpec("ours-memory", [*ours.argv, "--store", "memory"], env),
    }
    if peer is not None:
        specs["pydantic-acp"] = base["pydantic-acp"]
        # the peer's venv lacks platformdirs (the default store path): a path is given
        argv = [str(peer), *ours.argv[1:], "--store", f"{home}/ours-at-peer.sqlite3"]
        specs["ours@peer-venv"] = AgentSpec("ours@peer-venv", argv, env)
    return specs


def report(results: dict[str, list[dict[str, dict[str, float]]]]) -> str:
    names = list(results)
    lines = []
    for kind in KINDS:
        lines += [f"\n{kind}, per turn (median of rounds)", ""]
        lines.append("| figure | " + " | ".join(names) + " |")
        lines.append("|---|" + "---:|" * len(names))
        for key, label in FIGURES.items():
            cells = []
            for name in names:
                values = [r[kind][key] for r in results[name] if key in r[kind]]
                cells.append(f"{statistics.median(values):,.1f}" if values else "-")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> None:
    peer = None if args.no_peers else peer_python(lambda text: print(text, file=sys.stderr))
    with tempfile.TemporaryDirectory(prefix="acp-turn-cost-") as home:
        env = agent_environment(home)
        env["HOME"] = home
        async with FakeModelServer.running() as fake:
            env["ACP_FAKE_BASE_URL"] = fake.base_url
            specs = specs_of(env, home, peer)
            if args.agent:
                specs = {k: v for k, v in specs.items() if k in args.agent}
            cwd = tempfile.mkdtemp(dir=home)
            results: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in specs}
            for n in range(args.rounds):
                names = list(specs)
                for name in names[n % len(names) :] + names[: n % len(names)]:
                    spec, profile = specs[name], None
                    if args.profile:
                        profile = Path(home) / f"{name}-{n}"
                        python, *rest = spec.argv
                        spec = AgentSpec(name, [python, str(PROFILED), str(profile), *rest], env)
                    results[name].append(await measure(spec, cwd, args.scale, profile))
                    print(f"round {n + 1}: {name} done", file=sys.stderr, flush=True)
    print(report(results))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.turn_cost", description=__doc__)
    parser.add_argument("--profile", action="store_true", help="also count Python calls")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--scale", type=float, default=1.0, help="scale the sessions run")
    parser.add_argument("--agent", action="append", help="run only these (repeatable)")
    parser.add_argument("--no-peers", action="store_true", help="do not install or run acpkit")
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
