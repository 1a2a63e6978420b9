"""What the command line checks and says before it serves (used by :mod:`acp_agent.cli`).

A configuration problem a person can fix is found here and reported as one line, before
anything is served, instead of surfacing later on the wire: the session store is opened
lazily (after the ``initialize`` response, to keep start-up short), so an unusable
``--store`` path would otherwise fail the first ``session/new`` with a traceback. The
checks look at the file system (and, for a PostgreSQL URL, that its driver is installed);
they open nothing and create nothing.

It also holds the note for a person who runs the server in a terminal, where it would
otherwise sit silently waiting for JSON-RPC.

It knows nothing of the store's format beyond SQLite's file header, nor of the protocol.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Final

SQLITE_HEADER: Final = b"SQLite format 3\x00"

#: a bare file name (no directory) is taken as a SQLite store only with one of these:
#: else a typo of `memory` would quietly become a file of that name
SQLITE_SUFFIXES: Final = (".db", ".sqlite3", ".sqlite")

#: store names that are not files (the memory store; URLs of other stores)
_NOT_FILES: Final = frozenset({"memory", ":memory:"})


def store_problem(value: str) -> str | None:
    """Why ``value`` cannot be used as the session store (a SQLite file, or a PostgreSQL
    URL whose driver is not installed), or None."""
    if value.startswith(("postgresql://", "postgres://")):
        if not all(importlib.util.find_spec(name) for name in ("psycopg", "psycopg_pool")):
            return "PostgreSQL needs the postgres extra: pip install 'acp-agent-kit[postgres]'"
        return None
    if value in _NOT_FILES or "://" in value:
        return None
    if os.sep not in value and not value.endswith(SQLITE_SUFFIXES):
        return (
            "not a store name: give `memory`, a postgresql:// URL, or a SQLite file as a "
            f"path with a directory or a {'/'.join(SQLITE_SUFFIXES)} suffix (./{value})"
        )
    path = Path(value).expanduser()
    if path.is_dir():
        return "is a directory, not a file"
    if path.exists():
        return _file_problem(path)
    ancestor = path.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{ancestor} is not a directory"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"cannot create files in {ancestor}: permission denied"
    return None


def _file_problem(path: Path) -> str | None:
    if not path.is_file():
        return "is not a regular file"
    try:
        with open(path, "r+b") as file:
            header = file.read(len(SQLITE_HEADER))
    except OSError as exc:
        return f"cannot be opened for reading and writing: {exc.strerror}"
    if header and header != SQLITE_HEADER:
        return "is not a SQLite database"
    return None


def waiting_note(prog: str, chat: str | None = None) -> str:
    """What a person sees on stderr when they start the server in a terminal; ``chat`` is
    the command that talks to it (default: ``<prog> chat``)."""
    return (
        f"{prog}: serving ACP over stdin/stdout and waiting for a client (an editor) to send "
        f"JSON-RPC messages, one per line.\n"
        f"{prog}: to talk to the agent yourself, run `{chat or prog + ' chat'}`; Ctrl-D or "
        "Ctrl-C quits."
    )
