"""Paths from the client: validating them, and whether one lies inside a session's roots.

Owns the checks on directory and path text a client sends (absolute, no NUL byte) and
:class:`Roots`, which says whether a path, symbolic links followed, stays inside a
session's directories.

It does not own which roots a session has (:class:`acp_agent.session.Session`) or what
is refused when a path is outside them, nor any file reading or writing.
"""

from __future__ import annotations

import os
import stat

from .errors import InvalidParams


class Roots:
    """A session's root directories, and whether a path lies inside one of them.

    A path is inside when it names a root or something below one, and every name from
    the root down is not a symbolic link (``lstat`` each, up to the first that does not
    exist: nothing below a missing name can be a link). The root itself is trusted as
    the same directory (device and inode) it was when first checked, wherever it is
    reached from. Any other path, one through a link included, is inside when its
    ``os.path.realpath`` lies under a root's.

    Paths must be absolute and normalised (``os.path.normpath``), as the roots are.
    """

    __slots__ = ("_roots",)

    def __init__(self, paths: tuple[str, ...]) -> None:
        self._roots = tuple(_Root(path) for path in paths)

    def contains(self, path: str) -> bool:
        for root in self._roots:
            if path == root.path or path.startswith(root.prefix):
                if root.plain_below(path):
                    return True
                break
        real = os.path.realpath(path)
        return any(real == root.real or real.startswith(root.real_prefix) for root in self._roots)


class _Root:
    """One root: its path as given, its real path, and its identity when first checked."""

    __slots__ = ("identity", "path", "prefix", "real", "real_prefix")

    def __init__(self, path: str) -> None:
        self.path = path
        self.prefix = path.rstrip(os.sep) + os.sep
        self.real = os.path.realpath(path)
        self.real_prefix = self.real.rstrip(os.sep) + os.sep
        self.identity = _identity(path)

    def plain_below(self, path: str) -> bool:
        """Whether ``path`` (this root or below it) reaches no link below the root."""
        if self.identity is None or _identity(self.path) != self.identity:
            return False
        if path == self.path:
            return True
        current = self.path.rstrip(os.sep)
        for name in path[len(self.prefix) :].split(os.sep):
            current = current + os.sep + name
            try:
                mode = os.lstat(current).st_mode
            except FileNotFoundError:
                return True
            except OSError:
                return False
            if stat.S_ISLNK(mode):
                return False
        return True


def _identity(directory: str) -> tuple[int, int] | None:
    try:
        found = os.stat(directory)
    except OSError:
        return None
    return (found.st_dev, found.st_ino) if stat.S_ISDIR(found.st_mode) else None


def check_absolute_dir(value: object, what: str) -> str:
    """Validate one directory path from the client: a non-empty absolute string."""
    if not isinstance(value, str) or not value:
        raise InvalidParams(f"{what} must be a non-empty absolute path")
    if not os.path.isabs(value):
        raise InvalidParams(f"{what} must be an absolute path, got {value[:200]!r}")
    check_path_text(value, what)
    return os.path.normpath(value)


def check_path_text(path: str, what: str = "path") -> None:
    """Refuse a path no file system call can take (a NUL byte) as bad params."""
    if "\0" in path:
        raise InvalidParams(f"{what} must not contain a NUL character")


def check_additional_directories(value: object) -> tuple[str, ...]:
    """Validate ``additionalDirectories``: reject the request on any bad entry, drop nothing."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidParams("additionalDirectories must be an array of absolute paths")
    return tuple(
        check_absolute_dir(entry, f"additionalDirectories[{i}]") for i, entry in enumerate(value)
    )
