"""A sans-IO, incremental Server-Sent Events decoder (the subset chat completions use).

Feed it bytes as they arrive, in any split; it returns the complete events. It owns
line splitting (``\\n``, ``\\r\\n`` or ``\\r``, also across feeds), ``data:`` lines
joined with ``\\n``, the ``event:`` field, comments, and a cap on one event's size.
An event still incomplete when the stream ends is dropped, as the SSE spec says.

It does no I/O and knows nothing of JSON or of chat completions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

MAX_EVENT_BYTES: Final = 16 * 1024 * 1024


class SseError(ValueError):
    """The stream cannot be decoded as SSE (an event beyond the size cap)."""


@dataclass(frozen=True, slots=True)
class SseEvent:
    data: str
    event: str = "message"


class SseDecoder:
    """Bytes in, :class:`SseEvent` out."""

    __slots__ = ("_buffer", "_data", "_event", "_max", "_size", "_skip_lf")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buffer = bytearray()
        self._data: list[bytes] = []
        self._event = ""
        self._size = 0
        self._max = max_event_bytes
        self._skip_lf = False

    def feed(self, chunk: bytes) -> list[SseEvent]:
        events: list[SseEvent] = []
        if self._skip_lf and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._skip_lf = False
        self._buffer += chunk
        start = 0
        buf = self._buffer
        length = len(buf)
        while start < length:
            lf = buf.find(b"\n", start)
            cr = buf.find(b"\r", start, lf if lf >= 0 else length)
            if cr >= 0:
                end, nxt = cr, cr + 1
                if nxt < length and buf[nxt] == 0x0A:
                    nxt += 1
                elif nxt == length:
                    self._skip_lf = True  # a "\n" may start the next feed
            elif lf >= 0:
                end, nxt = lf, lf + 1
            else:
                break
            event = self._line(bytes(buf[start:end]))
            if event is not None:
                events.append(event)
            start = nxt
        del buf[:start]
        if len(buf) + self._size > self._max:
            raise SseError(f"an SSE event exceeds {self._max} bytes")
        return events

    def _line(self, line: bytes) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line[:1] == b":":
            return None
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
            self._size += len(value) + 1
            if self._size > self._max:
                raise SseError(f"an SSE event exceeds {self._max} bytes")
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        return None  # "id", "retry" and unknown fields are ignored

    def _dispatch(self) -> SseEvent | None:
        if not self._data:
            self._event = ""
            return None
        data = b"\n".join(self._data).decode("utf-8", "replace")
        event = SseEvent(data, self._event or "message")
        self._data = []
        self._event = ""
        self._size = 0
        return event

    @property
    def pending(self) -> bool:
        """True when bytes of an unfinished event are buffered."""
        return bool(self._buffer or self._data)
