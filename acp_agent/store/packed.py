"""``PackedJson``: a large history item's JSON text, compressed, as history hands it over.

History keeps a large item (a pasted file, a big tool output) compressed, and hands it to
the persistence glue in that form, so that no second full-size copy lives while the turn
runs. The glue expands it to JSON text just before a write, unless the store says it takes
packed items (``takes_packed_items``): the SQLite store writes them in pieces, so that the
whole text never exists at once.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["PackedJson", "text_of"]


@dataclass(frozen=True, slots=True)
class PackedJson:
    """zlib of the UTF-8 JSON text of one object; ``size`` is the length of that text."""

    data: bytes
    size: int

    @classmethod
    def pack(cls, text: bytes | memoryview) -> PackedJson:
        return cls(zlib.compress(text, 1), len(text))

    def text(self) -> str:
        return zlib.decompress(self.data).decode()

    def pieces(self, size: int = 1 << 20) -> Iterator[bytes]:
        """The UTF-8 text in pieces of at most ``size`` bytes."""
        unpack = zlib.decompressobj()
        data = self.data
        while data:
            piece = unpack.decompress(data, size)
            data = unpack.unconsumed_tail
            if piece:
                yield piece
        rest = unpack.flush()
        if rest:
            yield rest

    def load(self) -> Any:
        return orjson.loads(zlib.decompress(self.data))


def text_of(item: str | PackedJson) -> str:
    """The JSON text of a history item, expanded if packed."""
    return item.text() if isinstance(item, PackedJson) else item
