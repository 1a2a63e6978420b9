"""``PackedJson``: a large history item's JSON text, compressed, as history hands it over.

History keeps a large item (a pasted file, a big tool output) compressed, and hands it to
the persistence glue in that form, so that no second full-size copy lives while the turn
runs. Stores never see it: the glue expands it to JSON text just before a write.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["PackedJson"]


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

    def load(self) -> Any:
        return orjson.loads(zlib.decompress(self.data))
