"""``acp-agent-kit login`` and ``logout``: the API key kept for the language-model agent.

``login`` reads the key from the terminal without echoing it (or a line of a piped
stdin) and keeps it in the user's config directory, in a file only its owner can read
(0600, its directory 0700); ``logout`` removes it. The agent reads that file when no
key is set in the environment or by ``--api-key-file``. This is the terminal
authentication method the agent advertises (:data:`LOGIN_METHOD`), which an editor or
the ACP registry runs as the agent's command with ``login`` for its arguments.

It owns the key file's life; reading it is :mod:`.config`'s.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import sys
from typing import Final

from acp_agent.agent import AuthMethod
from acp_agent.store.files import create_private_file

from .config import key_path

#: the terminal authentication method of ACP (and the registry's "Terminal Auth")
LOGIN_METHOD: Final[AuthMethod] = {
    "id": "login",
    "name": "Log in with an API key",
    "description": "Type the model endpoint's API key in a terminal; it is kept in your "
    "config directory, readable by you only",
    "type": "terminal",
    "args": ["login"],
}


def login(prog: str) -> int:
    """Ask for the key and keep it; 0 when kept, 1 when none was given."""
    path = key_path()
    if sys.stdin.isatty():
        print(f"{prog}: the API key is kept in {path} (readable by you only)", file=sys.stderr)
        try:
            key = getpass.getpass("API key (not echoed): ")
        except (EOFError, KeyboardInterrupt):
            print(file=sys.stderr)
            key = ""
    else:
        key = sys.stdin.readline()
    key = key.strip()
    if not key:
        print(f"{prog}: no key given; nothing changed", file=sys.stderr)
        return 1
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a new file: made owner-only, whatever the old one's mode was
    create_private_file(path)
    with open(path, "w", encoding="utf-8") as file:
        file.write(key + "\n")
    print(f"{prog}: logged in; the key is in {path}", file=sys.stderr)
    return 0


def logout(prog: str) -> int:
    """Forget the kept key (0 either way: afterwards there is none)."""
    path = key_path()
    try:
        os.unlink(path)
    except FileNotFoundError:
        print(f"{prog}: not logged in (no {path})", file=sys.stderr)
        return 0
    print(f"{prog}: logged out; removed {path}", file=sys.stderr)
    return 0
