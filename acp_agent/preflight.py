"""What the command line says before it serves (used by :mod:`acp_agent.cli`): the note
for a person who runs the server in a terminal, where it would otherwise sit silently
waiting for JSON-RPC, and the refusal of a ``--store`` name that is a typo.

The session store is checked by opening it, before anything is served (see
:mod:`acp_agent.runner`); nothing here looks at it. It knows nothing of the protocol.
"""

from __future__ import annotations

import os
from typing import Final

#: a bare file name (no directory) is taken as a SQLite store only with one of these:
#: else a typo of `memory` would quietly become a file of that name
SQLITE_SUFFIXES: Final = (".db", ".sqlite3", ".sqlite")


def store_name_problem(value: str) -> str | None:
    """Why the ``--store`` text ``value`` names no store (a bare word such as ``memroy``),
    or None: ``memory``, a URL, a path with a directory or a SQLite suffix are names."""
    if value in ("memory", ":memory:") or "://" in value:
        return None
    if os.sep in value or value.endswith(SQLITE_SUFFIXES):
        return None
    return (
        "not a store name: give `memory`, a postgresql:// URL, or a SQLite file as a "
        f"path with a directory or a {'/'.join(SQLITE_SUFFIXES)} suffix (./{value})"
    )


def waiting_note(prog: str, chat: str | None = None) -> str:
    """What a person sees on stderr when they start the server in a terminal; ``chat`` is
    the command that talks to it (default: ``<prog> chat``)."""
    return (
        f"{prog}: serving ACP over stdin/stdout and waiting for a client (an editor) to send "
        f"JSON-RPC messages, one per line.\n"
        f"{prog}: to talk to the agent yourself, run `{chat or prog + ' chat'}`; Ctrl-D or "
        "Ctrl-C quits."
    )
