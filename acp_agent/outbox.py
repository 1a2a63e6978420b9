"""The single ordered outbox of one connection: frames queued in order, written soon.

This module owns when queued frames reach the transport: an urgent frame (an answer or
a request: something the peer waits on) goes out at once, with everything queued
before it, when the transport takes it without waiting; notifications are written on
the loop's next pass (a plain callback on asyncio), coalesced; a writer task takes over
whatever has to wait for a slow reader (back-pressure), and ends once it has written it.
It does not know what the frames mean: :mod:`acp_agent.jsonrpc` makes them and the
connection queues them.
"""

from __future__ import annotations

import logging
from typing import Final

import anyio
import anyio.abc
import anyio.lowlevel

from ._loop import Soon, soon
from .transport import DirectSend, Transport

log = logging.getLogger("acp_agent.connection")

JOIN_LIMIT: Final = 1 << 20  # frames are coalesced into one write up to this size
HIGH_WATER: Final = 1 << 16  # outbox bytes above which senders wait for the writer
YIELD_EVERY: Final = 64  # sends between forced checkpoints (lets the reader run)


class Outbox:
    """Frames waiting to be written, in order. :meth:`start` it in a task group."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._frames: list[bytes] = []
        self._size = 0
        self._tg: anyio.abc.TaskGroup | None = None  # where the writer runs (set by start)
        self._writer_running = False
        self._drained: anyio.Event | None = None  # made by the first waiter for a drain
        self._since_yield = 0
        self.writer_failed = False
        self._writing = False  # the writer holds a batch it has not finished sending
        self._try_send = transport.try_send if isinstance(transport, DirectSend) else None
        self._soon: Soon | None = None  # loop.call_soon on asyncio (set by start)
        self._flush_scheduled = False

    @property
    def size(self) -> int:
        """Bytes queued and not yet handed to the transport."""
        return self._size

    def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Called on the running loop before the first frame: learn how to defer a write,
        and where to run the writer."""
        self._soon = soon() if self._try_send is not None else None
        self._tg = tg
        if self._frames:
            self._wake()

    def _wake(self) -> None:
        """Start the writer task unless it runs (no task waits while nothing is queued)."""
        if self._tg is not None and not self._writer_running:
            self._writer_running = True
            self._tg.start_soon(self._write_all, name="acp-writer")

    def due(self) -> bool:
        """Count one sent notification; true when the sender should :meth:`pace`."""
        self._since_yield += 1
        return self._since_yield >= YIELD_EVERY or self._size > HIGH_WATER

    def enqueue(self, frame: bytes, *, urgent: bool = False) -> None:
        """Queue ``frame`` behind everything queued before it.

        An urgent frame (a response or a request: something the peer waits on) is
        written at once, with everything queued before it, when the transport can
        take it without waiting; notifications are left for the writer, which
        coalesces them into few writes.
        """
        self._frames.append(frame)
        self._size += len(frame)
        if urgent:
            self.kick()
        elif self._soon is None:
            self._wake()
        elif not self._flush_scheduled:
            # Written on the loop's next pass by a plain callback, not a task: by then a
            # turn that is ending has usually written this with its response already.
            self._flush_scheduled = True
            self._soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._flush_scheduled = False
        if self._frames:
            self.kick()

    def kick(self) -> None:
        """Write the outbox now if the transport takes it without waiting; else wake
        the writer."""
        if (
            self._frames
            and self._size <= JOIN_LIMIT
            and self._try_send is not None
            and not self._writing
            and not self.writer_failed
        ):
            frames = self._frames
            data = frames[0] if len(frames) == 1 else b"".join(frames)
            try:
                sent = self._try_send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                sent = 0  # the writer's send meets the same error and reports it
            if sent == len(data):
                self._frames = []
                self._size = 0
                if self._drained is not None:
                    self._set_drained()
                return
            rest = data[sent:] if sent else data
            self._frames = [rest]
            self._size = len(rest)
        self._wake()

    def _set_drained(self) -> None:
        """Wake whoever waits for the outbox to be written (see ``_wait_drained``)."""
        drained, self._drained = self._drained, None
        if drained is not None:
            drained.set()

    async def _wait_drained(self) -> None:
        if self._drained is None:
            self._drained = anyio.Event()
        await self._drained.wait()

    async def pace(self) -> None:
        """Called by the senders once the outbox is past ``HIGH_WATER`` or every
        ``YIELD_EVERY`` frames: in between, sending is a plain append."""
        self._since_yield = 0
        if self._size > HIGH_WATER and not self.writer_failed:
            await self._wait_drained()
            return
        # A real checkpoint every few frames lets the reader (a session/cancel) and
        # the writer run.
        await anyio.lowlevel.checkpoint()

    async def _write_all(self) -> None:
        try:
            while self._frames:
                await self._flush_once()
        finally:
            self._writer_running = False
        self._set_drained()

    async def _flush_once(self) -> None:
        frames = self._frames
        size = self._size
        self._frames = []
        self._size = 0
        if self.writer_failed:
            return
        self._writing = True
        try:
            if len(frames) == 1:
                await self._transport.send(frames[0])
            elif size <= JOIN_LIMIT:
                await self._transport.send(b"".join(frames))
            else:  # large frames are not copied into one joined buffer
                for frame in frames:
                    await self._transport.send(frame)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            # The client vanished. Keep running so handlers can unwind; drop output.
            log.warning("the client stopped reading (%s); output is dropped", exc)
            self.writer_failed = True
            self._set_drained()
        finally:
            self._writing = False

    async def flush(self) -> None:
        """Wait until everything enqueued so far has been written (not just taken)."""
        while (self._frames or self._writing) and not self.writer_failed:
            self._wake()
            await self._wait_drained()
