"""The session store on a person's machine: one default file per agent, private files,
and `acp-agent-kit sessions` to see and manage it."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import orjson
import pytest

from acp_agent import Agent
from acp_agent.cli import configure_logging
from acp_agent.reference import ReferenceAgent
from acp_agent.runner import store_name
from acp_agent.sessions_cli import file_size
from acp_agent.sessions_cli import main as sessions_main
from acp_agent.store import (
    DEFAULT_OWNER,
    SessionRecord,
    SqliteSessionStore,
    TurnWrite,
    default_db_path,
)
from tests.helpers.wire_client import FULL_CAPS, child_env, spawn

REPO = Path(__file__).resolve().parents[2]


def item(text: str) -> str:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    return orjson.dumps(update).decode()


def fill(db: Path, sessions: dict[str, tuple[str, int]]) -> None:
    """Sessions id -> (updated_at, bytes of history text in one turn)."""

    async def run() -> None:
        async with await SqliteSessionStore.open(db) as store:
            for sid, (_, size) in sessions.items():
                await store.create(SessionRecord(sid, cwd=f"/work/{sid}"))
                text = "x" * max(0, size - len(item("")))
                await store.write_turn(TurnWrite(sid, "t", begin=[item(text)], end="end_turn"))

    anyio.run(run)
    # the turns bumped updated_at: set the times this test wants
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        for sid, (updated_at, _) in sessions.items():
            conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (updated_at, sid))


# --- one default store per agent ---------------------------------------------------------------


class Shouty(Agent):
    name = "shouty"


class Unnamed(Agent):
    pass


def test_each_agent_has_its_own_default_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("ACP_AGENT_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert store_name(ReferenceAgent()) == "acp-agent"
    assert store_name(Shouty()) == "shouty"
    assert store_name(Unnamed()) == "Unnamed"
    home = tmp_path / "acp-agent" / "sessions"
    assert default_db_path() == home / "acp-agent.sqlite3"
    assert default_db_path("shouty") == home / "shouty.sqlite3"
    assert default_db_path("../a b/..") == home / "a-b.sqlite3"
    monkeypatch.setenv("ACP_AGENT_DB", str(tmp_path / "chosen.db"))
    assert default_db_path("shouty") == tmp_path / "chosen.db"


@pytest.mark.anyio
async def test_a_library_agent_writes_into_its_own_file_not_the_reference_agents(
    tmp_path: Path,
) -> None:
    script = tmp_path / "shouty.py"
    script.write_text(
        textwrap.dedent(
            """
            from acp_agent import Agent, PromptTurn, run_agent

            class Shouty(Agent):
                name = "shouty"

                async def prompt(self, turn: PromptTurn) -> str:
                    await turn.client.message(turn.text.upper())
                    return "end_turn"

            raise SystemExit(run_agent(Shouty()))
            """
        )
    )
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "ACP_AGENT_DB": ""}
    async with spawn([sys.executable, str(script)], env=env) as agent:
        await agent.initialize(FULL_CAPS)
        created, _ = await agent.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        sid = created["sessionId"]
        assert (await agent.prompt(sid, "hi")).stop_reason == "end_turn"
    home = tmp_path / "data" / "acp-agent" / "sessions"
    assert sorted(p.name for p in home.glob("*.sqlite3")) == ["shouty.sqlite3"]
    async with await SqliteSessionStore.open(home / "shouty.sqlite3") as store:
        assert await store.get(DEFAULT_OWNER, sid) is not None


# --- private files ----------------------------------------------------------------------------


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_the_log_file_is_created_private_whatever_the_umask(tmp_path: Path) -> None:
    import logging

    log = tmp_path / "agent.log"
    old_umask = os.umask(0)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging("INFO", str(log))
        logging.getLogger("acp_agent.test").info("a prompt may be quoted here")
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:], root.level = handlers, level
        os.umask(old_umask)
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert "a prompt may be quoted here" in log.read_text()


# --- acp-agent-kit sessions ---------------------------------------------------------------------

OLD = "2020-01-01T00:00:00.000000Z"
NEW = "2999-01-01T00:00:00.000000Z"


def run_sessions(capsys: pytest.CaptureFixture[str], db: Path, *argv: str) -> tuple[int, str]:
    code = sessions_main(list(argv), prog="acp-agent-kit", store=str(db))
    return code, capsys.readouterr().out


def test_list_shows_where_the_store_is_each_session_and_its_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.sqlite3"
    fill(db, {"sess_big": (NEW, 2_000_000), "sess_small": (OLD, 500)})
    code, out = run_sessions(capsys, db, "list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"store: {db} (") and lines[0].endswith(" MB)")
    assert lines[2].split()[:2] == ["sess_big", "2999-01-01"]
    assert lines[2].split()[3:6] == ["1", "2.0", "MB"]
    assert lines[3].split()[:2] == ["sess_small", "2020-01-01"]
    assert lines[3].split()[3:6] == ["1", "500", "B"]
    assert lines[-1] == "2 sessions, 2.0 MB of history"


def test_show_and_delete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.sqlite3"
    fill(db, {"sess_a": (NEW, 100), "sess_b": (NEW, 100)})
    code, out = run_sessions(capsys, db, "show", "sess_a")
    assert code == 0
    assert "session:  sess_a" in out and "cwd:      /work/sess_a" in out
    assert "history:  1 turn, 100 B" in out
    assert "end_turn" in out
    assert run_sessions(capsys, db, "delete", "sess_a") == (0, "deleted sess_a\n")
    assert sessions_main(["delete", "sess_a"], prog="p", store=str(db)) == 1
    assert "no session 'sess_a'" in capsys.readouterr().err
    assert sessions_main(["show", "sess_a"], prog="p", store=str(db)) == 1
    code, out = run_sessions(capsys, db, "list")
    assert "sess_a" not in out and "sess_b" in out


def test_prune_removes_old_sessions_and_gives_the_space_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.sqlite3"
    fill(db, {"sess_old": (OLD, 3_000_000), "sess_new": (NEW, 1000)})
    before = file_size(db)
    code, out = run_sessions(capsys, db, "prune", "--older-than", "30", "--yes", "--vacuum")
    assert code == 0
    assert out.startswith("pruned 1 session not used for 30 days")
    after = file_size(db)
    assert after < before - 2_500_000
    code, out = run_sessions(capsys, db, "list")
    assert "sess_new" in out and "sess_old" not in out


def test_a_store_that_does_not_exist_is_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "none.sqlite3"
    assert run_sessions(capsys, db, "list") == (0, f"no store yet at {db}\n")
    assert not db.exists()


def test_the_command_line_reaches_the_agents_default_store(tmp_path: Path) -> None:
    env = child_env({"XDG_DATA_HOME": str(tmp_path), "ACP_AGENT_DB": ""})
    db = tmp_path / "acp-agent" / "sessions" / "shouty.sqlite3"
    fill(db, {"sess_x": (NEW, 10)})
    done = subprocess.run(
        [sys.executable, "-m", "acp_agent", "sessions", "--agent", "shouty", "list"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"store: {db} (")
    assert "sess_x" in done.stdout
