"""Files only their owner can read: the session store's database, its side files, and the
log file. They hold prompts, file contents and command output.

It owns creating such files and the directories made for them (mode 0600, directories
0700), whatever the umask; it does not touch files or directories that already exist.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

__all__ = ["DIR_MODE", "FILE_MODE", "create_private_file", "make_private_dirs"]

FILE_MODE: Final = 0o600
DIR_MODE: Final = 0o700


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and any missing parents, each readable by its owner only."""
    missing: list[Path] = []
    while not directory.exists() and directory.parent != directory:
        missing.append(directory)
        directory = directory.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=DIR_MODE)
            os.chmod(path, DIR_MODE)  # mkdir's mode is cut by the umask


def create_private_file(path: Path, *, parents: bool = True) -> None:
    """Create ``path`` empty and readable by its owner only, unless it exists; with
    ``parents``, its missing directories too (else a missing one is ``FileNotFoundError``).
    SQLite gives its side files, ``-wal`` and ``-shm``, the mode of the database file."""
    if parents:
        make_private_dirs(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, FILE_MODE)  # the umask may have cut the mode given to open
    finally:
        os.close(fd)
