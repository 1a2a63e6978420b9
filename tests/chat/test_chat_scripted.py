"""``acp-agent-kit chat`` and ``demo`` with a piped stdin: prompts line by line; questions
answered by flag, never read from stdin; programs that are not ACP agents."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.helpers.wire_client import ROOT, child_env

AGENT = ["--", sys.executable, "-m", "acp_agent", "--store", "memory"]


def cli(
    *args: str, lines: Sequence[str] = (), timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_agent", *args],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=child_env(),
        timeout=timeout,
        check=False,
    )


def chat(cwd: Path, lines: list[str], *flags: str) -> subprocess.CompletedProcess[str]:
    return cli("chat", "--cwd", str(cwd), *flags, *AGENT, lines=lines)


def test_piped_prompts(tmp_path: Path) -> None:
    (tmp_path / "seven.txt").write_text("1234567")
    result = chat(
        tmp_path,
        ["/echo scripted hello", "/read seven.txt", "/fail 7 broken", "/stderr", "/echo the end"],
    )
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert "scripted hello" in out
    assert "read 7 chars" in out
    assert "error 7: broken" in out
    assert "the end" in out
    assert out.count("[end_turn]") == 3


def test_piped_permission_questions_never_read_stdin(tmp_path: Path) -> None:
    # the line after the question is the next prompt, not its answer
    result = chat(tmp_path, ["/write no.txt rejected", "/echo y", "/echo next"])
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "no.txt").exists()
    assert "permission for write no.txt: Reject (stdin is not a terminal; --auto-approve" in out
    assert "> /echo y" in out and "> /echo next" in out
    assert out.count("[end_turn]") == 3


def test_auto_approve(tmp_path: Path) -> None:
    approved = chat(tmp_path, ["/write a.txt approved", "/run touch ran.txt"], "--auto-approve")
    assert approved.returncode == 0, approved.stderr
    assert (tmp_path / "a.txt").read_text() == "approved"
    assert "(automatic)" in approved.stdout
    assert (tmp_path / "ran.txt").exists()


def test_piped_terminal_commands_are_refused_unless_allowed(tmp_path: Path) -> None:
    refused = chat(tmp_path, ["/run touch no.txt", "/echo next"])
    assert refused.returncode == 0, refused.stderr
    assert not (tmp_path / "no.txt").exists()
    assert "not running sh -c 'touch no.txt' (stdin is not a terminal" in refused.stdout
    assert "next" in refused.stdout
    rejected = chat(tmp_path, ["/run touch no.txt"], "--auto-reject")
    assert "not running sh -c 'touch no.txt' (--auto-reject" in rejected.stdout
    assert not (tmp_path / "no.txt").exists()
    allowed = chat(tmp_path, ["/run touch yes.txt"], "--allow-terminals")
    assert allowed.returncode == 0, allowed.stderr
    assert (tmp_path / "yes.txt").exists()
    assert "exit 0" in allowed.stdout


def one_line_failure(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 1
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0]


def test_chat_with_a_program_that_exits() -> None:
    one_line_failure(cli("chat", "--", "false"), "false exited with code 1", "initialize")


def test_chat_with_a_program_that_echoes() -> None:
    one_line_failure(cli("chat", "--", "cat"), "cat did not answer as an ACP agent")


def test_chat_with_a_program_that_never_answers() -> None:
    result = cli("chat", "--init-timeout", "1.5", "--", "sleep", "100")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "waiting for sleep 100 to answer initialize (giving up after 1.5 s: --init-timeout)",
        "sleep 100 did not answer initialize within 1.5 s: is it an ACP agent?",
    ]


#: answers initialize and session/new, then exits with code 3 at the first prompt
DIES_IN_A_TURN = """
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("method") == "session/prompt":
        sys.exit(3)
    result = {"protocolVersion": 1} if msg["method"] == "initialize" else {"sessionId": "s"}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"""


def test_agent_that_exits_during_a_turn() -> None:
    result = cli("chat", "--", sys.executable, "-c", DIES_IN_A_TURN, lines=["hello"])
    assert result.returncode == 1
    assert "exited with code 3 during the turn" in result.stdout


def test_agent_that_cannot_start() -> None:
    result = cli("chat", "--", sys.executable, "-c", "import sys; print('boom', file=sys.stderr)")
    assert result.returncode == 1
    assert "exited with code 0 without answering initialize" in result.stdout
    assert "boom" in result.stdout  # its stderr is shown


def test_demo_with_a_program_that_is_not_an_agent() -> None:
    result = cli("demo", "--", "false")
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stderr == ""
    (failure,) = [line for line in result.stdout.splitlines() if line.startswith("✗")]
    assert "the agent exited with code 1; is it an ACP agent?" in failure
    echoed = cli("demo", "--", "cat")
    assert echoed.returncode == 1
    assert "did not answer as an ACP agent (initialize: -32601" in echoed.stdout


def test_options_before_chat_configure_its_agent(tmp_path: Path) -> None:
    store = tmp_path / "chat-store.db"
    result = cli("--store", str(store), "chat", "--cwd", str(tmp_path), lines=["/echo kept"])
    assert result.returncode == 0, result.stderr
    assert store.exists()  # the agent chat started was given --store


def test_options_before_chat_or_demo_with_an_agent_command_are_refused() -> None:
    for command in ("chat", "demo"):
        result = cli("--store", "memory", command, "--", "cat")
        assert result.returncode == 2
        assert result.stdout == ""
        assert result.stderr.count("\n") == 1
        assert "--store memory: options before" in result.stderr


def test_chat_help_shows_the_agent_command() -> None:
    result = cli("chat", "--help")
    assert result.returncode == 0
    assert "[-- AGENT_COMMAND...]" in result.stdout
    assert "--allow-terminals" in result.stdout and "--init-timeout" in result.stdout
