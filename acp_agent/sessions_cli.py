"""``acp-agent-kit sessions``: see and manage the stored sessions.

``list`` shows where the store is, how big it is, and each session (newest first) with
its turns and the size of its history; ``show ID`` one session's record and turns
(a turn answered with an error shows as ``failed``); ``delete ID`` removes a session;
``prune --older-than DAYS`` removes the sessions not used for that many days (after a
confirmation in a terminal, ``--yes`` elsewhere; ``--dry-run`` only lists them; in a SQLite
file, not those open in a running agent, in small transactions so that agents sharing the
file never wait long, and with ``--vacuum`` their space goes back to the file system,
holding the file's write lock meanwhile); ``agents`` lists the agents that have a default
store here.

It works on every store that keeps sessions: ``--store PATH|URL`` (or ``ACP_AGENT_DB``),
a SQLite file or a PostgreSQL database, else the default file of the agent named by
``--agent`` (the reference agent's unless told; the language-model agent's is
``acp-agent-llm``). It sees the sessions made over stdio (the default owner). It owns
this command's arguments and output only; the store does the work.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import orjson

from .errors import AcpError
from .history import FAILED_TURN
from .store import DB_ENV_VAR, DEFAULT_OWNER, StoreFailed, default_db_path, open_store
from .store.base import SessionRecord
from .store.sqlite import SqliteSessionStore

USAGE_ERROR = 2
REFERENCE = "acp-agent"
POSTGRES = ("postgresql://", "postgres://")


def _size(n: int) -> str:
    if n < 1000:
        return f"{n} B"
    value = n / 1000
    for unit in ("kB", "MB"):
        if value < 1000:
            return f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def plural(count: int, noun: str) -> str:
    """``1 session``, ``2 sessions``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


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
        description="See and manage the stored sessions (a SQLite file or PostgreSQL).",
    )
    parser.add_argument(
        "--agent",
        default=None,
        metavar="NAME",
        help="use this agent's default store (default: the reference agent's, "
        f"{REFERENCE}; the language-model agent's is acp-agent-llm; see `agents`)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("list", help="every session, newest first, with its size")
    show = commands.add_parser("show", help="one session's record and turns")
    show.add_argument("session_id", metavar="ID")
    delete = commands.add_parser("delete", help="remove one session and its history")
    delete.add_argument("session_id", metavar="ID")
    prune = commands.add_parser("prune", help="remove sessions not used for DAYS days")
    prune.add_argument("--older-than", type=float, required=True, metavar="DAYS")
    prune.add_argument("--dry-run", action="store_true", help="list them, remove nothing")
    prune.add_argument("--yes", action="store_true", help="do not ask (needed without a terminal)")
    prune.add_argument(
        "--vacuum",
        action="store_true",
        help="then give the space back to the file system (agents on the file wait meanwhile)",
    )
    commands.add_parser("agents", help="the agents that have a default store here")
    return parser


def store_target(store: str | None, agent: str | None) -> str:
    """The store to work on: ``--store``, else ``ACP_AGENT_DB``, else the agent's file."""
    named = store or os.environ.get(DB_ENV_VAR)
    if named:
        return named if named.startswith(POSTGRES) else str(Path(named).expanduser())
    return str(default_db_path(agent or REFERENCE))


def agent_stores() -> dict[str, Path]:
    """The agents with a default store on this machine, by name."""
    directory = default_db_path(REFERENCE).parent
    return {path.stem: path for path in sorted(directory.glob("*.sqlite3"), key=lambda p: p.stem)}


def _shown(target: str) -> str:
    """The store, as shown: a URL without its password."""
    if not target.startswith(POSTGRES):
        return target
    parts = urlsplit(target)
    host = parts.hostname or ""
    user = f"{parts.username}@" if parts.username else ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{user}{host}{port}{parts.path}"


class Sessions:
    """The sessions of one store, as this command needs them."""

    def __init__(self, store: Any, target: str) -> None:
        self.store = store
        self.sqlite = store if isinstance(store, SqliteSessionStore) else None
        self.target = target

    async def records(self) -> list[SessionRecord]:
        records: list[SessionRecord] = []
        cursor: str | None = None
        while True:
            page, cursor = await self.store.list(DEFAULT_OWNER, cursor=cursor, limit=500)
            records += page
            if cursor is None:
                return records

    async def sizes(self, records: Sequence[SessionRecord]) -> dict[str, tuple[int, int]]:
        """Each session's turns and history bytes."""
        if self.sqlite is not None:
            return dict(await self.sqlite.sizes(DEFAULT_OWNER))
        sizes = {}
        for r in records:
            turns = await self.store.load_history(DEFAULT_OWNER, r.session_id)
            size = sum(len(text.encode()) for turn in turns for text in turn.updates)
            sizes[r.session_id] = (len(turns), size)
        return sizes

    def where(self) -> str:
        if self.sqlite is None:
            return _shown(self.target)
        return f"{self.target} ({_size(file_size(Path(self.target)))})"


async def _list(sessions: Sessions, others: Sequence[str]) -> int:
    records = await sessions.records()
    sizes = await sessions.sizes(records)
    print(f"store: {sessions.where()}")
    if not records:
        print("no sessions")
    else:
        print(f"{'SESSION':<30} {'UPDATED':<16} {'TURNS':>5} {'SIZE':>9}  TITLE OR CWD")
        for r in records:
            turns, size = sizes.get(r.session_id, (0, 0))
            label = r.title or r.cwd
            print(
                f"{r.session_id:<30} {_when(r.updated_at):<16} {turns:>5} {_size(size):>9}  {label}"
            )
        total = sum(size for _, size in sizes.values())
        print(f"{plural(len(records), 'session')}, {_size(total)} of history")
    for name in others:
        print(f"also: the sessions of {name} (`sessions --agent {name} list`)")
    return 0


def _first_text(items: Sequence[str]) -> str:
    for text in items:
        update = orjson.loads(text)
        content = update.get("content")
        if isinstance(content, dict) and isinstance(content.get("text"), str):
            return " ".join(content["text"].split())[:60]
    return ""


async def _show(sessions: Sessions, session_id: str) -> int:
    store = sessions.store
    record = await store.get(DEFAULT_OWNER, session_id)
    if record is None:
        print(f"no session {session_id!r} in {_shown(sessions.target)}", file=sys.stderr)
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
    print(f"history:  {plural(len(turns), 'turn')}, {_size(size)}")
    for i, turn in enumerate(turns):
        stop = turn.stop_reason or "interrupted"
        stop = "failed" if stop == FAILED_TURN else stop
        count = plural(len(turn.updates), "update")
        print(f"  {i:>4}  {stop:<18} {count:>13}  {_first_text(turn.updates)}")
    return 0


async def _delete(sessions: Sessions, session_id: str) -> int:
    if await sessions.store.delete(DEFAULT_OWNER, session_id):
        print(f"deleted {session_id}")
        return 0
    print(f"no session {session_id!r} in {_shown(sessions.target)}", file=sys.stderr)
    return 1


async def _old(sessions: Sessions, days: float) -> tuple[str, list[SessionRecord]]:
    """The cutoff timestamp and the sessions not updated since."""
    cutoff = (datetime.now(timezone.utc) - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return cutoff, [r for r in await sessions.records() if r.updated_at < cutoff]


async def _prune(sessions: Sessions, args: argparse.Namespace, prog: str) -> int:
    days = args.older_than
    cutoff, old = await _old(sessions, days)
    what = f"{plural(len(old), 'session')} not used for {days:g} days"
    if args.dry_run or not old:
        for r in old:
            print(f"  {r.session_id:<30} {_when(r.updated_at):<16} {r.title or r.cwd}")
        print(f"would prune {what}" if args.dry_run else f"nothing to prune: no {what}")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            print(
                f"{prog} sessions: prune would delete {what}; without a terminal to ask, "
                "pass --yes (or --dry-run to see them)",
                file=sys.stderr,
            )
            return USAGE_ERROR
        answer = await anyio.to_thread.run_sync(input, f"delete {what}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return 1
    if sessions.sqlite is None:
        for r in old:
            await sessions.store.delete(DEFAULT_OWNER, r.session_id)
        print(f"pruned {what}")
        return 0
    before = file_size(Path(sessions.target))
    pruned = await sessions.sqlite.prune(DEFAULT_OWNER, cutoff)
    if args.vacuum:
        await sessions.sqlite.vacuum()
    after = file_size(Path(sessions.target))
    kept = len(old) - len(pruned)
    open_ = f" ({plural(kept, 'session')} open in a running agent kept)" if kept else ""
    print(
        f"pruned {plural(len(pruned), 'session')} not used for {days:g} days{open_}; "
        f"{sessions.target}: {_size(before)} -> {_size(after)}"
    )
    return 0


async def _run(target: str, args: argparse.Namespace, prog: str, others: Sequence[str]) -> int:
    store = await open_store(target)
    try:
        sessions = Sessions(store, target)
        if args.command == "list":
            return await _list(sessions, others)
        if args.command == "show":
            return await _show(sessions, args.session_id)
        if args.command == "delete":
            return await _delete(sessions, args.session_id)
        return await _prune(sessions, args, prog)
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()


def _agents() -> int:
    stores = agent_stores()
    if not stores:
        print(f"no agent has a store yet in {default_db_path(REFERENCE).parent}")
        return 0
    for name, path in stores.items():
        print(f"{name:<24} {_size(file_size(path)):>9}  {path}")
    return 0


def main(argv: Sequence[str], *, prog: str, store: str | None) -> int:
    args = build_parser(prog).parse_args(argv)
    if args.command == "agents":
        return _agents()
    if args.command == "prune" and args.older_than < 0:
        print(f"{prog} sessions: --older-than must be 0 or more days", file=sys.stderr)
        return USAGE_ERROR
    named = store or os.environ.get(DB_ENV_VAR)
    if named in ("memory", ":memory:"):
        print(f"{prog} sessions: the memory store keeps no sessions to see", file=sys.stderr)
        return USAGE_ERROR
    if args.agent is not None and named:
        print(f"{prog} sessions: give --agent or a store, not both", file=sys.stderr)
        return USAGE_ERROR
    target = store_target(store, args.agent)
    others: list[str] = []
    if not named and args.command == "list":
        others = [n for n in agent_stores() if n != (args.agent or REFERENCE)]
    if not target.startswith(POSTGRES) and not Path(target).exists():
        print(f"no store yet at {target}")
        for name in others:
            print(f"also: the sessions of {name} (`sessions --agent {name} list`)")
        return 0 if args.command in ("list", "prune") else 1
    try:
        return anyio.run(_run, target, args, prog, others)
    except StoreFailed as exc:
        print(f"{prog} sessions: {exc.message}", file=sys.stderr)
        return 1
    except AcpError as exc:  # e.g. a PostgreSQL server that is down
        print(f"{prog} sessions: {_shown(target)}: {exc}", file=sys.stderr)
        return 1
