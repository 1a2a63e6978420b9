"""``python -m benchmarks.adapters``: this project's framework adapters against their peers.

Runs the same small agents (one plain tool, ``read_file``, and one that needs approval,
``run_command``; ``benchmarks/peers/``) served by our adapters (``acp-agent-kit --agent``)
and by the peers where the package index has one: acpkit's ``pydantic-acp`` and
``langchain-acp``, and ``deepagents-acp`` for Deep Agents (each installed into a
throw-away virtualenv, never into the project), plus our own LLM agent, all on the
project's fake OpenAI-compatible endpoint, and writes ``benchmarks/ADAPTERS.md``: the
figures side by side (the agents alternating at each step of a round; medians and p90):
wall-clock times, the agent process's CPU time and the messages it sends the model; and
the defect table (``adapter_checks.py``).

It owns the figures (what is timed, how, the rounds), the report and the command line. The
agents and the client are in ``adapter_client.py``, the checks in ``adapter_checks.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from acp_agent.llm.fake_script import JSON
from acp_agent.llm.fake_server import FakeModelServer
from benchmarks.adapter_checks import CHECKS, Finding, run_checks
from benchmarks.adapter_client import (
    KITS,
    LLM,
    PAIRS,
    Recorder,
    agent_specs,
    for_checks,
    kit_python,
    kit_versions,
    new_session,
    run_turn,
    start,
)
from benchmarks.client import BENCH_DIR, REPO_ROOT, AgentSpec, agent_cpu, describe
from benchmarks.report import machine_description
from benchmarks.scenarios import agent_environment, percentile

TRIVIAL = "fake:cold"
TWO_TOOLS = "fake:parallel"
TIMEOUT = 60.0
EXIT_GRACE = 2.0  # AgentProcess.close kills an agent still running after this
OUTPUT = BENCH_DIR / "ADAPTERS.md"
T = TypeVar("T")


@dataclass(frozen=True)
class Settings:
    mode: str
    rounds: int
    spawns: int
    turns: int
    #: idle sessions made first: RSS per session over them (``idle_session``)
    sessions: int
    #: idle sessions made next: RSS per session over them (``idle_marginal``)
    more_sessions: int


MODES = {
    "full": Settings("full", rounds=5, spawns=3, turns=10, sessions=500, more_sessions=2000),
    "quick": Settings("quick", rounds=3, spawns=2, turns=5, sessions=200, more_sessions=1000),
    "smoke": Settings("smoke", rounds=1, spawns=1, turns=2, sessions=3, more_sessions=3),
}

#: (key, label, unit scale): the rows of the figures table, in order
ROWS = [
    ("init", "spawn → `initialize` answer, ms", 1000.0),
    ("init_cpu", "CPU time of the agent to its `initialize` answer, ms", 1000.0),
    ("first_turn", "first turn of a new process (trivial), ms", 1000.0),
    ("trivial_chunk", "trivial turn: first chunk, ms", 1000.0),
    ("trivial_turn", "trivial turn: whole turn, ms", 1000.0),
    ("tools_chunk", "two-tool turn: first chunk, ms", 1000.0),
    ("tools_turn", "two-tool turn: whole turn, ms", 1000.0),
    ("tools_new_chunk", "two-tool turn, new session (same model input): first chunk, ms", 1000.0),
    ("tools_new_turn", "two-tool turn, new session (same model input): whole turn, ms", 1000.0),
    ("trivial_cpu", "trivial turn: CPU time of the agent, ms", 1000.0),
    ("tools_cpu", "two-tool turn: CPU time of the agent, ms", 1000.0),
    ("tools_new_cpu", "two-tool turn, new session: CPU time of the agent, ms", 1000.0),
    ("trivial_input", "trivial turn: messages sent to the model", 1.0),
    ("tools_input", "two-tool turn: messages sent to the model (2 requests)", 1.0),
    ("tools_new_input", "two-tool turn, new session: messages sent to the model", 1.0),
    ("idle_session", "RSS per idle session, the first ones, KB", 1.0),
    ("idle_marginal", "RSS per idle session, the next ones, KB", 1.0),
    ("exit", "stdin's EOF → process exit (after its turns), ms", 1000.0),
]


@dataclass
class Figures:
    spec: AgentSpec
    values: dict[str, list[float]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def add(self, key: str, value: float) -> None:
        self.values.setdefault(key, []).append(value)

    def stat(self, key: str, p90: bool = False) -> float | None:
        values = self.values.get(key)
        if not values:
            return None
        return percentile(values, 0.9) if p90 else statistics.median(values)


def rss_kb(agent: Recorder) -> int:
    with open(f"/proc/{agent.pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def measured_turn(
    figures: Figures, prefix: str, agent: Recorder, session_id: str, text: str, model: list[JSON]
) -> None:
    """One turn's figures: wall-clock, the agent's CPU from the prompt's write to its answer,
    the messages of the model requests it made (``model``: the fake endpoint's record)."""
    mark, cpu = len(model), agent_cpu(agent.pid)
    turn = await run_turn(agent, session_id, text, TIMEOUT)
    cpu = agent_cpu(agent.pid) - cpu
    if turn.stop_reason != "end_turn":
        raise RuntimeError(f"{prefix} turn ended {turn.stop_reason or turn.error}")
    figures.add(f"{prefix}_turn", turn.seconds)
    if turn.first_chunk is not None:
        figures.add(f"{prefix}_chunk", turn.first_chunk)
    figures.add(f"{prefix}_cpu", cpu)
    figures.add(f"{prefix}_input", sum(len(body.get("messages") or ()) for body in model[mark:]))


@dataclass
class Live:
    """One agent's process for a round's turns, and the session its turns run in."""

    figures: Figures
    agent: Recorder
    session_id: str


async def spawn_once(figures: Figures) -> None:
    agent, took, _ = await start(figures.spec, TIMEOUT)
    figures.add("init", took)
    figures.add("init_cpu", agent_cpu(agent.pid))
    await agent.close()


async def first_turn(figures: Figures, cwd: str) -> Live:
    agent, _, _ = await start(figures.spec, TIMEOUT)
    try:
        session_id = await new_session(agent, cwd)
        first = await run_turn(agent, session_id, TRIVIAL, TIMEOUT)
    except BaseException:
        await agent.close()
        raise
    figures.add("first_turn", first.seconds)
    return Live(figures, agent, session_id)


async def next_turn(live: Live, prefix: str, n: int, cwd: str, model: list[JSON]) -> None:
    """The ``n``th measured turn of kind ``prefix`` (``trivial``, ``tools``, ``tools_new``)."""
    if prefix == "tools" and n == 0:  # one session, after one unmeasured turn
        live.session_id = await new_session(live.agent, cwd)
        await run_turn(live.agent, live.session_id, TWO_TOOLS, TIMEOUT)
    if prefix == "tools_new":
        # the first turn of each new session: every agent sends the model the same input
        # (in ``tools``, an agent that keeps memory sends it the session's earlier turns too)
        live.session_id = await new_session(live.agent, cwd)
    text = TRIVIAL if prefix == "trivial" else TWO_TOOLS
    await measured_turn(live.figures, prefix, live.agent, live.session_id, text, model)


async def idle_then_exit(live: Live, settings: Settings, cwd: str) -> None:
    figures, agent = live.figures, live.agent
    before = rss_kb(agent)
    for _ in range(settings.sessions):
        await new_session(agent, cwd)
    first = rss_kb(agent)
    figures.add("idle_session", (first - before) / settings.sessions * 1.024)
    # The first ones partly fill memory the process had already and freed (its turns'),
    # so their figure is below the marginal cost by an amount that varies by agent; the
    # next ones show the cost of one more session.
    for _ in range(settings.more_sessions):
        await new_session(agent, cwd)
    figures.add("idle_marginal", (rss_kb(agent) - first) / settings.more_sessions * 1.024)
    eof = time.perf_counter()
    await agent.close()  # stdin's EOF, then 2 s before it is killed
    took = time.perf_counter() - eof
    if took >= EXIT_GRACE:
        raise RuntimeError(f"did not exit within {EXIT_GRACE:g} s of stdin's EOF")
    figures.add("exit", took)


async def one_round(
    order: list[Figures],
    settings: Settings,
    cwd: str,
    model: list[JSON],
    log: Callable[[str], None],
) -> None:
    """One round, the agents alternating at every step (so the machine's other load falls
    on all alike): spawns, then one process each: its first turn, the measured turns one
    agent after the other, then its idle sessions and exit. A failing agent leaves the round."""
    failed: set[str] = set()

    async def attempt(figures: Figures, step: Awaitable[T]) -> T | None:
        try:
            return await step
        except Exception as exc:
            failed.add(figures.spec.name)
            figures.failures.append(describe(exc))
            log(f"  {figures.spec.name}: {describe(exc)}")
            return None

    for _ in range(settings.spawns):
        for figures in order:
            if figures.spec.name not in failed:
                await attempt(figures, spawn_once(figures))
    live = []
    try:
        for figures in order:
            if figures.spec.name not in failed:
                started = await attempt(figures, first_turn(figures, cwd))
                live += [started] if started is not None else []
        for prefix in ("trivial", "tools", "tools_new"):
            for n in range(settings.turns):
                for each in live:
                    # ours-llm: trivial turns only, its tools are not the benchmark agents'
                    skip = prefix != "trivial" and each.figures.spec.name == LLM
                    if not skip and each.figures.spec.name not in failed:
                        await attempt(each.figures, next_turn(each, prefix, n, cwd, model))
        for each in live:
            if each.figures.spec.name not in failed:
                await attempt(each.figures, idle_then_exit(each, settings, cwd))
    finally:
        for each in live:
            await each.agent.close()


async def measure(
    specs: list[AgentSpec],
    settings: Settings,
    cwd: str,
    model: list[JSON],
    log: Callable[[str], None],
) -> list[Figures]:
    results = [Figures(spec) for spec in specs]
    for n in range(settings.rounds):
        log(f"round {n + 1}/{settings.rounds}")
        order = results[n % len(results) :] + results[: n % len(results)]
        await one_round(order, settings, cwd, model, log)
    return results


# ------------------------------------------------------------------ report


def cell(figures: Figures, key: str, scale: float) -> str:
    median, p90 = figures.stat(key), figures.stat(key, p90=True)
    if median is None or p90 is None:
        return "-"
    return f"{median * scale:.1f} ({p90 * scale:.1f})"


def ratio(ours: Figures | None, theirs: Figures | None, key: str) -> str:
    if ours is None or theirs is None:
        return "-"
    a, b = ours.stat(key), theirs.stat(key)
    if a is None or b is None or b <= 0:
        return "-"
    return f"{a / b:.2f}"


def figures_table(results: list[Figures]) -> list[str]:
    by_name = {f.spec.name: f for f in results}
    pairs = [(ours, theirs) for theirs, ours in PAIRS.items() if theirs in by_name]
    if "pydantic-acp" in by_name:
        pairs.append((LLM, "pydantic-acp"))
    head = ["figure: median (p90)", *by_name, *(f"{o} ÷ {t}" for o, t in pairs)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, label, scale in ROWS:
        cells = [cell(f, key, scale) for f in results]
        cells += [ratio(by_name.get(o), by_name.get(t), key) for o, t in pairs]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for f in results:
        for failure in f.failures:
            lines.append(f"\n{f.spec.name} failed: {failure}")
    return lines


def defect_table(findings: dict[str, dict[str, Finding]]) -> list[str]:
    names = list(findings)
    lines = ["| defect | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
    word = {True: "**present**", False: "absent", None: "?"}
    for title, _ in CHECKS:
        cells = [word[findings[n][title].present] if title in findings[n] else "-" for n in names]
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    lines += ["", "What each check saw:", ""]
    for name in names:
        lines.append(f"- **{name}**")
        for title, finding in findings[name].items():
            lines.append(f"  - {title}: {finding.seen}")
    return lines


def render(
    settings: Settings,
    results: list[Figures],
    findings: dict[str, dict[str, Finding]],
    peers: dict[str, str],
    skipped: Sequence[str] = (),
) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    commit = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    out = [
        "# Framework adapters: acp-agent-kit against acpkit and deepagents-acp",
        "",
        f"`python -m benchmarks.adapters` ({settings.mode} mode: {settings.rounds} rounds, "
        f"{settings.spawns} spawns and {settings.turns} turns of each kind per round, "
        f"{settings.sessions} idle sessions, then {settings.more_sessions} more), {now}, "
        f"at {commit}. "
        "See benchmarks/README.md for what is measured.",
        "",
        *machine_description(),
        *(f"- {kit} side: {peers.get(kit) or 'not run'}" for kit in KITS),
        *(f"- {line}" for line in skipped),
        "",
    ]
    if results:
        out += ["## Figures", "", *figures_table(results), ""]
    if findings:
        out += ["## Defects", "", *defect_table(findings), ""]
    return "\n".join(out)


# ------------------------------------------------------------------ command line


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.adapters", description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="3 rounds, fewer turns")
    mode.add_argument(
        "--smoke",
        action="store_true",
        help="1 round, our agents only; prints the report, writes nothing; "
        "exit 1 unless every figure and check ran",
    )
    parser.add_argument("--agent", action="append", help="run only these agents (repeatable)")
    parser.add_argument("--no-peers", action="store_true", help="do not install or run the peers")
    parser.add_argument("--no-figures", action="store_true", help="only the defect table")
    parser.add_argument("--no-checks", action="store_true", help="only the figures")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument("--output", type=Path, help=f"write the report here (default {OUTPUT})")
    return parser.parse_args(argv)


def incomplete(
    results: list[Figures], findings: dict[str, dict[str, Finding]], figures: bool
) -> list[str]:
    """What a smoke run did not manage: failures, missing figures, checks that did not run."""
    problems = [f"{f.spec.name}: {x}" for f in results for x in f.failures]
    if figures:
        for f in results:
            keys = [k for k, _, _ in ROWS if f.spec.name != LLM or not k.startswith("tools")]
            problems += [f"{f.spec.name}: no {k}" for k in keys if not f.values.get(k)]
    for name, found in findings.items():
        problems += [f"{name}: {t}: {x.seen}" for t, x in found.items() if x.present is None]
    return problems


async def warm_up(spec: AgentSpec) -> bool:
    """One unmeasured start (fills the bytecode cache); False if the agent does not start."""
    try:
        agent, _, _ = await start(spec, 120.0)
    except Exception as exc:
        log(f"{spec.name} did not start: {describe(exc)}")
        return False
    await agent.close()
    return True


async def run(args: argparse.Namespace) -> int:
    settings = MODES["smoke" if args.smoke else "quick" if args.quick else "full"]
    if args.rounds:
        settings = dataclasses.replace(settings, rounds=args.rounds)
    pythons: dict[str, Path] = {}
    if not (args.no_peers or args.smoke):
        for kit in KITS.values():
            python = kit_python(kit, log)
            if python is not None:
                pythons[kit.name] = python
    peers = {name: kit_versions(KITS[name], python) for name, python in pythons.items()}
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="acp-adapters-") as home:
        env = agent_environment(home)
        env["HOME"] = home
        async with FakeModelServer.running() as fake:
            env["ACP_FAKE_BASE_URL"] = fake.base_url
            specs = agent_specs(env, pythons, args.agent, skipped)
            for line in skipped:
                log(line)
            cwd = tempfile.mkdtemp(dir=home)
            (Path(cwd) / "notes.txt").write_text("first line\n")
            specs = [spec for spec in specs if await warm_up(spec)]
            results = []
            if not args.no_figures:
                results = await measure(specs, settings, cwd, fake.requests, log)
            findings: dict[str, dict[str, Finding]] = {}
            if not args.no_checks:
                for spec in specs:
                    log(f"checks: {spec.name}")
                    own = tempfile.mkdtemp(prefix=spec.name, dir=home)
                    findings[spec.name] = await run_checks(for_checks(spec, own), cwd, own, log)
    report = render(settings, results, findings, peers, skipped)
    print(report)
    output = args.output or (None if args.smoke else OUTPUT)
    if output is not None:
        output.write_text(report + "\n")
        log(f"wrote {output}")
    if args.smoke:
        problems = incomplete(results, findings, not args.no_figures)
        for problem in problems:
            log(f"smoke: {problem}")
        return 1 if problems or not specs else 0
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(run(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
