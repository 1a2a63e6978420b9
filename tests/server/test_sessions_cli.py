"""``acp-agent-kit sessions`` driven as a person does: on SQLite and PostgreSQL, for each
agent's store, with failed turns, plurals, and a prune that asks first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from acp_agent.store.base import SessionRecord
from acp_agent.store.sqlite import SqliteSessionStore
from tests.helpers.wire_client import ROOT, child_env

OLD = "2020-01-01T00:00:00.000000Z"


def run(
    *args: str, lines: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_agent", *args],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=child_env(env or {}),
        timeout=60,
        check=False,
    )


def chat_session(store: str, *lines: str) -> str:
    """A session made by chat over `store`; its id."""
    result = run("--store", store, "chat", lines=lines)
    assert result.returncode == 0, result.stderr
    return next(
        line.split()[1] for line in result.stdout.splitlines() if line.startswith("session ")
    )


def test_show_marks_failed_turns_and_counts_right(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    session_id = chat_session(store, "/echo fine", "/fail 7 broken")
    shown = run("--store", store, "sessions", "show", session_id)
    assert shown.returncode == 0, shown.stderr
    turns = [line.split() for line in shown.stdout.splitlines() if line.startswith("  ")]
    assert [t[1] for t in turns] == ["end_turn", "failed"]
    assert "history:  2 turns" in shown.stdout
    assert "1 update" in shown.stdout and "1 updates" not in shown.stdout
    listed = run("sessions", "--store", store, "list")  # options after the subcommand too
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[-1].startswith("1 session, ")


def old_session(db: Path, session_id: str) -> None:
    async def make() -> None:
        async with await SqliteSessionStore.open(db) as store:
            await store.create(SessionRecord(session_id, cwd="/old"))

    anyio.run(make)
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (OLD, session_id))
    conn.close()


def test_prune_dry_run_and_confirmation(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    old_session(db, "sess_old")
    dry = run("--store", str(db), "sessions", "prune", "--older-than", "0", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "sess_old" in dry.stdout and "would prune 1 session not used for 0 days" in dry.stdout
    script = run("--store", str(db), "sessions", "prune", "--older-than", "0")
    assert script.returncode == 2
    assert len(script.stderr.splitlines()) == 1 and "--yes" in script.stderr
    assert "sess_old" in run("--store", str(db), "sessions", "list").stdout

    pexpect = pytest.importorskip("pexpect")
    for answer, kept in (("n", True), ("y", False)):
        child = pexpect.spawn(
            sys.executable,
            ["-m", "acp_agent", "--store", str(db), "sessions", "prune", "--older-than", "0"],
            cwd=str(ROOT),
            env=child_env(),
            encoding="utf-8",
            timeout=20,
        )
        try:
            child.expect(r"delete 1 session not used for 0 days\? \[y/N\]")
            child.sendline(answer)
            child.expect(pexpect.EOF)
        finally:
            child.terminate(force=True)
        assert ("sess_old" in run("--store", str(db), "sessions", "list").stdout) is kept


def test_every_agents_store_is_reachable(tmp_path: Path) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path), "ACP_AGENT_DB": ""}
    home = tmp_path / "acp-agent" / "sessions"
    old_session(home / "acp-agent.sqlite3", "sess_reference")
    old_session(home / "acp-agent-llm.sqlite3", "sess_llm")
    listed = run("sessions", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "sess_reference" in listed.stdout and "sess_llm" not in listed.stdout
    assert "`sessions --agent acp-agent-llm list`" in listed.stdout
    agents = run("sessions", "agents", env=env)
    assert [line.split()[0] for line in agents.stdout.splitlines()] == [
        "acp-agent",
        "acp-agent-llm",
    ]
    llm = run("sessions", "--agent", "acp-agent-llm", "list", env=env)
    assert "sess_llm" in llm.stdout


def test_sessions_on_postgresql(postgres_url: str) -> None:
    session_id = chat_session(postgres_url, "/echo kept in postgres")
    listed = run("--store", postgres_url, "sessions", "list")
    assert listed.returncode == 0, listed.stderr
    assert session_id in listed.stdout
    assert "1 session, " in listed.stdout
    shown = run("--store", postgres_url, "sessions", "show", session_id)
    assert "kept in postgres" in shown.stdout
    deleted = run("--store", postgres_url, "sessions", "delete", session_id)
    assert deleted.stdout == f"deleted {session_id}\n"
    assert session_id not in run("--store", postgres_url, "sessions", "list").stdout
