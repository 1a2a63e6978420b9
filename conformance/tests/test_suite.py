"""The conformance suite against hand-written fixture agents: every key check can fail, and the
correct fixture passes them all. The suite is driven through `acp_agent_conformance.cli.main`
(this folder, as installed), in-process, with `--only` selecting the checks a breakage should
trip."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from acp_agent_conformance.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
BROKEN = [sys.executable, str(FIXTURES / "broken_agent.py")]
MINIMAL = [sys.executable, str(FIXTURES / "minimal_agent.py")]


def run_suite(tmp_path: Path, agent: list[str], *args: str) -> tuple[int, dict[str, Any]]:
    report = tmp_path / "report.json"
    code = main(
        [
            "--json",
            str(report),
            "--quiet",
            "0.3",
            "--timeout",
            "3",
            "--close-grace",
            "0.5",
            *args,
            "--",
            *agent,
        ]
    )
    return code, json.loads(report.read_text())


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {r["id"]: r["status"] for r in report["results"]}


# breakage -> (checks to run, check that must FAIL)
CASES = {
    "version-echo": ("R-INIT-3", "R-INIT-3"),
    "answer-notifications": ("R-RPC-4", "R-RPC-4"),
    "banner": ("R-TRANS-3", "R-TRANS-3"),
    "bye": ("R-TRANS-3", "R-TRANS-3.eof"),
    "cancel-end-turn": ("R-CANCEL-3", "R-CANCEL-3"),
    "late-updates": ("R-TURN-4", "R-TURN-4"),
    "early-commands": ("R-NEW-9", "R-NEW-9"),
    "mode-id": ("R-MODE-3,R-TURN-3", "R-MODE-3"),
    "crash-malformed": ("R-RPC-10", "R-RPC-10"),
    "no-exit-eof": ("R-TRANS-5", "R-TRANS-5"),
    "id-string": ("R-RPC-2", "R-RPC-2"),
    "null-id-notification": ("R-RPC-5", "R-RPC-5"),
    "fs-without-cap": ("R-FS-1", "R-FS-1"),
    "terminal-without-cap": ("R-TERM-1", "R-TERM-1"),
    "stop-error": ("R-TURN-1,R-TURN-2", "R-TURN-2"),
    "tool-cancelled": ("R-TOOL-2", "R-TOOL-2"),
    "plan-partial": ("R-PLAN-2", "R-PLAN-2"),
    "write-on-reject": ("R-PERM-3", "R-PERM-3.reject"),
    "no-release": ("R-TERM-3", "R-TERM-3"),
    "boolean-option": ("R-CFG-4", "R-CFG-4"),
    "extra-root-key": ("R-EXT-3", "R-EXT-3"),
    "load-late": ("R-LOAD-4", "R-LOAD-4"),
    "pretty": ("R-TRANS-2", "R-TRANS-2"),
    "batch-crash": ("R-TRANS-8", "R-TRANS-8.batch"),
    "require-mcp": ("R-NEW-4", "R-NEW-4"),
    # ACP 1.25
    "notice-without-cap": ("R-NOTICE", "R-NOTICE-1"),
    "notice-replayed": ("R-NOTICE", "R-NOTICE-2"),
    "compaction-without-cap": ("R-COMPACT", "R-COMPACT-1"),
    "compaction-to-all": ("R-COMPACT", "R-COMPACT-2"),
    "tool-name-number": ("R-TOOL-NAME", "R-TOOL-NAME"),
    "logout-missing": ("R-AUTH-8", "R-AUTH-8"),
    "logout-keeps-auth": ("R-AUTH-8", "R-AUTH-8"),
    "strict-version": ("R-INIT-LENIENT", "R-INIT-LENIENT"),
    "lax-version": ("R-INIT-STRICT", "R-INIT-STRICT"),
    "no-legacy-terminal-auth": ("R-AUTH-LEGACY", "R-AUTH-LEGACY"),
}
# the same, for the unstable features of a fixture run with --unstable
UNSTABLE_CASES = {
    "fork-empty": ("R-FORK", "R-FORK"),
    "title-not-listed": ("R-TITLE", "R-TITLE"),
    "usage-inconsistent": ("R-USAGE", "R-USAGE"),
}
UNSTABLE_CHECKS = ("R-FORK", "R-TITLE", "R-USAGE", "R-EXT-3")


@pytest.mark.parametrize("breakage", sorted(CASES) + sorted(UNSTABLE_CASES))
def test_breakage_is_caught(breakage: str, tmp_path: Path) -> None:
    flags = ["--unstable"] if breakage in UNSTABLE_CASES else []
    only, must_fail = {**CASES, **UNSTABLE_CASES}[breakage]
    code, report = run_suite(tmp_path, [*BROKEN, *flags, "--break", breakage], "--only", only)
    got = statuses(report)
    assert got.get(must_fail) == "FAIL", got
    failed = next(r for r in report["results"] if r["id"] == must_fail)
    if failed["tier"] in ("MUST", "CAPABILITY"):
        assert code == 1 and report["verdict"] == "NOT CONFORMANT"
    assert failed["processes"], "a failure carries its wire transcript"
    assert all("transcript" in p and "stderr_tail" in p for p in failed["processes"])


def test_correct_fixture_passes(tmp_path: Path) -> None:
    groups = sorted({c[0] for c in CASES.values()})
    code, report = run_suite(tmp_path, MINIMAL, *[a for g in groups for a in ("--only", g)])
    bad = [r for r in report["results"] if r["status"] == "FAIL"]
    assert not bad, bad
    assert {c[1] for c in CASES.values()} <= {r["id"] for r in report["results"]}
    assert code == 0
    assert report["verdict"] == "CONFORMANT"


def test_unstable_features_are_judged_only_when_advertised(tmp_path: Path) -> None:
    only = [a for c in UNSTABLE_CHECKS for a in ("--only", c)]
    code, report = run_suite(tmp_path, [*MINIMAL, "--unstable"], *only)
    got = statuses(report)
    assert {got[c] for c in UNSTABLE_CHECKS} == {"PASS"}, report["results"]
    assert code == 0 and report["verdict"] == "CONFORMANT"
    code, report = run_suite(tmp_path, MINIMAL, *only)
    got = statuses(report)
    assert [got[c] for c in UNSTABLE_CHECKS] == ["SKIP", "SKIP", "SKIP", "PASS"]
    assert code == 0


def test_require_exercised_turns_must_skips_into_failure(tmp_path: Path) -> None:
    agent = [sys.executable, "-c", _NO_COMMANDS_AGENT]
    code, report = run_suite(tmp_path, agent, "--only", "R-CANCEL-3")
    assert statuses(report)["R-CANCEL-3"] == "SKIP"
    assert "no way to keep the agent busy" in report["results"][0]["reason"]
    assert code == 0
    code, report = run_suite(tmp_path, agent, "--only", "R-CANCEL-3", "--require-exercised")
    assert code == 1 and report["verdict"] == "NOT CONFORMANT"


# An agent that advertises no commands: the suite has no way to keep it busy.
_NO_COMMANDS_AGENT = f"""
import os, sys, asyncio
sys.path.insert(0, {str(FIXTURES)!r})
import broken_agent
broken_agent.COMMANDS[:] = []
broken_agent.BROKEN.clear()
asyncio.run(broken_agent.main())
"""
