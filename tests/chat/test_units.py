"""Small pieces of the CLI and the chat client, without processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from acp_agent.chat.app import pick_option
from acp_agent.chat.command import split_command
from acp_agent.chat.workspace import Workspace
from acp_agent.cli_args import ENV, split_argv
from acp_agent.errors import InvalidParams, ResourceNotFound
from tests.helpers.wire_client import ROOT, child_env

OPTIONS = [
    {"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("1", "allow_once"),
        ("2", "reject_once"),
        ("y", "allow_once"),
        ("no", "reject_once"),
        ("Reject", "reject_once"),
        ("allow_once", "allow_once"),
        ("3", None),
        ("maybe", None),
    ],
)
def test_pick_option(answer: str, expected: str | None) -> None:
    chosen = pick_option(OPTIONS, answer)
    assert (chosen or {}).get("optionId") == expected


def test_split_argv() -> None:
    assert split_argv(["--store", "memory"]) == (["--store", "memory"], None, [])
    assert split_argv(["--log-level", "INFO", "chat", "--", "x", "demo"]) == (
        ["--log-level", "INFO"],
        "chat",
        ["--", "x", "demo"],
    )
    # A flag's value that happens to be a subcommand name is not the subcommand.
    assert split_argv(["--store", "demo"]) == (["--store", "demo"], None, [])
    assert split_argv(["conformance", "--list"]) == ([], "conformance", ["--list"])
    assert split_command(["--auto-approve", "--", "a", "--b"]) == (["--auto-approve"], ["a", "--b"])


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_agent", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=child_env(env),
        timeout=30,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_help_documents_every_flag_and_env_var() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    for variable in ENV.values():
        assert variable in result.stdout
    for word in ("chat", "demo", "conformance", "exit codes"):
        assert word in result.stdout


def test_usage_errors_exit_2() -> None:
    assert run_cli("--busy-policy", "never").returncode == 2
    bad_env = run_cli(env={"ACP_AGENT_BUSY_POLICY": "never"})
    assert bad_env.returncode == 2 and "ACP_AGENT_BUSY_POLICY" in bad_env.stderr
    assert run_cli("--turn-timeout", "-1").returncode == 2


def test_server_exits_0_on_eof_and_keeps_stdout_clean() -> None:
    result = run_cli("--store", "memory")
    assert result.returncode == 0
    assert result.stdout == ""


def test_serving_imports_nothing_heavy_before_the_first_request() -> None:
    # Editors spawn the server per session: what initialize does not need is imported
    # later (pydantic when a request needs it or the client goes quiet, SQLite at the
    # first session).
    heavy = ["rich", "acp_agent.chat", "pydantic", "sqlite3", "platformdirs", "jsonrpcserver"]
    code = (
        "import sys; sys.argv = ['acp-agent-kit']\n"
        "import acp_agent.cli, acp_agent.runner, acp_agent.reference\n"
        f"loaded = [m for m in {heavy!r} if m in sys.modules]\n"
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=child_env(), timeout=30)


@pytest.mark.anyio
async def test_workspace_confines_paths(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "in.txt").write_text("a\nb\nc\n")
    (tmp_path / "secret.txt").write_text("secret")
    os.symlink(tmp_path / "secret.txt", root / "link.txt")
    async with anyio.create_task_group() as tg:
        ws = Workspace(str(root), tg)
        assert (await ws.read_text_file({"path": str(root / "in.txt")}))["content"] == "a\nb\nc\n"
        partial = await ws.read_text_file({"path": str(root / "in.txt"), "line": 2, "limit": 1})
        assert partial["content"] == "b\n"
        for path in (str(tmp_path / "secret.txt"), str(root / "link.txt"), "in.txt"):
            with pytest.raises(InvalidParams):
                await ws.read_text_file({"path": path})
        with pytest.raises(InvalidParams):
            await ws.write_text_file({"path": str(tmp_path / "x.txt"), "content": "x"})
        with pytest.raises(ResourceNotFound):
            await ws.read_text_file({"path": str(root / "missing.txt")})
        with pytest.raises(InvalidParams):
            await ws.create_terminal({"command": "true", "cwd": str(tmp_path)})

        created = await ws.create_terminal(
            {"command": "sh", "args": ["-c", "printf 'héllo'; exit 4"], "outputByteLimit": 4}
        )
        params = {"terminalId": created["terminalId"]}
        assert await ws.wait_for_exit(params) == {"exitCode": 4, "signal": None}
        output = await ws.terminal_output_result(params)
        assert output["truncated"] is True and output["output"] == "llo"  # cut at a character
        await ws.release_terminal(params)
        with pytest.raises(ResourceNotFound):
            await ws.terminal_output_result(params)
