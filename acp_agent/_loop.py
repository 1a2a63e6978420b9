"""The event loop: which one runs.

``run`` starts a coroutine function on a named backend: ``asyncio`` (the standard library's
loop), ``uvloop`` (asyncio on libuv, a dependency where it builds: Linux and macOS), ``trio``,
or ``auto``, the default: uvloop when it is installed, else asyncio. This is the one module
that names the backends; everything else runs on anyio.

``running_asyncio_loop`` tells which kind runs (the remote server starts Hypercorn's
matching flavour); ``KeptReader`` waits for a file descriptor to be readable on asyncio
(uvloop too) with one registration kept across waits, the one loop-specific part of the
stdio transport. It knows nothing of what runs on the loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, Literal, TypeVar

if TYPE_CHECKING:
    import asyncio


__all__ = [
    "BACKENDS",
    "Backend",
    "KeptReader",
    "run",
    "running_asyncio_loop",
]

_T = TypeVar("_T")

Backend = Literal["auto", "asyncio", "uvloop", "trio"]
BACKENDS: Final[tuple[Backend, ...]] = ("auto", "asyncio", "uvloop", "trio")


def uvloop_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("uvloop") is not None


def run(fn: Callable[[], Awaitable[_T]], *, backend: Backend = "auto") -> _T:
    """Run ``fn`` to completion on ``backend`` (see the module docstring)."""
    import anyio

    if backend in ("auto", "uvloop"):
        if uvloop_installed():
            return anyio.run(fn, backend="asyncio", backend_options={"use_uvloop": True})
        if backend == "uvloop":
            raise RuntimeError("the uvloop backend needs the uvloop package")
        backend = "asyncio"
    return anyio.run(fn, backend=backend)


def running_asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop; None under another backend (trio)."""
    import asyncio

    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class KeptReader:
    """Waits until ``fd`` is readable, on the running asyncio loop, with a reader kept
    registered across waits instead of one registration (``epoll_ctl`` calls, an event)
    per wait. Readiness that finds no wait unregisters it, so a loop never spins on input
    nobody reads; the next wait registers it again. ``close`` fails a wait in progress."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._loop: asyncio.AbstractEventLoop | None = None  # where the reader is registered
        self._waiter: asyncio.Future[None] | None = None

    async def wait(self) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        if self._loop is None:
            loop.add_reader(self._fd, self._readable)
            self._loop = loop
        waiter = self._waiter = loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _readable(self) -> None:
        waiter = self._waiter
        if waiter is None:
            self._unregister()
        elif not waiter.done():
            waiter.set_result(None)

    def _unregister(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self._fd)
            self._loop = None

    def close(self, error: BaseException) -> None:
        """Unregister; a wait in progress raises ``error``."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        self._unregister()
