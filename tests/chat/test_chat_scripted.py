"""``acp-agent-kit chat`` with a piped stdin: prompts and permission answers line by line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.wire_client import ROOT, child_env

AGENT = ["--", sys.executable, "-m", "acp_agent", "--store", "memory"]


def chat(cwd: Path, lines: list[str], *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_agent", "chat", "--cwd", str(cwd), *flags, *AGENT],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=child_env(),
        timeout=30,
        check=False,
    )


def test_piped_prompts_and_answers(tmp_path: Path) -> None:
    result = chat(
        tmp_path,
        [
            "/echo scripted hello",
            "/write yes.txt allowed",
            "y",
            "/write no.txt rejected",
            "2",
            "/read yes.txt",
            "/fail 7 broken",
            "/stderr",
            "/echo the end",
        ],
    )
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert "scripted hello" in out
    assert (tmp_path / "yes.txt").read_text() == "allowed"
    assert not (tmp_path / "no.txt").exists()
    assert "read 7 chars" in out
    assert "error 7: broken" in out
    assert "the end" in out
    assert out.count("[end_turn]") == 5


def test_auto_approve(tmp_path: Path) -> None:
    approved = chat(tmp_path, ["/write a.txt approved"], "--auto-approve")
    assert approved.returncode == 0, approved.stderr
    assert (tmp_path / "a.txt").read_text() == "approved"
    assert "(automatic)" in approved.stdout


def test_agent_that_cannot_start(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "acp_agent",
            "chat",
            "--",
            sys.executable,
            "-c",
            "import sys; sys.exit(3)",
        ],
        input="",
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=child_env(),
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
