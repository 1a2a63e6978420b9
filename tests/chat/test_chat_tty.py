"""``acp-agent-kit chat`` driven through a pseudo-terminal, as a person would use it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers.wire_client import ROOT, child_env

pexpect = pytest.importorskip("pexpect")


def spawn_chat(cwd: Path) -> pexpect.spawn:
    env = child_env({"ACP_AGENT_DB": "memory", "TERM": "dumb"})
    child = pexpect.spawn(
        sys.executable,
        ["-m", "acp_agent", "chat", "--cwd", str(cwd)],
        cwd=str(ROOT),
        env=env,
        encoding="utf-8",
        timeout=15,
        dimensions=(40, 120),
    )
    child.expect("commands: /echo")
    child.expect("> ")
    return child


def finish(child: pexpect.spawn) -> int:
    child.expect(pexpect.EOF)
    child.close()
    return int(child.exitstatus)


def test_prompt_permission_and_ctrl_c(tmp_path: Path) -> None:
    child = spawn_chat(tmp_path)
    try:
        child.sendline("/echo hello from a tty")
        child.expect("hello from a tty\r\n")
        child.expect(r"\[end_turn\]")

        # Tab completes the agent's slash commands.
        child.expect("> ")
        child.send("/ec\t")
        child.sendline(" completed")
        child.expect("completed\r\n")
        child.expect(r"\[end_turn\]")

        # A permission question, answered by the person.
        child.sendline("/write note.txt written from the tty")
        child.expect("permission needed: write note.txt")
        child.expect("choose 1-2: ")
        child.sendline("1")
        child.expect("completed")
        child.expect(r"\[end_turn\]")
        assert (tmp_path / "note.txt").read_text() == "written from the tty"

        # Ctrl-C while a terminal command runs: the turn is cancelled, the chat goes on.
        child.sendline("/run sleep 30")
        child.expect("terminal term_1 attached")
        child.sendintr()
        child.expect(r"\[cancelled\]")
        child.sendline("/echo still alive")
        child.expect("still alive\r\n")
        child.expect(r"\[end_turn\]")
        child.expect("> ")
        child.sendeof()
        assert finish(child) == 0
    finally:
        child.terminate(force=True)


def test_two_ctrl_c_at_the_prompt_quit(tmp_path: Path) -> None:
    child = spawn_chat(tmp_path)
    try:
        child.sendintr()
        child.expect("press Ctrl-C again")
        child.sendintr()
        assert finish(child) == 0
    finally:
        child.terminate(force=True)
