"""The adapter benchmark's machinery (``python -m benchmarks.adapters``), on our agents only:
its smoke mode runs every figure and every defect check on a real ``acp-agent-kit --agent``
subprocess and writes nothing; the report's tables. Nothing here is timed, and acpkit is
never installed (``--smoke`` runs no peers)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks.adapter_checks import CHECKS, Finding
from benchmarks.adapters import OUTPUT, Figures, defect_table, figures_table, incomplete
from benchmarks.client import REPO_ROOT, AgentSpec


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
    for title, _ in CHECKS:
        row = next(line for line in report.splitlines() if line.startswith(f"| {title} |"))
        if title.startswith("start-up"):
            continue  # a busy machine may take seconds to import the framework
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
