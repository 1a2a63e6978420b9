"""The event loop: which one runs.

``run`` starts a coroutine function on a named backend: ``asyncio`` (the standard library's
loop), ``uvloop`` (asyncio on libuv, a dependency where it builds: Linux and macOS), ``trio``,
or ``auto``, the default: uvloop when it is installed, else asyncio. This is the one module
that names the backends; everything else runs on anyio.

``running_asyncio_loop`` tells which kind runs (the remote server starts Hypercorn's
matching flavour). It knows nothing of what runs on the loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, Literal, TypeVar

if TYPE_CHECKING:
    import asyncio


__all__ = [
    "BACKENDS",
    "Backend",
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
