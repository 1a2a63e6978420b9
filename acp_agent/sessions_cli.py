"""``acp-agent-kit sessions``: see and manage the session store on this machine.

``list`` shows where the store lives, how big it is, and each session (newest first) with
its turns and the size of its history; ``show ID`` one session's record and turns;
``delete ID`` removes a session; ``prune --older-than DAYS`` removes the sessions not used
for that many days (and not open in a running agent), in small transactions so that agents
sharing the file never wait long, and with ``--vacuum`` gives their space back to the file
system (which holds the file's write lock for as long as it takes).

It works on a SQLite store: ``--store PATH`` (or ``ACP_AGENT_DB``), else the default store
of the agent named by ``--agent`` (the reference agent's unless told). It sees the sessions
made over stdio (the default owner). It owns this command's arguments and output only; the
store does the work.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import anyio
import orjson

from .store import DB_ENV_VAR, DEFAULT_OWNER, StoreFailed, default_db_path
from .store.sqlite import SqliteSessionStore

USAGE_ERROR = 2


def _size(n: int) -> str:
    if n < 1000:
        return f"{n} B"
    value = n / 1000
    for unit in ("kB", "MB"):
        if value < 1000:
            return f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def file_size(path: Path) -> int:
    """The database and its side files, in bytes."""
    total = 0
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            total += os.stat(f"{path}{suffix}").st_size
    return total


def _when(timestamp: str) -> str:
    return timestamp[:16].replace("T", " ")


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{prog} sessions",
        description="See and manage the stored sessions (a SQLite store).",
    )
    parser.add_argument(
        "--agent",
        default="acp-agent",
        metavar="NAME",
        help="use this agent's default store (default: the reference agent's)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("list", help="every session, newest first, with its size")
    show = commands.add_parser("show", help="one session's record and turns")
    show.add_argument("session_id", metavar="ID")
    delete = commands.add_parser("delete", help="remove one session and its history")
    delete.add_argument("session_id", metavar="ID")
    prune = commands.add_parser("prune", help="remove sessions not used for DAYS days")
    prune.add_argument("--older-than", type=float, required=True, metavar="DAYS")
    prune.add_argument(
        "--vacuum",
        action="store_true",
        help="then give the space back to the file system (agents on the file wait meanwhile)",
    )
    return parser


def store_path(store: str | None, agent: str) -> Path:
    """The SQLite file to work on (``store`` is the global ``--store``)."""
    named = store or os.environ.get(DB_ENV_VAR)
    if named:
        return Path(named).expanduser()
    return default_db_path(agent)


async def _list(store: SqliteSessionStore) -> int:
    sizes = await store.sizes(DEFAULT_OWNER)
    records = []
    cursor: str | None = None
    while True:
        page, cursor = await store.list(DEFAULT_OWNER, cursor=cursor, limit=500)
        records += page
        if cursor is None:
            break
    print(f"store: {store.path} ({_size(file_size(store.path))})")
    if not records:
        print("no sessions")
        return 0
    print(f"{'SESSION':<30} {'UPDATED':<16} {'TURNS':>5} {'SIZE':>9}  TITLE OR CWD")
    for r in records:
        turns, size = sizes.get(r.session_id, (0, 0))
        label = r.title or r.cwd
        print(f"{r.session_id:<30} {_when(r.updated_at):<16} {turns:>5} {_size(size):>9}  {label}")
    total = sum(size for _, size in sizes.values())
    print(f"{len(records)} sessions, {_size(total)} of history")
    return 0


def _first_text(items: Sequence[str]) -> str:
    for text in items:
        update = orjson.loads(text)
        content = update.get("content")
        if isinstance(content, dict) and isinstance(content.get("text"), str):
            return " ".join(content["text"].split())[:60]
    return ""


async def _show(store: SqliteSessionStore, session_id: str) -> int:
    record = await store.get(DEFAULT_OWNER, session_id)
    if record is None:
        print(f"no session {session_id!r} in {store.path}", file=sys.stderr)
        return 1
    turns = await store.load_history(DEFAULT_OWNER, session_id)
    print(f"session:  {record.session_id}")
    print(f"title:    {record.title or '-'}")
    print(f"cwd:      {record.cwd}")
    for directory in record.additional_directories:
        print(f"also:     {directory}")
    print(f"mode:     {record.mode_id or '-'}")
    print(f"created:  {record.created_at}")
    print(f"updated:  {record.updated_at}")
    size = sum(len(text.encode()) for turn in turns for text in turn.updates)
    print(f"history:  {len(turns)} turns, {_size(size)}")
    for i, turn in enumerate(turns):
        stop = turn.stop_reason or "interrupted"
        count = len(turn.updates)
        print(f"  {i:>4}  {stop:<18} {count:>6} updates  {_first_text(turn.updates)}")
    return 0


async def _delete(store: SqliteSessionStore, session_id: str) -> int:
    if await store.delete(DEFAULT_OWNER, session_id):
        print(f"deleted {session_id}")
        return 0
    print(f"no session {session_id!r} in {store.path}", file=sys.stderr)
    return 1


async def _prune(store: SqliteSessionStore, days: float, vacuum: bool) -> int:
    cutoff = (datetime.now(timezone.utc) - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    before = file_size(store.path)
    pruned = await store.prune(DEFAULT_OWNER, cutoff)
    if vacuum:
        await store.vacuum()
    after = file_size(store.path)
    print(
        f"pruned {len(pruned)} sessions not used for {days:g} days; "
        f"{store.path}: {_size(before)} -> {_size(after)}"
    )
    return 0


async def _run(path: Path, args: argparse.Namespace) -> int:
    async with await SqliteSessionStore.open(path) as store:
        if args.command == "list":
            return await _list(store)
        if args.command == "show":
            return await _show(store, args.session_id)
        if args.command == "delete":
            return await _delete(store, args.session_id)
        return await _prune(store, args.older_than, args.vacuum)


def main(argv: Sequence[str], *, prog: str, store: str | None) -> int:
    args = build_parser(prog).parse_args(argv)
    if args.command == "prune" and args.older_than < 0:
        print(f"{prog} sessions: --older-than must be 0 or more days", file=sys.stderr)
        return USAGE_ERROR
    if store in ("memory", ":memory:") or (store and "://" in store):
        print(f"{prog} sessions: works on a SQLite store, not {store!r}", file=sys.stderr)
        return USAGE_ERROR
    path = store_path(store, args.agent)
    if not path.exists():
        print(f"no store yet at {path}")
        return 0 if args.command in ("list", "prune") else 1
    try:
        return anyio.run(_run, path, args)
    except StoreFailed as exc:
        print(f"{prog} sessions: {exc.message}", file=sys.stderr)
        return 1
