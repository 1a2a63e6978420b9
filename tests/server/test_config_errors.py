"""Configuration errors are one line on stderr and exit 2, before anything is served;
a person who starts the server in a terminal is told what it waits for."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.fake_model import fake_model_url
from tests.helpers.wire_client import ROOT, child_env

INITIALIZE = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'
NO_KEYS = ("ACP_AGENT_API_KEY", "OPENAI_API_KEY", "ACP_AGENT_API_KEY_FILE", "OPENAI_BASE_URL")


def serve(
    *args: str,
    env: dict[str, str] | None = None,
    entry: Sequence[str] = ("-m", "acp_agent"),
    feed: str = INITIALIZE.decode(),
) -> subprocess.CompletedProcess[str]:
    environment = child_env()
    for name in NO_KEYS:
        environment.pop(name, None)
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, *entry, *args],
        input=feed,
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
    # `serve` (for people) refuses at once; over stdio (for an editor or an installer) the
    # agent starts and offers its login, which session/new asks for (-32000).
    refused(serve("--model", "gpt-4.1", "serve"), "no API key for api.openai.com")
    result = serve("--store", "memory", "--model", "gpt-4.1")
    assert result.returncode == 0, result.stderr
    assert '"authMethods":[{"id":"api-key"' in result.stdout


def test_model_on_a_local_endpoint_needs_no_key() -> None:
    result = serve(
        "--store", "memory", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--no-check"
    )
    assert result.returncode == 0, result.stderr
    assert '"protocolVersion":1' in result.stdout


def test_a_key_satisfies_a_hosted_endpoint() -> None:
    result = serve(
        "--store", "memory", "--model", "gpt-4.1", "--no-check", env={"ACP_AGENT_API_KEY": "sk-x"}
    )
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


# ----------------------------------------------------------------------- the first day


def run_cli(*args: str, **options: Any) -> subprocess.CompletedProcess[str]:
    """The command with an empty stdin (a chat reads no prompt; a server sees EOF)."""
    return serve(*args, feed="", **options)


def one_line(result: subprocess.CompletedProcess[str], *words: str) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0]
    return lines[0]


def hidden(module: str, *argv: str) -> tuple[str, ...]:
    """An entry point that runs the command as if ``module`` were not installed."""
    code = (
        f"import runpy, sys; sys.modules[{module!r}] = None; sys.argv[0] = 'acp-agent-kit'; "
        "runpy.run_module('acp_agent', run_name='__main__')"
    )
    return ("-c", code, *argv)


def test_serve_without_the_remote_extra() -> None:
    result = run_cli(entry=hidden("hypercorn", "serve"))
    one_line(result, "serve needs the remote extra", "[remote]")


def test_chat_url_without_the_remote_extra() -> None:
    result = run_cli(entry=hidden("httpx_ws", "chat", "--url", "ws://127.0.0.1:9/acp"))
    one_line(result, "--url ws://", "[remote]")


def test_chat_url_without_a_scheme() -> None:
    one_line(run_cli("chat", "--url", "127.0.0.1:8765"), "ws://127.0.0.1:8765")


@pytest.mark.parametrize("typo", ["memroy", "sessions", "mem"])
def test_a_store_name_that_is_neither_a_store_nor_a_path(typo: str, tmp_path: Path) -> None:
    refused(serve("--store", typo), "--store", "not a store name")
    assert not (ROOT / typo).exists()


@pytest.mark.parametrize("name", ["s.db", "s.sqlite3", "./plain"])
def test_bare_sqlite_names_and_paths_are_stores(tmp_path: Path, name: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "acp_agent", "--store", name],
        input=INITIALIZE.decode(),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=child_env({"PYTHONPATH": str(ROOT)}),
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert '"protocolVersion":1' in result.stdout


def test_options_after_the_subcommand() -> None:
    # A global option after `chat` is the same as before it; a typo there is refused too.
    one_line(run_cli("chat", "--store", "memroy"), "--store memroy", "not a store name")
    result = run_cli("chat", "--store", "memory", "--auto-reject")
    assert result.returncode == 0, result.stderr
    assert "connected to" in result.stdout


def test_chat_with_a_model_and_no_key_says_so() -> None:
    line = one_line(run_cli("--model", "gpt-4.1", "chat"), "no API key", "login")
    assert "not an ACP agent" not in line
    one_line(run_cli("chat", "--model", "gpt-4.1"), "no API key")


def test_token_file_without_url() -> None:
    one_line(run_cli("chat", "--token-file", "/etc/hostname"), "--token-file", "--url")


def test_token_file_readable_by_others(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("secret\n")
    token.chmod(0o644)
    line = one_line(
        run_cli("chat", "--url", "http://127.0.0.1:9/acp", "--token-file", str(token)),
        "readable by others",
        "chmod 600",
    )
    assert "secret" not in line


def test_serve_token_file_readable_by_others(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("alice alice-token-0123456789\n")
    tokens.chmod(0o640)
    line = one_line(
        run_cli("--store", "memory", "serve", "--token-file", str(tokens)),
        "others",
        "chmod 600",
    )
    assert "alice-token" not in line


def test_model_endpoint_that_does_not_answer() -> None:
    refused(
        serve("--store", "memory", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"),
        "http://127.0.0.1:9/v1",
        "does not answer",
        "--no-check",
    )
    chat = run_cli("--model", "m", "--base-url", "http://127.0.0.1:9/v1", "chat")
    one_line(chat, "does not answer")


@pytest.fixture
def model_url() -> Iterator[str]:
    with fake_model_url() as url:
        yield url


def test_model_the_endpoint_does_not_list(model_url: str) -> None:
    refused(
        serve("--store", "memory", "--model", "gpt-9", "--base-url", model_url),
        "has no model 'gpt-9'",
        "fake",
    )


def test_model_the_endpoint_lists_is_served(model_url: str) -> None:
    result = serve("--store", "memory", "--model", "fake", "--base-url", model_url)
    assert result.returncode == 0, result.stderr
    assert '"protocolVersion":1' in result.stdout


def test_no_check_skips_the_network_check() -> None:
    result = serve(
        "--store", "memory", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--no-check"
    )
    assert result.returncode == 0, result.stderr
    assert '"protocolVersion":1' in result.stdout


@pytest.mark.parametrize("command", [("chat", "-p", "hi"), ("demo",)])
def test_chat_and_demo_check_the_store_before_starting_the_server(
    command: tuple[str, ...],
) -> None:
    one_line(run_cli("--store", "/proc/nope/x.db", *command), "/proc/nope/x.db")
