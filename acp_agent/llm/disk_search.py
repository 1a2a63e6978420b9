"""Listing and searching files on the local disk, for the built-in tools.

Owns the walk of a directory (what is skipped, how many entries at most) and the search of
files for a pattern (which files, how many matches at most). Both are synchronous and stop
early when their ``stop`` event is set; :mod:`acp_agent.llm.tools` runs them in a thread and
decides what the model and the client see. Root checks are the caller's.
"""

from __future__ import annotations

import fnmatch
import os
import re
import threading
from typing import Final

IGNORED_DIRS: Final = frozenset(
    {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache"}
)
MAX_LIST: Final = 1000
MAX_MATCHES: Final = 200
MAX_SEARCH_FILE: Final = 2 * 1024 * 1024


def walk(root: str, recursive: bool, stop: threading.Event) -> list[str]:
    if os.path.isfile(root):
        return [os.path.basename(root)]
    entries: list[str] = []
    if not recursive:
        with os.scandir(root) as it:
            for entry in sorted(it, key=lambda e: e.name):
                entries.append(entry.name + ("/" if entry.is_dir() else ""))
        return entries[:MAX_LIST]
    for dirpath, dirnames, filenames in os.walk(root):
        if stop.is_set():
            break
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_DIRS)
        rel = os.path.relpath(dirpath, root)
        prefix = "" if rel == "." else rel + "/"
        entries.extend(prefix + d + "/" for d in dirnames)
        entries.extend(prefix + f for f in sorted(filenames))
        if len(entries) >= MAX_LIST:
            break
    return entries[:MAX_LIST]


def search(
    root: str, pattern: re.Pattern[str], glob: str | None, stop: threading.Event
) -> list[tuple[str, int, str]]:
    matches: list[tuple[str, int, str]] = []
    files: list[str] = []
    if os.path.isfile(root):
        files = [root]
    else:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_DIRS)
            files.extend(os.path.join(dirpath, f) for f in sorted(filenames))
    for file in files:
        if stop.is_set() or len(matches) >= MAX_MATCHES:
            break
        if glob and not (
            fnmatch.fnmatch(os.path.basename(file), glob) or fnmatch.fnmatch(file, glob)
        ):
            continue
        try:
            if os.path.getsize(file) > MAX_SEARCH_FILE:
                continue
            with open(file, "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        if b"\0" in data[:8192]:
            continue  # binary
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if pattern.search(line):
                matches.append((file, number, line.strip()[:300]))
                if len(matches) >= MAX_MATCHES:
                    break
    return matches
