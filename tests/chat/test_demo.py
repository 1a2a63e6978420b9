"""``acp-agent-kit demo`` runs the real server through every step and exits 0."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.wire_client import ROOT, child_env


def demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_agent", "demo", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=child_env(),
        timeout=60,
        check=False,
    )


def test_demo_passes() -> None:
    result = demo()
    assert result.returncode == 0, result.stdout + result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("demo: ") and last.endswith("steps passed")
    passed, total = last.removeprefix("demo: ").split()[0].split("/")
    assert passed == total


def test_demo_fails_against_a_broken_agent() -> None:
    # An agent that answers nothing it should: the demo reports it and exits 1.
    broken = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    result = demo("--step-timeout", "1", "--", *broken)
    assert result.returncode == 1
