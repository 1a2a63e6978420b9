"""The transport interface: three methods that move bytes.

This module owns the contract every transport keeps: stdio and the in-memory
pair ship in this package, the remote link in :mod:`acp_agent.remote`; the
contract suite in ``tests/transport`` checks each against it. There is no
other, optional protocol beside it.

It deliberately knows nothing of frames, JSON-RPC or ACP: a transport moves
opaque bytes. Cutting them into lines is the framing layer's job.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Transport"]


@runtime_checkable
class Transport(Protocol):
    """A bidirectional byte stream.

    - :meth:`receive` returns the next chunk of bytes (never empty); chunk
      boundaries carry no meaning. At end of stream it raises
      ``anyio.EndOfStream``; after our own :meth:`aclose` it raises
      ``anyio.ClosedResourceError``. Only one task may receive at a time.
    - :meth:`send` writes all of ``data`` (which may hold several complete
      frames) before returning. Concurrent sends are serialised: the bytes of
      two sends never interleave. Once the peer is gone it raises
      ``anyio.BrokenResourceError``; after our own :meth:`aclose`,
      ``anyio.ClosedResourceError``.
    - :meth:`aclose` releases the transport; the peer then sees end of stream.
      Calling it again does nothing.
    """

    async def receive(self) -> bytes: ...

    async def send(self, data: bytes) -> None: ...

    async def aclose(self) -> None: ...
