"""Newline-delimited framing with a length cap: bytes in, complete lines out.

This module owns how a byte stream is cut into frames: split on ``b"\\n"`` only
(never on ``\\r`` alone, U+2028 or other Unicode line breaks), drop one trailing
``b"\\r"`` per line, skip blank lines, and refuse lines longer than a cap without
ever holding much more than the cap in memory.

It deliberately knows nothing of JSON, JSON-RPC or I/O: it is fed bytes by
whoever reads the transport and hands back ``bytes`` lines (still undecoded) and
:class:`~acp_agent.errors.OversizedLine` markers, in stream order.
"""

from __future__ import annotations

from acp_agent.errors import OversizedLine

__all__ = ["DEFAULT_MAX_LINE", "LineBuffer"]

DEFAULT_MAX_LINE = 64 * 1024 * 1024
"""The default cap on one line, in bytes (64 MiB)."""

_SMALL = 4096
HEAD = 1024  # bytes of an oversized line kept to find its request id
"""Chunks shorter than this are copied into a shared ``bytearray`` while held."""


class LineBuffer:
    """Cut a byte stream into lines, reporting lines over ``max_line`` bytes.

    A line's size counts every byte before its ``\\n`` (a trailing ``\\r``
    included). An oversized line is reported once, as an ``OversizedLine``
    instance placed in the output where the line ended; ``size`` is the number
    of bytes seen for it. Its bytes are dropped as they arrive, so the buffer
    holds at most ``max_line`` bytes of a partial line between calls (plus, during
    one :meth:`feed`, the chunk being fed).

    Cost is linear: only newly fed bytes are searched for ``\\n``, and a partial
    line is kept as a list of the chunks it arrived in (small chunks coalesced
    into one ``bytearray`` so byte-at-a-time feeding stays compact), joined
    once when its ``\\n`` arrives.
    """

    __slots__ = ("_discarded", "_discarding", "_head", "_max_line", "_parts", "_size")

    def __init__(self, max_line: int = DEFAULT_MAX_LINE) -> None:
        if max_line < 1:
            raise ValueError(f"max_line must be positive, not {max_line}")
        self._max_line = max_line
        self._parts: list[bytes | bytearray] = []
        self._size = 0
        self._discarding = False
        self._discarded = 0
        self._head = b""

    @property
    def max_line(self) -> int:
        """The cap on one line, in bytes."""
        return self._max_line

    @property
    def buffered(self) -> int:
        """How many bytes of an unfinished line are held right now."""
        return self._size

    def feed(self, data: bytes) -> list[bytes | OversizedLine]:
        """Add ``data``; return the lines it completes, in order."""
        out: list[bytes | OversizedLine] = []
        nl = data.find(b"\n")
        if nl < 0:
            if self._discarding:
                self._discarded += len(data)
            else:
                self._hold(data)
            return out
        if self._discarding:
            out.append(OversizedLine(self._discarded + nl, self._max_line, self._head))
            self._discarding = False
            self._discarded = 0
            self._head = b""
        elif self._parts:
            self._finish_partial(data[:nl], out)
        else:
            self._emit(data[:nl], out)
        start = nl + 1
        last = data.rfind(b"\n")
        if last > nl:
            for line in data[start:last].split(b"\n"):
                self._emit(line, out)
            start = last + 1
        if start < len(data):
            self._hold(data[start:])
        return out

    def close(self) -> list[bytes | OversizedLine]:
        """End of stream: return the last line even without its ``\\n``, and reset."""
        out: list[bytes | OversizedLine] = []
        if self._discarding:
            out.append(OversizedLine(self._discarded, self._max_line, self._head))
            self._discarding = False
            self._discarded = 0
            self._head = b""
        elif self._parts:
            self._finish_partial(b"", out)
        return out

    def _emit(self, line: bytes, out: list[bytes | OversizedLine]) -> None:
        size = len(line)
        if size > self._max_line:
            out.append(OversizedLine(size, self._max_line, line[:HEAD]))
            return
        if line.endswith(b"\r"):
            line = line[:-1]
        if line and not line.isspace():
            out.append(line)

    def _finish_partial(self, tail: bytes, out: list[bytes | OversizedLine]) -> None:
        size = self._size + len(tail)
        if size > self._max_line:
            out.append(OversizedLine(size, self._max_line, self._head_of(tail)))
        else:
            self._parts.append(tail)
            self._emit(b"".join(self._parts), out)
        self._parts = []
        self._size = 0

    def _head_of(self, tail: bytes) -> bytes:
        """The first HEAD bytes of the held parts followed by ``tail``."""
        head = bytearray()
        for part in self._parts:
            head += part[: HEAD - len(head)]
            if len(head) >= HEAD:
                return bytes(head)
        head += tail[: HEAD - len(head)]
        return bytes(head)

    def _hold(self, chunk: bytes) -> None:
        if not chunk:
            return
        size = self._size + len(chunk)
        if size > self._max_line:
            self._head = self._head_of(chunk)
            self._parts = []
            self._size = 0
            self._discarding = True
            self._discarded = size
            return
        self._size = size
        parts = self._parts
        if len(chunk) >= _SMALL:
            parts.append(chunk)
        elif parts and isinstance(parts[-1], bytearray):
            parts[-1] += chunk
        else:
            parts.append(bytearray(chunk))
