"""What a person meets on the first day with ``acp-agent-kit chat``: each case drives the
real command (through a pseudo-terminal where a terminal matters)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.fake_model import fake_model_url
from tests.helpers.wire_client import ROOT, child_env

pexpect = pytest.importorskip("pexpect")


def cli(
    *args: str, lines: tuple[str, ...] = (), cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_agent", *args],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        cwd=cwd,
        env=child_env({"PYTHONPATH": str(ROOT)}),
        timeout=60,
        check=False,
    )


def spawn(*args: str, cwd: Path = ROOT) -> pexpect.spawn:
    return pexpect.spawn(
        sys.executable,
        ["-m", "acp_agent", *args],
        cwd=str(cwd),
        env=child_env({"TERM": "dumb", "PYTHONPATH": str(ROOT)}),
        encoding="utf-8",
        timeout=20,
        dimensions=(40, 200),
    )


@pytest.fixture
def model_url() -> Iterator[str]:
    with fake_model_url() as url:
        yield url


# ----------------------------------------------------------------------- one-shot


def test_one_shot_prints_the_answer_on_stdout() -> None:
    result = cli("--store", "memory", "chat", "-p", "/echo just this")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "just this\n"
    assert "connected to" in result.stderr


def test_one_shot_as_json() -> None:
    result = cli("chat", "--store", "memory", "-p", "/echo as json", "--format", "json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["stopReason"] == "end_turn"
    assert document["text"] == "as json"
    assert document["sessionId"]
    assert any(u["sessionUpdate"] == "agent_message_chunk" for u in document["updates"])


def test_one_shot_that_fails_exits_non_zero() -> None:
    result = cli("chat", "--store", "memory", "-p", "/fail 7 broken")
    assert result.returncode == 1
    assert "error 7: broken" in result.stderr


# ----------------------------------------------------------------------- sessions


def test_resume_and_load_a_stored_session(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    first = cli("--store", store, "chat", lines=("/echo remember me",))
    assert first.returncode == 0, first.stderr
    session_id = next(
        line.split()[1] for line in first.stdout.splitlines() if line.startswith("session ")
    )
    loaded = cli("--store", store, "chat", "--load", session_id, lines=("/echo again",))
    assert loaded.returncode == 0, loaded.stderr
    assert "remember me" in loaded.stdout  # the history, replayed
    assert "again" in loaded.stdout
    resumed = cli("chat", "--store", store, "--resume", session_id, "-p", "/echo resumed")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == "resumed\n"
    again = cli("chat", "--store", store, "--load", session_id, "-p", "/echo only this")
    assert again.stdout == "only this\n"  # the replayed history is not the answer
    missing = cli("--store", store, "chat", "--resume", "no-such-session")
    assert missing.returncode == 1
    assert "did not open the session" in missing.stdout


# ----------------------------------------------------------------------- programs


def test_a_program_that_writes_lines_is_judged_quickly() -> None:
    result = cli("chat", "--", "ls", "-la", "/usr/bin")
    assert result.returncode == 1
    assert "not an ACP agent" in result.stdout
    assert result.stderr.count("invalid frame") <= 5


def test_init_timeout_is_the_time_it_takes() -> None:
    started = time.monotonic()
    result = cli("chat", "--init-timeout", "1", "--", "sleep", "100")
    assert result.returncode == 1
    assert "did not answer initialize within 1 s" in result.stdout
    assert time.monotonic() - started < 3.5  # was 5 s: a 3 s grace on top


# ----------------------------------------------------------------------- a turn


def test_a_declined_run_fails_its_tool_call_and_ends_the_turn(tmp_path: Path) -> None:
    result = cli("chat", "--store", "memory", "--cwd", str(tmp_path), lines=("/run echo hi",))
    assert result.returncode == 0, result.stderr
    assert "-32603" not in result.stdout
    assert "✗ run echo hi failed" in result.stdout
    assert "[end_turn]" in result.stdout


def test_terminal_output_is_shown_while_the_command_runs(tmp_path: Path) -> None:
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    child = spawn("--store", "memory", "chat", "--allow-terminals", "--cwd", str(tmp_path))
    try:
        child.expect("> ")
        child.sendline(f"/run echo first; cat {fifo}; echo last")
        child.expect("│ first")  # while the command still waits on the fifo
        with open(fifo, "w") as gate:
            gate.write("middle\n")
        child.expect("│ middle")
        child.expect("│ last")
        child.expect(r"\[end_turn\]")
    finally:
        child.terminate(force=True)


def test_ctrl_c_shows_little_of_the_cancelled_stream_and_a_second_quits() -> None:
    child = spawn("--store", "memory", "chat")
    try:
        child.expect("> ")
        child.sendline("/stream 400000 100")
        child.expect("xxxxxxxxxx")
        child.sendintr()
        child.expect("cancelling the turn")
        child.expect(r"\[cancelled\]", timeout=60)
        assert len(child.before) < 2000  # was tens of kB: the turn kept streaming
        child.expect("> ")
        child.sendintr()  # the cancel is done: a second Ctrl-C quits
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0
    finally:
        child.terminate(force=True)


# ----------------------------------------------------------------------- the LLM agent


def test_model_agent_banner_mode_and_model(model_url: str, tmp_path: Path) -> None:
    result = cli(
        "--model",
        "fake",
        "--base-url",
        model_url,
        "--store",
        "memory",
        "chat",
        "--cwd",
        str(tmp_path),
        lines=("/mode", "/model", "/model fake-large", "/model"),
    )
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert "/help" not in out  # the agent has no commands: none is promised
    assert "mode: None" not in out and "this agent has no modes" in out
    assert f"model: fake (the model answering in this session, at {model_url})" in out
    assert "model: fake (available: *fake, fake-large)" in out
    assert "model: fake-large (available: fake, *fake-large)" in out


def test_a_command_is_approved_once(model_url: str, tmp_path: Path) -> None:
    child = spawn(
        "--model",
        "fake",
        "--base-url",
        model_url,
        "--store",
        "memory",
        "chat",
        "--cwd",
        str(tmp_path),
    )
    try:
        child.expect("> ")
        child.sendline("fake:run echo approved-once")
        child.expect("permission needed")
        child.expect("choose 1-")
        child.sendline("y")
        index = child.expect([r"run it\? \[y/N\]", r"\[end_turn\]"], timeout=30)
        assert index == 1, "chat asked again after the agent's permission question"
        assert "approved-once" in child.before
    finally:
        child.terminate(force=True)


def test_retries_are_notices_not_thoughts(model_url: str, tmp_path: Path) -> None:
    result = cli(
        "--model",
        "fake",
        "--base-url",
        model_url,
        "--store",
        "memory",
        "chat",
        "--cwd",
        str(tmp_path),
        lines=("fake:rate-limit",),
    )
    assert result.returncode == 0, result.stderr
    assert "warning:" in result.stdout
    assert "thinking:" not in result.stdout


# ----------------------------------------------------------------------- your own agent


def test_run_agent_in_a_terminal_says_what_it_waits_for() -> None:
    code = (
        "from acp_agent.runner import run_agent; from acp_agent.reference import ReferenceAgent; "
        "run_agent(ReferenceAgent(), store='memory')"
    )
    child = pexpect.spawn(
        sys.executable, ["-c", code], cwd=str(ROOT), env=child_env(), encoding="utf-8", timeout=15
    )
    try:
        child.expect("waiting for a client")
        child.expect("acp-agent-kit chat -- ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.terminate(force=True)


def test_multi_line_tool_output_is_indented_on_every_line() -> None:
    import io

    from rich.console import Console

    from acp_agent.chat.render import Renderer

    out = io.StringIO()
    renderer = Renderer(Console(file=out, width=100, color_system=None))
    renderer.update(
        "s",
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "c1",
            "status": "failed",
            "content": [{"type": "content", "content": {"type": "text", "text": "one\ntwo"}}],
        },
    )
    assert "\n  one\n  two\n" in out.getvalue()


# ----------------------------------------------------------------------- a remote agent


def test_a_remote_agent_that_stops_during_a_turn_is_one_line() -> None:
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "acp_agent",
            "--store",
            "memory",
            "serve",
            "--listen",
            "127.0.0.1:0",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=child_env(),
    )
    assert server.stderr is not None
    try:
        line = server.stderr.readline()
        while "serving http://" not in line:
            assert line, "the server did not start"
            line = server.stderr.readline()
        url = "ws://" + line.split("serving http://", 1)[1].split()[0].removeprefix("ws://")
        child = spawn("chat", "--url", url)
        try:
            child.expect("> ")
            child.sendline("/sleep 60000")
            child.expect("working")
            server.kill()  # the server goes away in the middle of the turn
            child.expect(pexpect.EOF)
            output = child.before
            child.close()
        finally:
            child.terminate(force=True)
    finally:
        server.kill()
        server.wait()
        server.stderr.close()
    assert child.exitstatus == 1
    errors = [x for x in output.splitlines() if url in x]  # (output: since "working")
    assert len(errors) == 1, output
    assert "Traceback" not in output and "ExceptionGroup" not in output
    assert "wrote nothing to stderr" not in output


def test_an_agent_that_asks_to_log_in_says_how(tmp_path: Path) -> None:
    agent = [sys.executable, "-m", "acp_agent", "--store", "memory", "--model", "gpt-4.1"]
    env = {"XDG_CONFIG_HOME": str(tmp_path), "ACP_AGENT_NO_CHECK": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "acp_agent", "chat", "--", *agent],
        input="",
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in child_env(env).items() if not k.endswith("API_KEY")},
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "did not open the session" in result.stdout
    assert "to log in: Log in with an API key (run the agent with: login)" in result.stdout


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("--url", "http://127.0.0.1:1/acp"),
            "acp-agent-kit chat: cannot connect to http://127.0.0.1:1/acp: ",
        ),
        (
            ("--url", "ws://127.0.0.1:1/acp"),
            "acp-agent-kit chat: cannot connect to ws://127.0.0.1:1/acp: ",
        ),
        (("--", "/nonexistent/agent"), "acp-agent-kit chat: cannot start '/nonexistent/agent': "),
    ],
)
def test_an_agent_that_cannot_be_reached_is_one_line_naming_it_once(
    args: tuple[str, ...], line: str
) -> None:
    done = cli("chat", *args)
    assert done.returncode == 1, done
    assert done.stdout == ""
    assert done.stderr.startswith(line) and done.stderr.count("\n") == 1, done.stderr
    named = args[-1]
    assert done.stderr.count(named) == 1, done.stderr
