"""``acp-agent-kit login``/``logout`` and the terminal authentication method the
language-model agent advertises (what the ACP registry asks of an agent)."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.wire_client import ROOT, child_env

NO_KEYS = ("ACP_AGENT_API_KEY", "OPENAI_API_KEY", "ACP_AGENT_API_KEY_FILE", "OPENAI_BASE_URL")


def environment(config: Path) -> dict[str, str]:
    env = child_env({"XDG_CONFIG_HOME": str(config)})
    for name in NO_KEYS:
        env.pop(name, None)
    return env


def run(config: Path, *args: str, feed: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_agent", *args],
        input=feed,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment(config),
        timeout=30,
        check=False,
    )


def answers(config: Path, *messages: dict[str, Any]) -> list[dict[str, Any]]:
    """What the stdio language-model agent answers to ``messages`` (stdin is closed only
    once every request is answered: end of input would cancel what still runs)."""
    agent = subprocess.Popen(
        [sys.executable, "-m", "acp_agent", "--store", "memory", "--model", "gpt-4.1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**environment(config), "ACP_AGENT_NO_CHECK": "1"},
    )
    assert agent.stdin is not None and agent.stdout is not None
    found = []
    try:
        for message in messages:
            agent.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
            agent.stdin.flush()
            found.append(json.loads(agent.stdout.readline()))
    finally:
        agent.stdin.close()
        assert agent.wait(timeout=30) == 0
        agent.stdout.close()
        assert agent.stderr is not None
        agent.stderr.close()
    return found


INITIALIZE = {
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": 1, "clientCapabilities": {"auth": {"terminal": True}}},
}
NEW_SESSION = {"id": 2, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}}


def key_file(config: Path) -> Path:
    return config / "acp-agent" / "api-key"


def test_the_agent_advertises_a_terminal_login(tmp_path: Path) -> None:
    init, new = answers(tmp_path, INITIALIZE, NEW_SESSION)
    methods = {m["id"]: m for m in init["result"]["authMethods"]}
    assert methods["login"]["type"] == "terminal"
    assert methods["login"]["args"] == ["login"]
    assert "registry" not in json.dumps(methods)  # (plain ACP, no private extension)
    assert new["error"]["code"] == -32000  # auth_required until a key is given


def test_login_keeps_the_key_owner_only_and_the_agent_uses_it(tmp_path: Path) -> None:
    result = run(tmp_path, "login", feed="sk-kept\n")
    assert result.returncode == 0, result.stderr
    path = key_file(tmp_path)
    assert path.read_text() == "sk-kept\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert "sk-kept" not in result.stderr

    _, new = answers(tmp_path, INITIALIZE, NEW_SESSION)
    assert "sessionId" in new["result"]

    out = run(tmp_path, "logout")
    assert out.returncode == 0 and not path.exists()
    _, new = answers(tmp_path, INITIALIZE, NEW_SESSION)
    assert new["error"]["code"] == -32000


def test_a_kept_key_others_can_read_is_refused(tmp_path: Path) -> None:
    assert run(tmp_path, "login", feed="sk-kept\n").returncode == 0
    key_file(tmp_path).chmod(0o644)
    result = run(tmp_path, "--model", "gpt-4.1", "chat")
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1
    assert "readable by others" in result.stderr and "sk-kept" not in result.stderr


def test_login_in_a_terminal_does_not_echo_the_key(tmp_path: Path) -> None:
    pexpect = pytest.importorskip("pexpect")
    child = pexpect.spawn(
        sys.executable,
        ["-m", "acp_agent", "login"],
        cwd=str(ROOT),
        env=environment(tmp_path),
        encoding="utf-8",
        timeout=15,
    )
    try:
        child.expect("API key")
        child.sendline("sk-typed")
        child.expect("logged in")
        child.expect(pexpect.EOF)
        assert "sk-typed" not in (child.before or "")
        child.close()
        assert child.exitstatus == 0
    finally:
        child.terminate(force=True)
    assert key_file(tmp_path).read_text() == "sk-typed\n"


def test_login_with_nothing_typed_changes_nothing(tmp_path: Path) -> None:
    result = run(tmp_path, "login", feed="\n")
    assert result.returncode == 1
    assert not key_file(tmp_path).exists()
