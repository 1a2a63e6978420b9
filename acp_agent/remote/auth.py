"""Who is asking: the token file and the ``Authorization: Bearer`` check.

This module owns the token file format (one ``<principal> <token>`` or
``<principal> sha256:<hex digest of the token>`` per line; blank lines and lines
starting with ``#`` are skipped), the rule that the file is readable by its owner only
(as ssh treats a private key), and the mapping from a request's ``Authorization``
header to a principal: the offered token's SHA-256 digest is compared with every
known digest in constant time. Without a token file every request is the one local
principal, :data:`LOCAL`.

It knows nothing of connections, sessions or HTTP beyond the header's value.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass

from ..store import DEFAULT_OWNER

__all__ = ["LOCAL", "Principals", "TokenFileError"]

LOCAL = DEFAULT_OWNER
"""The principal of every request when the server runs without a token file: the owner
of the sessions made over stdio too, so the same person sees them both ways."""

MIN_TOKEN = 16
"""Tokens shorter than this are refused: they could be guessed."""

DIGEST_PREFIX = "sha256:"
"""A token stored as the hex SHA-256 digest of the token a client sends."""


class TokenFileError(ValueError):
    """The token file cannot be used (the message names the line)."""


@dataclass(frozen=True)
class Principals:
    """Token digests and the principals they stand for; ``open_access`` when there are
    none."""

    tokens: tuple[tuple[bytes, str], ...] = ()
    """``(SHA-256 digest of the token, principal)`` pairs."""

    @property
    def open_access(self) -> bool:
        return not self.tokens

    @classmethod
    def from_lines(cls, lines: Iterable[str], source: str = "the token file") -> Principals:
        seen_tokens: set[bytes] = set()
        seen_names: set[str] = set()
        pairs: list[tuple[bytes, str]] = []
        for number, raw in enumerate(lines, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            where = f"{source}, line {number}"
            if len(parts) != 2:
                raise TokenFileError(f"{where}: expected `<principal> <token>`")
            name, token = parts
            digest = _stored_digest(token, where)
            if digest in seen_tokens:
                raise TokenFileError(f"{where}: this token is already given to a principal")
            if name in seen_names:
                raise TokenFileError(f"{where}: principal {name!r} is listed twice")
            seen_tokens.add(digest)
            seen_names.add(name)
            pairs.append((digest, name))
        if not pairs:
            raise TokenFileError(f"{source} lists no `<principal> <token>` line")
        return cls(tuple(pairs))

    @classmethod
    def from_file(cls, path: str) -> Principals:
        """The principals of the token file at ``path``, which only its owner may read."""
        try:
            with open(path, encoding="utf-8") as f:
                mode = os.fstat(f.fileno()).st_mode
                if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
                    raise TokenFileError(
                        f"{path} is open to group or others (mode {stat.S_IMODE(mode):04o}): "
                        f"its tokens are secrets; run chmod 600 {path}"
                    )
                return cls.from_lines(f, path)
        except OSError as exc:
            raise TokenFileError(f"cannot read {path}: {exc.strerror or exc}") from None

    def principal(self, authorization: str | None) -> str | None:
        """The principal a request's ``Authorization`` header names, or None (refuse it)."""
        if self.open_access:
            return LOCAL
        if authorization is None:
            return None
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        offered = hashlib.sha256(token.strip().encode()).digest()
        found: str | None = None
        for known, name in self.tokens:  # every entry is compared: no early exit
            if hmac.compare_digest(known, offered):
                found = name
        return found


def _stored_digest(token: str, where: str) -> bytes:
    """The SHA-256 digest a token file's entry stands for."""
    if token.startswith(DIGEST_PREFIX):
        hex_digest = token.removeprefix(DIGEST_PREFIX)
        try:
            digest = bytes.fromhex(hex_digest)
        except ValueError:
            digest = b""
        if len(digest) != hashlib.sha256().digest_size:
            raise TokenFileError(f"{where}: `sha256:` must be followed by 64 hex digits")
        return digest
    if len(token) < MIN_TOKEN:
        raise TokenFileError(f"{where}: the token is shorter than {MIN_TOKEN} characters")
    return hashlib.sha256(token.encode()).digest()
