"""The adapter benchmark's machinery (``python -m benchmarks.adapters``), on our agents only:
its smoke mode runs every figure and every defect check on a real ``acp-agent-kit --agent``
subprocess and writes nothing; the report's tables; the agent's CPU reading. Nothing here
is timed, and acpkit is never installed (``--smoke`` runs no peers)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import adapter_client
from benchmarks.adapter_checks import CHECKS, Finding
from benchmarks.adapters import OUTPUT, Figures, defect_table, figures_table, incomplete
from benchmarks.client import REPO_ROOT, TICKS, AgentSpec, agent_cpu, cpu_ticks

#: checks of defects our adapters still have, with the issue that fixes them: the row runs
#: (the smoke run fails on a check that cannot), its verdict is not asserted until then
OPEN = {"killed mid-turn, then loaded: the model lacks the killed prompt": "issue 34"}


@pytest.mark.timeout(600)
def test_smoke_runs_every_figure_and_check_on_our_adapter() -> None:
    before = OUTPUT.read_bytes() if OUTPUT.exists() else None
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.adapters", "--smoke", "--agent", "ours-pydantic-ai"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=580,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = done.stdout
    assert "| trivial turn: first chunk, ms | " in report
    assert "| two-tool turn: CPU time of the agent, ms | " in report
    # our agents remember: the one-session turns send the model more than a new session's
    sent = [row for row in report.splitlines() if "messages sent to the model" in row]
    assert sent[1].startswith("| two-tool turn: messages sent to the model (2 requests) | ")
    assert sent[1].split(" | ")[1] != sent[2].split(" | ")[1], sent
    for title, _ in CHECKS:
        row = next(line for line in report.splitlines() if line.startswith(f"| {title} |"))
        if title.startswith("start-up"):
            continue  # a busy machine may take seconds to import the framework
        if title in OPEN:
            continue
        assert row.endswith("| absent |"), row
    assert (OUTPUT.read_bytes() if OUTPUT.exists() else None) == before


def figures(name: str, **values: list[float]) -> Figures:
    out = Figures(AgentSpec(name, ["true"]))
    for key, series in values.items():
        for value in series:
            out.add(key, value)
    return out


def test_figures_table_gives_medians_p90_and_ratios_to_the_peer() -> None:
    ours = figures("ours-pydantic-ai", trivial_chunk=[0.010, 0.020, 0.030])
    theirs = figures("pydantic-acp", trivial_chunk=[0.020, 0.040, 0.060])
    row = next(
        line
        for line in figures_table([ours, theirs])
        if line.startswith("| trivial turn: first chunk")
    )
    assert row == "| trivial turn: first chunk, ms | 20.0 (30.0) | 40.0 (60.0) | 0.50 | - |"


def test_ours_is_divided_by_both_langchain_peers() -> None:
    ours = figures("ours-langgraph", tools_cpu=[0.030])
    forgets = figures("langchain-acp", tools_cpu=[0.020])
    remembers = figures("langchain-acp+memory", tools_cpu=[0.040])
    table = figures_table([ours, forgets, remembers])
    assert table[0].endswith(
        "| ours-langgraph ÷ langchain-acp | ours-langgraph ÷ langchain-acp+memory |"
    )
    row = next(line for line in table if line.startswith("| two-tool turn: CPU time"))
    assert row.endswith("| 30.0 (30.0) | 20.0 (20.0) | 40.0 (40.0) | 1.50 | 0.75 |")


#: a process that burns CPU in a thread, starts a child that burns more, then waits on stdin
BURNER = """
import subprocess, sys, threading
burn = "sum(range(10_000_000))"
code = "import sys; " + burn + "; print(flush=True); sys.stdin.read()"
child = subprocess.Popen([sys.executable, "-c", code], stdout=-1, stdin=-1)  # pipes
thread = threading.Thread(target=lambda: eval(burn))
thread.start()
thread.join()
child.stdout.readline()
print(child.pid, flush=True)
sys.stdin.read()
"""


def test_agent_cpu_counts_ended_threads_and_live_children() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as parent:
        assert parent.stdout is not None and parent.stdin is not None
        child = int(parent.stdout.readline())
        mine = time.clock_gettime((~parent.pid << 3) | 2)
        theirs = time.clock_gettime((~child << 3) | 2)
        total = agent_cpu(parent.pid)
        ticks = (cpu_ticks(parent.pid) + cpu_ticks(child)) / TICKS
        parent.stdin.close()  # then the child's stdin closes too: both end
    # the child's CPU is in it; it agrees with /proc's utime + stime (which count the ended
    # thread) to the tick
    assert total >= mine + theirs > 0
    assert abs(total - ticks) <= 3 / TICKS


def test_defect_table_and_what_a_smoke_run_misses() -> None:
    title = CHECKS[0][0]
    findings = {
        "ours": {title: Finding(False, "fine")},
        "theirs": {title: Finding(True, "Method not found")},
    }
    table = defect_table(findings)
    assert f"| {title} | absent | **present** |" in table
    assert incomplete([], {"ours": {title: Finding(None, "could not run")}}, False) == [
        f"ours: {title}: could not run"
    ]
    missing = incomplete([figures("ours-langgraph", init=[1.0])], {}, True)
    assert "ours-langgraph: no trivial_chunk" in missing


def test_an_agent_whose_modules_are_absent_is_left_out_with_a_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        adapter_client,
        "OURS",
        {
            "ours-here": adapter_client.Ours("json:loads", ("json",)),
            "ours-later": adapter_client.Ours("x:y", ("acp_agent.adapters.no_such_adapter",)),
        },
    )
    skipped: list[str] = []
    env = {"ACP_FAKE_BASE_URL": "http://127.0.0.1:9/v1"}
    specs = adapter_client.agent_specs(env, {}, None, skipped)
    assert [s.name for s in specs] == ["ours-here", "ours-llm"]
    absent = "acp_agent.adapters.no_such_adapter"
    assert skipped == [f"ours-later: skipped, {absent} is not installed or not written yet"]


def test_each_peer_gets_its_durable_store_in_the_checks_home() -> None:
    python = Path("/venv/bin/python")
    env = {"ACP_FAKE_BASE_URL": "http://127.0.0.1:9/v1"}
    peers = {"acpkit": python, "deepagents-acp": python}
    specs = {s.name: s for s in adapter_client.agent_specs(env, peers, None)}
    assert set(adapter_client.THEIRS) <= set(specs)
    deep = adapter_client.for_checks(specs["deepagents-acp"], "/home/x")
    assert deep.argv[-2:] == ["--sqlite", "/home/x/deepagents-acp/sessions.sqlite"]
    assert deep.env is not None and deep.env["HOME"] == "/home/x"
    acpkit = adapter_client.for_checks(specs["pydantic-acp"], "/home/x")
    assert acpkit.argv[-2:] == ["--file-store", "/home/x/acpkit-sessions"]
