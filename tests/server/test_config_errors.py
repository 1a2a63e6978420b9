"""Configuration errors are one line on stderr and exit 2, before anything is served;
a person who starts the server in a terminal is told what it waits for."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.helpers.wire_client import ROOT, child_env

INITIALIZE = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'
NO_KEYS = ("ACP_AGENT_API_KEY", "OPENAI_API_KEY", "ACP_AGENT_API_KEY_FILE", "OPENAI_BASE_URL")


def serve(
    *args: str, env: dict[str, str] | None = None, entry: Sequence[str] = ("-m", "acp_agent")
) -> subprocess.CompletedProcess[str]:
    environment = child_env()
    for name in NO_KEYS:
        environment.pop(name, None)
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, *entry, *args],
        input=INITIALIZE.decode(),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=30,
        check=False,
    )


def refused(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""  # nothing was served: not even the initialize answer
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("acp-agent-kit: ")
    for word in words:
        assert word in lines[0]


def test_store_that_is_a_directory(tmp_path: Path) -> None:
    refused(serve("--store", str(tmp_path)), f"session store {tmp_path}: is a directory")


def test_store_under_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    refused(serve("--store", str(tmp_path / "file" / "s.db")), "is not a directory")


def test_store_that_is_not_sqlite(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("these are my notes\n")
    refused(serve("--store", str(tmp_path / "notes.txt")), "is not a SQLite database")
    assert (tmp_path / "notes.txt").read_text() == "these are my notes\n"


def test_store_from_the_environment_is_checked_too(tmp_path: Path) -> None:
    refused(serve(env={"ACP_AGENT_DB": str(tmp_path)}), str(tmp_path), "is a directory")


def test_usable_stores_are_served(tmp_path: Path) -> None:
    existing = tmp_path / "old.db"
    sqlite3.connect(existing).close()  # an empty file: SQLite's own start
    for store in (tmp_path / "new" / "dirs" / "s.db", existing):
        result = serve("--store", str(store))
        assert result.returncode == 0, result.stderr
        assert '"protocolVersion":1' in result.stdout


@pytest.mark.parametrize("where", ["dir", "missing/parent/a.log"])
def test_log_file_that_cannot_be_written(tmp_path: Path, where: str) -> None:
    path = tmp_path if where == "dir" else tmp_path / where
    refused(serve("--store", "memory", "--log-file", str(path)), "--log-file")


def test_model_without_a_key_for_a_hosted_endpoint() -> None:
    refused(serve("--store", "memory", "--model", "gpt-4.1"), "api.openai.com", "API key")
    routed = serve(
        "--store", "memory", "--model", "m", "--base-url", "https://openrouter.ai/api/v1"
    )
    refused(routed, "openrouter.ai")


def test_model_on_a_local_endpoint_needs_no_key() -> None:
    result = serve("--store", "memory", "--model", "m", "--base-url", "http://127.0.0.1:9/v1")
    assert result.returncode == 0, result.stderr
    assert '"protocolVersion":1' in result.stdout


def test_a_key_satisfies_a_hosted_endpoint() -> None:
    result = serve("--store", "memory", "--model", "gpt-4.1", env={"ACP_AGENT_API_KEY": "sk-x"})
    assert result.returncode == 0, result.stderr
    assert "sk-x" not in result.stderr


def test_piped_server_says_nothing_on_stderr() -> None:
    result = serve("--store", "memory")
    assert result.returncode == 0
    assert result.stderr == ""


def test_terminal_server_says_what_it_waits_for() -> None:
    pexpect = pytest.importorskip("pexpect")
    child = pexpect.spawn(
        sys.executable,
        ["-m", "acp_agent", "--store", "memory"],
        cwd=str(ROOT),
        env=child_env(),
        encoding="utf-8",
        timeout=15,
    )
    try:
        child.expect("waiting for a client")
        child.expect("run `acp-agent-kit chat`")
        child.sendeof()
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0
    finally:
        child.terminate(force=True)


def test_jsonrpcserver_dispatcher_without_the_package() -> None:
    # The package is an optional extra: hide it from the child as if it were not installed.
    hide = (
        "import runpy, sys; sys.modules['jsonrpcserver'] = None; "
        "runpy.run_module('acp_agent', run_name='__main__')"
    )
    result = serve("--store", "memory", "--dispatcher", "jsonrpcserver", entry=("-c", hide))
    refused(result, "--dispatcher jsonrpcserver", "not installed", "[jsonrpcserver]")


def test_jsonrpcserver_dispatcher_with_the_package_serves() -> None:
    result = serve("--store", "memory", "--dispatcher", "jsonrpcserver")
    assert result.returncode == 0, result.stderr
    assert '"protocolVersion":1' in result.stdout
