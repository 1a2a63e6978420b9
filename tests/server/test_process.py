"""The stdio server as a real process over real pipes: framing, stdout purity, shutdown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import orjson
import pytest

from acp_agent._loop import uvloop_installed

ROOT = Path(__file__).resolve().parents[2]

AGENT = textwrap.dedent(
    """
    import logging, os, sys, warnings
    import anyio
    from acp_agent import Agent, run_agent

    class Noisy(Agent):
        async def prompt(self, turn):
            print("print() from a handler")
            logging.getLogger("noisy").warning("a log line")
            warnings.warn("a warning")
            os.system("echo from a child process")
            if turn.text == "sleep":
                await anyio.sleep(30)
            await turn.client.message(turn.text)
            return "end_turn"

    sys.exit(run_agent(Noisy(), store="memory", backend=sys.argv[1]))
    """
)


class Proc:
    def __init__(self, tmp_path: Path, backend: str) -> None:
        script = tmp_path / "agent.py"
        script.write_text(AGENT)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.p = subprocess.Popen(
            [sys.executable, str(script), backend],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert self.p.stdin is not None and self.p.stdout is not None
        self.stdin = self.p.stdin
        self.stdout = self.p.stdout
        self.lines: list[bytes] = []

    def send(self, obj: object) -> None:
        self.stdin.write(orjson.dumps(obj) + b"\n")
        self.stdin.flush()

    def recv(self) -> dict[str, object]:
        line = self.stdout.readline()
        assert line.endswith(b"\n"), line
        self.lines.append(line)
        msg = orjson.loads(line)
        assert isinstance(msg, dict)
        return msg

    def until(self, id: int) -> dict[str, object]:
        while True:
            msg = self.recv()
            if msg.get("id") == id and "method" not in msg:
                return msg

    def start_session(self) -> str:
        self.send(
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
        )
        assert self.until(0)["result"]["protocolVersion"] == 1  # type: ignore[index]
        self.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "session/new",
                "params": {"cwd": "/tmp", "mcpServers": []},
            }
        )
        return str(self.until(1)["result"]["sessionId"])  # type: ignore[index]

    def prompt(self, id: int, sid: str, text: str) -> None:
        self.send(
            {
                "jsonrpc": "2.0",
                "id": id,
                "method": "session/prompt",
                "params": {"sessionId": sid, "prompt": [{"type": "text", "text": text}]},
            }
        )

    def finish(self, timeout: float = 5.0) -> tuple[int, bytes, bytes]:
        rest, err = self.p.communicate(timeout=timeout)
        return self.p.returncode, rest, err


@pytest.fixture(params=["asyncio", "uvloop", "trio"])
def proc(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    if request.param == "uvloop" and not uvloop_installed():
        pytest.skip("uvloop is not installed")
    p = Proc(tmp_path, request.param)
    yield p
    if p.p.poll() is None:
        p.p.kill()
        p.p.wait()
    for stream in (p.p.stdin, p.p.stdout, p.p.stderr):
        if stream is not None:
            stream.close()


def _all_frames(lines: list[bytes], rest: bytes) -> None:
    for line in [*lines, *rest.splitlines(keepends=True)]:
        msg = orjson.loads(line)
        assert isinstance(msg, dict) and msg.get("jsonrpc") == "2.0", line


def test_noise_goes_to_stderr_and_eof_exits_zero(proc: Proc) -> None:
    sid = proc.start_session()
    proc.prompt(2, sid, "héllo 中文 😀")
    resp = proc.until(2)
    assert resp["result"] == {"stopReason": "end_turn"}

    start = time.monotonic()
    code, rest, err = proc.finish()
    assert code == 0
    assert time.monotonic() - start < 1.5
    _all_frames(proc.lines, rest)
    for noise in (b"print() from a handler", b"a log line", b"a warning", b"from a child process"):
        assert noise in err
    assert "😀".encode() in b"".join(proc.lines)


def test_eof_mid_turn_answers_and_exits(proc: Proc) -> None:
    sid = proc.start_session()
    proc.prompt(2, sid, "sleep")
    # The turn is running once its prompt's side effects reach stderr; EOF now.
    assert proc.p.stderr is not None
    while b"a log line" not in proc.p.stderr.readline():
        pass

    start = time.monotonic()
    code, rest, _ = proc.finish()
    assert code == 0
    assert time.monotonic() - start < 1.5
    _all_frames(proc.lines, rest)
    frames = [orjson.loads(x) for x in rest.splitlines()]
    answers = [f for f in frames if f.get("id") == 2]
    assert answers == [{"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "cancelled"}}]


def test_sigterm_exits_zero_with_clean_stdout(proc: Proc) -> None:
    proc.start_session()
    proc.p.send_signal(signal.SIGTERM)
    code, rest, _ = proc.finish()
    assert code == 0
    _all_frames(proc.lines, rest)
