"""``acp-agent-kit chat`` driven through a pseudo-terminal, as a person would use it."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers.wire_client import ROOT, child_env

pexpect = pytest.importorskip("pexpect")


def spawn(cwd: Path, *args: str) -> pexpect.spawn:
    env = child_env({"ACP_AGENT_DB": "memory", "TERM": "dumb"})
    return pexpect.spawn(
        sys.executable,
        ["-m", "acp_agent", "chat", "--cwd", str(cwd), *args],
        cwd=str(ROOT),
        env=env,
        encoding="utf-8",
        timeout=15,
        dimensions=(40, 120),
    )


def spawn_chat(cwd: Path, *args: str) -> pexpect.spawn:
    child = spawn(cwd, *args)
    child.expect("commands: /echo")
    child.expect("> ")
    return child


@contextmanager
def running(child: pexpect.spawn) -> Iterator[pexpect.spawn]:
    """``child`` for the ``with`` block; killed on the way out, whatever happened."""
    try:
        yield child
    finally:
        child.terminate(force=True)


def finish(child: pexpect.spawn) -> int:
    child.expect(pexpect.EOF)
    child.close()
    return int(child.exitstatus)


def test_prompt_permission_and_ctrl_c(tmp_path: Path) -> None:
    with running(spawn_chat(tmp_path)) as child:
        child.sendline("/echo hello from a tty")
        child.expect("hello from a tty\r\n")
        child.expect(r"\[end_turn\]")

        # A permission question, answered by the person.
        child.expect("> ")
        child.sendline("/write note.txt written from the tty")
        child.expect("permission needed: write note.txt")
        child.expect("choose 1-2: ")
        child.sendline("1")
        child.expect("completed")
        child.expect(r"\[end_turn\]")
        assert (tmp_path / "note.txt").read_text() == "written from the tty"

        # Ctrl-C while a terminal command runs: the turn is cancelled, the chat goes on.
        child.expect("> ")
        child.sendline("/run sleep 30")
        child.expect(r"run it\? \[y/N\]: ")
        child.sendline("y")
        child.expect("terminal term_1 attached")
        child.sendintr()
        child.expect(r"\[cancelled\]")
        child.sendline("/echo still alive")
        child.expect("still alive\r\n")
        child.expect(r"\[end_turn\]")
        child.expect("> ")
        child.sendeof()
        assert finish(child) == 0


def test_two_ctrl_c_at_the_prompt_quit(tmp_path: Path) -> None:
    with running(spawn_chat(tmp_path)) as child:
        child.sendintr()
        child.expect(r"\(press Ctrl-C again")
        assert child.before == "\r\n"  # the "> " prompt's line ends first
        child.sendintr()
        assert finish(child) == 0


def test_ctrl_d_leaves_the_shell_prompt_on_a_new_line(tmp_path: Path) -> None:
    with running(spawn_chat(tmp_path)) as child:
        child.sendeof()
        assert finish(child) == 0
        assert child.before == "\r\n"  # everything after the "> " prompt


def test_tab_completion_adds_the_space(tmp_path: Path) -> None:
    with running(spawn_chat(tmp_path)) as child:
        child.send("/ec\t")
        child.sendline("completed")
        child.expect("/echo completed\r\n")
        child.expect("\x1b\\[Kcompleted\r\n")  # the text echoed, after the status line
        child.expect(r"\[end_turn\]")


def test_chat_commands_listed_at_start_and_on_help(tmp_path: Path) -> None:
    with running(spawn(tmp_path)) as child:
        child.expect(r"chat commands: /\?, /mode, /model, /stderr, /quit")
        child.expect("> ")
        child.sendline("/?")
        child.expect(r"/\?\s+list the chat's own commands and keys")
        child.expect(r"/stderr\s+show the agent's stderr")
        child.expect("Ctrl-D quits")


def test_a_running_turn_shows_that_it_runs(tmp_path: Path) -> None:
    with running(spawn_chat(tmp_path)) as child:
        child.sendline("/sleep 1500")
        child.expect("working 0 s")
        child.expect("working 1 s")
        child.expect("\r\x1b\\[Kslept 1500")  # the status line is erased first
        child.expect(r"\[end_turn\]")


def test_ctrl_c_at_a_permission_question_ends_its_line(tmp_path: Path) -> None:
    with running(spawn_chat(tmp_path)) as child:
        child.sendline("/write note.txt never")
        child.expect("choose 1-2: ")
        child.sendintr()
        child.expect("\r\ncancelling the turn")
        assert child.before == ""  # nothing between the question and its line's end
        child.expect(r"\[cancelled\]")
        child.expect("> ")  # the prompt is shown again
        child.sendline("/echo after")
        child.expect("after\r\n")
        child.expect(r"\[end_turn\]")
        assert not (tmp_path / "note.txt").exists()


def test_a_plan_update_redraws_the_plan(tmp_path: Path) -> None:
    with running(spawn_chat(tmp_path)) as child:
        child.sendline("/plan 3")
        child.expect(r"\[end_turn\]")
        shown = child.before
        # four plans of four lines: the last three each move up over the one before
        assert shown.count("\x1b[4F\x1b[J") == 3
        assert shown.count("plan\r\n") == 4
        assert shown.rstrip().endswith("[x] step 3")


def test_a_write_over_an_existing_file_is_a_replacement(tmp_path: Path) -> None:
    (tmp_path / "note.txt").write_text("the old line\n")
    with running(spawn_chat(tmp_path)) as child:
        child.sendline("/write note.txt the new line")
        child.expect(f"replace: {tmp_path}/note.txt")
        child.expect("-the old line")
        child.expect(r"\+the new line")
        child.expect("choose 1-2: ")
        assert "new file" not in child.before
        child.sendline("1")
        child.expect(r"\[end_turn\]")
        assert (tmp_path / "note.txt").read_text() == "the new line"


def test_terminal_commands_are_asked_first(tmp_path: Path) -> None:
    with running(spawn_chat(tmp_path)) as child:
        child.sendline("/run touch refused.txt")
        child.expect("the agent wants to run: sh -c 'touch refused.txt'")
        child.expect(r"run it\? \[y/N\]: ")
        child.sendline("n")
        child.expect(r"\[end_turn\]|error")
        assert not (tmp_path / "refused.txt").exists()
    with running(spawn_chat(tmp_path, "--allow-terminals")) as allowed:
        allowed.sendline("/run touch allowed.txt")
        allowed.expect("exit 0")
        assert "wants to run" not in allowed.before
        assert (tmp_path / "allowed.txt").exists()


def _group(pgid: int) -> list[int]:
    """Live processes of process group ``pgid`` (zombies left out)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as fh:
            found += [int(p) for p in fh.read().split()]
    return found


def test_sigterm_stops_the_agents_process_group(tmp_path: Path) -> None:
    # an "agent" that never answers, ignores end of input and has a child in its group
    agent = ["--init-timeout", "60", "--", "sh", "-c", "sleep 300 & sleep 300; wait"]
    with running(spawn(tmp_path, *agent)) as child:
        child.expect("waiting for sh -c")
        (agent_pid,) = _children(child.pid)
        assert len(_group(agent_pid)) == 3  # sh and its two sleeps
        child.kill(signal.SIGTERM)
        child.expect(pexpect.EOF)
        child.close()
        assert _group(agent_pid) == []
