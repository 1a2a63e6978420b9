"""``PackedJson``: a large history item's JSON text, as history hands it over.

History keeps a large item (a pasted file, a big tool output) packed, and hands it to the
persistence glue in that form, so that no second full-size copy lives while the turn runs.
Packed means zlib-compressed when the text compresses well, and the text as it is when it
does not (base64, minified or already compressed data): there zlib costs many times more
time than it saves space. Every store takes packed items in a ``TurnWrite``: the SQLite and
memory stores keep them packed and expand them only when a session's history is loaded; the
PostgreSQL store expands them as it writes.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["PackedJson", "text_of"]

SAMPLE = 64 * 1024  # bytes of a text tried before the whole of it is compressed


@dataclass(frozen=True, slots=True)
class PackedJson:
    """The UTF-8 JSON text of one object: zlib of it if ``compressed``, else the text itself;
    ``size`` is the length of the text."""

    data: bytes
    size: int
    compressed: bool = True

    @classmethod
    def pack(cls, text: bytes | memoryview) -> PackedJson:
        """Compress ``text`` if its first ``SAMPLE`` bytes shrink by half; else keep it."""
        sample = text[:SAMPLE]
        if len(zlib.compress(sample, 1)) * 2 < len(sample):
            return cls(zlib.compress(text, 1), len(text))
        return cls(bytes(text), len(text), compressed=False)

    def raw(self) -> bytes:
        """The UTF-8 JSON text."""
        return zlib.decompress(self.data) if self.compressed else self.data

    def text(self) -> str:
        return self.raw().decode()

    def load(self) -> Any:
        return orjson.loads(self.raw())


def text_of(item: str | PackedJson) -> str:
    """The JSON text of a history item, expanded if packed."""
    return item.text() if isinstance(item, PackedJson) else item
