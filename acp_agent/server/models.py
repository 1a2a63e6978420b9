"""The protocol models, built once per process: at once when a request needs them, or
in a thread once an initialized client has gone quiet.

Importing pydantic and building the models costs hundreds of milliseconds of CPU.
Done in a thread while requests stream in, it would take the interpreter lock from
them in 5 ms slices; so the warm-up waits until nothing has arrived and nothing is
running for ``WARM_IDLE`` seconds (a person reading or typing). Plain text prompts
never need the models; any other request that does builds them at once
(:meth:`ProtocolModels.ensure`).

It does not parse requests; it only makes the models ready.
"""

from __future__ import annotations

from typing import Final

import anyio
import anyio.to_thread

from ..connection import AgentSession

WARM_IDLE: Final = 0.1  # seconds of a quiet connection before the models are built

_models_built = False  # set once per process: the models are shared by every server


def build_models() -> None:
    """Import pydantic and build the protocol models, once per process (any thread)."""
    global _models_built
    from ..protocol import PromptRequest
    from ..protocol.wire import from_wire

    from_wire(PromptRequest, {"sessionId": "warm-up", "prompt": [{"type": "text", "text": ""}]})
    _models_built = True


def models_built() -> bool:
    return _models_built


class ProtocolModels:
    """One connection's view of the models: who builds them, who waits."""

    __slots__ = ("ready",)

    def __init__(self) -> None:
        #: made by the first build this connection starts (None: none started)
        self.ready: anyio.Event | None = None

    async def ensure(self) -> None:
        """Wait until the models are built, building them (in a thread) if nobody has."""
        if _models_built:
            return
        ready = self.ready
        if ready is None:
            ready = self.ready = anyio.Event()
            try:
                await anyio.to_thread.run_sync(build_models, abandon_on_cancel=True)
            finally:
                ready.set()
        elif not ready.is_set():  # (waiting on a set Event would still yield)
            await ready.wait()

    async def warm_when_idle(self, initialized: anyio.Event, conn: AgentSession) -> None:
        """After ``initialized``, build the models once the connection goes quiet."""
        await initialized.wait()
        while self.ready is None and not _models_built:
            seen = conn.received_count
            await anyio.sleep(WARM_IDLE)
            if conn.received_count == seen and not conn.inflight_count:
                await self.ensure()
