"""Layer 2: transports that move bytes.

This package owns the three-method ``Transport`` interface (``base``), an
in-memory pair for tests and embedding (``memory``) and the stdio transport with
the stdout reservation that keeps protocol frames alone on stdout (``stdio``).

It deliberately knows nothing of JSON-RPC framing or ACP: a transport moves
opaque bytes in both directions, and higher layers give them meaning.
"""

from __future__ import annotations

from .base import Transport
from .memory import MemoryTransport, memory_pair
from .stdio import StdioTransport, StdoutReservation, open_stdio, reserve_stdout

__all__ = [
    "MemoryTransport",
    "StdioTransport",
    "StdoutReservation",
    "Transport",
    "memory_pair",
    "open_stdio",
    "reserve_stdout",
]
