"""`python -m benchmarks.instructions`: instructions per S2 turn and per S4 read, under callgrind.

Timings on a shared machine move from run to run; the number of instructions a process
executes for the same work hardly does. Each agent runs once under valgrind's callgrind (all of
its threads counted), driven by the benchmark driver's own client: after warm-up turns and
once the agent has been idle for a second (so that work it does when quiet, such as
acp-agent's model build, is left out), the counters are zeroed (`callgrind_control --zero`),
the measured turns run, a `session/list` request makes the agent finish any store work they
left for later (a store that defers writes does them before a read), and the counters are
dumped (`callgrind_control --dump`). The
report gives instructions per `/echo hi` turn (S2) and per `fs/read_text_file` round trip
(S4), and each agent's ratio to the SDK's agent and to the floor, in
`benchmarks/INSTRUCTIONS.md`.

Needs `valgrind` and `callgrind_control` on the PATH; it takes about a minute per agent.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.client import (
    BENCH_DIR,
    QUICK,
    AgentProcess,
    AgentSpec,
    cpu_ticks,
    open_session,
    turn,
    wait_response,
)
from benchmarks.driver import default_agents, parse_agent
from benchmarks.report import fmt_number
from benchmarks.scenarios import AgentResult, agent_environment, scenario_reads

WARMUP_TURNS = 50
TURNS = 1000
READS = 1000
SETTINGS = dataclasses.replace(
    QUICK, reads=READS, start_timeout=300.0, turn_timeout=300.0, big_timeout=300.0
)


def _counted(path: str, label: str) -> int:
    """The instruction total of the callgrind dump of ``path*`` labelled ``label``."""
    trigger = f"desc: Trigger: dump {label}"
    for dump in sorted(Path(path).parent.glob(Path(path).name + "*")):
        lines = dump.read_text(errors="replace").splitlines()
        if trigger not in lines:
            continue
        for line in lines:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"no callgrind dump labelled {label!r} next to {path}")


async def _wait_idle(pid: str, limit: float = 600.0) -> None:
    """Wait until the agent has used no CPU for a second.

    What an agent does once it is quiet (acp-agent builds its pydantic models then, in a
    thread: about two billion instructions) must not land in the measured window.
    """
    deadline = time.monotonic() + limit
    last, still = cpu_ticks(pid), 0
    while still < 2:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the agent was still busy after {limit:g} s")
        await asyncio.sleep(0.5)
        now = cpu_ticks(pid)
        still = still + 1 if now == last else 0
        last = now


async def _settle(agent: AgentProcess) -> None:
    """Have the agent finish the store work its turns left for later, now.

    A store that defers writes to a background timer (an earlier acp-agent's journal did)
    would do them before a read: a ``session/list`` makes that work part of the window whose
    turns caused it, whatever the timer does under valgrind. An agent without
    ``session/list`` answers with an error: fine.
    """
    future, _ = agent.send_request("session/list", {})
    await wait_response(future, SETTINGS.turn_timeout, "session/list")


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True, timeout=120)


async def measure(spec: AgentSpec, home: str) -> dict[str, float]:
    """Instructions per S2 turn and per S4 read for one agent."""
    out = os.path.join(home, f"callgrind.{spec.name}.out")
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no"]
    # A fixed hash seed: the same dict and set layouts in every run (one source of variation
    # fewer; timing-dependent work, such as a store's background writes, remains).
    env = {**(spec.env or agent_environment(home)), "PYTHONHASHSEED": "0"}
    traced = AgentSpec(spec.name, [*valgrind, *spec.argv], env)
    agent, session_id = await open_session(traced, SETTINGS, home)
    try:
        pid = str(agent.transport.get_pid()) if agent.transport is not None else ""
        for _ in range(WARMUP_TURNS):
            await turn(agent, session_id, "/echo hi", SETTINGS.turn_timeout)
        await _settle(agent)
        await _wait_idle(pid)
        _control("--zero", pid)
        for _ in range(TURNS):
            await turn(agent, session_id, "/echo hi", SETTINGS.turn_timeout)
        await _settle(agent)
        _control("--dump=s2", pid)
        await _wait_idle(pid)
        reads = AgentResult(spec)
        await scenario_reads(agent, session_id, SETTINGS, reads)
        await _settle(agent)
        _control("--dump=s4", pid)
        return {"s2": _counted(out, "s2") / TURNS, "s4": _counted(out, "s4") / READS}
    finally:
        if agent.transport is not None:
            agent.transport.kill()
        await agent.close()


def render(
    rows: dict[str, dict[str, float]],
    elapsed: float,
    command: str,
    commands: dict[str, str] | None = None,
) -> str:
    names = list(rows)
    lines = [
        "# Instructions per operation (callgrind)",
        "",
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
        f"in {elapsed:.0f} s.",
        "",
        f"- Python {platform.python_version()}, {platform.machine()}; every thread of the agent "
        "counted; `PYTHONHASHSEED=0`",
        f"- S2: {TURNS} `/echo hi` turns after {WARMUP_TURNS} unmeasured ones and a quiet second; "
        f"S4: one `/read bench.txt {READS}` turn after another quiet second, the driver "
        "answering each read at once; each window ends with a `session/list` request, so "
        "that store work left for later, if any, is counted in it",
        "",
        "Agents:",
        "",
    ]
    lines += [
        f"- `{name}`: `{commands[name]}`" if commands and name in commands else f"- `{name}`"
        for name in names
    ]
    header = ["operation", *(f"`{n}`" for n in names)]
    for base in ("sdk", "floor"):
        if base in rows:
            header += [f"{n}/{base}" for n in names if n != base]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, label in (("s2", "S2 `/echo hi` turn"), ("s4", "S4 `fs/read_text_file` round trip")):
        cells = [label, *(fmt_number(rows[n][key]) for n in names)]
        for base in ("sdk", "floor"):
            if base in rows:
                cells += [f"{rows[n][key] / rows[base][key]:.2f}x" for n in names if n != base]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Instructions executed by the agent process (user space, all threads), per operation;",
        "fewer is better. Unlike the timings in RESULTS.md, they hardly move with the load on",
        "the machine; they leave out what the kernel does for the pipes.",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions")
    parser.add_argument(
        "--agent",
        action="append",
        type=parse_agent,
        metavar="NAME=COMMAND",
        help="an agent to measure (repeatable); default: acp-agent, sdk, floor, floor-sqlite",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=BENCH_DIR / "INSTRUCTIONS.md",
        help="where to write the report (default: benchmarks/INSTRUCTIONS.md)",
    )
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind (with callgrind_control) is not installed", file=sys.stderr)
        return 2
    specs: list[AgentSpec] = args.agent or default_agents()
    rows: dict[str, dict[str, float]] = {}
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="acp-bench-cg-") as home:
        for spec in specs:
            print(f"  {spec.name} ...", file=sys.stderr, flush=True)
            rows[spec.name] = asyncio.run(measure(spec, home))
    command = shlex.join(
        ["python", "-m", "benchmarks.instructions", *(sys.argv[1:] if argv is None else argv)]
    )
    commands = {spec.name: spec.command for spec in specs}
    report = render(rows, time.perf_counter() - began, command, commands)
    print(report)
    args.output.write_text(report, encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
