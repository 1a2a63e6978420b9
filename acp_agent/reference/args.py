"""Reading a slash-command line: the command name, its arguments, and their errors.

This module owns the grammar of ``/reference-agent.md``: a prompt whose first text
block starts with ``/`` is a command; its first line holds the name, then arguments
split on whitespace, or "the rest of the line" for a ``<text...>`` argument. Every
malformed argument becomes :class:`~acp_agent.errors.InvalidParams` (``-32602``)
whose message names the argument.

It knows nothing of what the commands do (that is :mod:`.commands`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from acp_agent.errors import InvalidParams

_NON_NEGATIVE = re.compile(r"[0-9]+")
_INTEGER = re.compile(r"-?[0-9]+")
#: arguments are bounded to what a JSON-RPC message can carry (a signed 64-bit integer)
INT_LIMIT = 2**63 - 1
_HEAD = re.compile(r"(\S+)\s*")  # a command's name and the whitespace after it


def bad_argument(name: str, problem: str) -> InvalidParams:
    """The ``-32602`` error for one argument; ``data.argument`` names it too."""
    return InvalidParams(f"{name}: {problem}", data={"argument": name})


@dataclass(frozen=True, slots=True)
class CommandLine:
    """``/name rest-of-the-line``, as typed."""

    name: str
    rest: str

    @property
    def words(self) -> list[str]:
        """The arguments split on whitespace."""
        return self.rest.split()

    def text_after(self, count: int) -> str:
        """The rest of the line after the first ``count`` arguments (a ``<text...>``)."""
        rest = self.rest
        for _ in range(count):
            parts = rest.split(None, 1)
            rest = parts[1] if len(parts) == 2 else ""
        return rest

    def word(self, index: int, name: str) -> str:
        """The argument at ``index``; a missing one is an error naming ``name``."""
        words = self.words
        if index >= len(words):
            raise bad_argument(name, "missing")
        return words[index]

    def count(
        self, index: int, name: str, default: int | None = None, *, maximum: int = INT_LIMIT
    ) -> int:
        """A non-negative integer argument up to ``maximum`` (``default`` when absent)."""
        words = self.words
        if index >= len(words) and default is not None:
            return default
        value = self.word(index, name)
        if not _NON_NEGATIVE.fullmatch(value):
            raise bad_argument(name, f"expected a non-negative integer, got {value[:40]!r}")
        return _bounded(name, value, 0, maximum)

    def integer(self, index: int, name: str) -> int:
        """An integer argument, negative allowed, within a signed 64-bit range."""
        value = self.word(index, name)
        if not _INTEGER.fullmatch(value):
            raise bad_argument(name, f"expected an integer, got {value[:40]!r}")
        return _bounded(name, value, -INT_LIMIT - 1, INT_LIMIT)

    def at_most(self, count: int) -> None:
        """Refuse arguments beyond the first ``count``."""
        words = self.words
        if len(words) > count:
            raise bad_argument("arguments", f"unexpected extra argument {words[count][:40]!r}")


def _bounded(name: str, value: str, low: int, high: int) -> int:
    # Checked on the digits first: int() of a huge string is slow by design.
    if len(value.lstrip("-")) > 19 or not low <= int(value) <= high:
        raise bad_argument(name, f"{value[:40]!r} is out of range ({low} to {high})")
    return int(value)


def first_text(blocks: Sequence[dict[str, Any]]) -> str | None:
    """The text of the prompt's first text block, if it has one."""
    for block in blocks:
        if block.get("type") == "text":
            text = block.get("text")
            return text if isinstance(text, str) else ""
    return None


def parse_command(blocks: Sequence[dict[str, Any]]) -> CommandLine | None:
    """The command in a prompt, or None when the prompt is not a command."""
    text = first_text(blocks)
    if text is None or not text.startswith("/"):
        return None
    # Positions in ``text``, not slices of it: a prompt may be tens of megabytes, and
    # its rest is the one copy made.
    end = text.find("\n", 1)
    if end < 0:
        end = len(text)
    if end > 1 and text[end - 1] == "\r":
        end -= 1
    head = _HEAD.match(text, 1, end)
    if head is None:  # an empty line, or one starting with whitespace
        return CommandLine("", text[1:end].strip())
    return CommandLine(head[1], text[head.end() : end])
