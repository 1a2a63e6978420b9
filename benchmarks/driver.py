"""Benchmark driver: the command line of `python -m benchmarks`.

It owns the arguments, the default agents and the run: it runs the scenarios
(`scenarios.py`, over the raw client in `client.py`), writes the report (`report.py`) and
gives the smoke verdict's exit status. See `benchmarks/README.md`.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.client import BENCH_DIR, FULL, QUICK, AgentSpec, Settings
from benchmarks.report import incomplete, render
from benchmarks.scenarios import run_benchmarks


def default_agents() -> list[AgentSpec]:
    peers = BENCH_DIR / "peers"
    return [
        AgentSpec("acp-agent", [sys.executable, "-m", "acp_agent"]),
        AgentSpec("sdk", [sys.executable, str(peers / "sdk_agent.py")]),
        AgentSpec("floor", [sys.executable, str(peers / "floor_agent.py")]),
        AgentSpec("floor-sqlite", [sys.executable, str(peers / "floor_agent.py"), "--sqlite"]),
    ]


def parse_agent(value: str) -> AgentSpec:
    name, sep, command = value.partition("=")
    if not sep or not name or not command.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=COMMAND, got {value!r}")
    return AgentSpec(name.strip(), shlex.split(command))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Benchmark ACP agents (reference-agent contract) over stdio.",
    )
    parser.add_argument(
        "--agent",
        action="append",
        type=parse_agent,
        metavar="NAME=COMMAND",
        help="an agent to run (repeatable); default: acp-agent, sdk, floor and floor-sqlite",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="fewer rounds, smaller counts")
    mode.add_argument(
        "--smoke",
        action="store_true",
        help="quick mode; exit 1 unless every scenario completed for every agent that started",
    )
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument(
        "--output",
        type=Path,
        help="also write the markdown report there (default: print it only; "
        "--output benchmarks/RESULTS.md records a run)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings = QUICK if args.quick or args.smoke else FULL
    if args.rounds:
        settings = Settings(**{**settings.__dict__, "rounds": args.rounds})
    specs: list[AgentSpec] = args.agent or default_agents()
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        print(f"duplicate agent names: {names}", file=sys.stderr)
        return 2

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    began = time.perf_counter()
    results = asyncio.run(run_benchmarks(specs, settings, log))
    elapsed = time.perf_counter() - began
    command = shlex.join(["python", "-m", "benchmarks", *(sys.argv[1:] if argv is None else argv)])
    report = render(results, settings, elapsed, args.smoke, command)
    print(report)
    output = args.output
    if output is not None:
        output.write_text(report, encoding="utf-8")
        log(f"wrote {output}")
    if args.smoke:
        problems = incomplete(results)
        for problem in problems:
            log(f"smoke: FAILED {problem}")
        if problems:
            return 1
        log("smoke: every scenario completed for every agent that started")
    return 0
