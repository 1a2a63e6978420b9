"""Scheduling plain callbacks on the running event loop, whichever backend runs it.

anyio offers tasks and events; this module owns the two smaller things the hot paths need:
a callback run on the loop's next pass (no task, no wake-up of one: about a tenth of the
cost on asyncio), and a way for a worker thread to hand a callback to the loop without
waiting for it to run. It knows nothing of what the callbacks do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

__all__ = ["Soon", "running_asyncio_loop", "soon", "threadsafe_soon"]

#: schedules a synchronous callback to run on the event loop's thread
Soon = Callable[[Callable[[], object]], object]


def running_asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop; None under another backend (trio)."""
    import asyncio

    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def soon() -> Soon | None:
    """``loop.call_soon`` of the running asyncio loop; None elsewhere (callers then use
    an event and a task, which is what a callback costs on trio anyway)."""
    loop = running_asyncio_loop()
    return None if loop is None else loop.call_soon


def threadsafe_soon() -> Soon:
    """For another thread: run a callback on the running loop, without waiting for it.

    Call it on the loop's thread; the function it returns may be called from any thread
    and raises ``RuntimeError`` once the loop has stopped.
    """
    loop = running_asyncio_loop()
    if loop is not None:
        return loop.call_soon_threadsafe
    import trio

    return trio.lowlevel.current_trio_token().run_sync_soon
