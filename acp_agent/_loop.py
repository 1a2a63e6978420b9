"""The event loop: which one runs.

``run`` starts a coroutine function on a named backend: ``asyncio`` (the standard library's
loop), ``uvloop`` (asyncio on libuv, a dependency where it builds: Linux and macOS), ``trio``,
or ``auto``, the default: uvloop when it is installed, else asyncio. This is the one module
that names the backends; everything else runs on anyio.

It knows nothing of what runs on the loop. (``soon``, ``later``, ``threadsafe_soon`` and
``thread_result`` are left for ``persistence.py`` and ``store/`` only, and go when those
stop using them.)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, Literal, TypeVar

if TYPE_CHECKING:
    import asyncio


__all__ = [
    "BACKENDS",
    "Backend",
    "Soon",
    "later",
    "run",
    "running_asyncio_loop",
    "soon",
    "thread_result",
    "threadsafe_soon",
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


def later() -> Callable[[float, Callable[[], object]], object] | None:
    """``loop.call_later`` of the running asyncio loop (a callback after a delay, no task);
    None elsewhere."""
    loop = running_asyncio_loop()
    return None if loop is None else loop.call_later


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


async def thread_result(submit: Callable[[Callable[[_T], object]], None]) -> _T:
    """Hand ``submit`` a callback that another thread calls once with a value; wait for
    that value. The callback raises ``RuntimeError`` once the loop has stopped, and does
    nothing if the waiting task was cancelled meanwhile.

    On asyncio this is a bare future (a worker thread's answer then costs one wake-up of
    the loop); elsewhere an anyio event.
    """
    loop = running_asyncio_loop()
    if loop is not None:
        future: asyncio.Future[_T] = loop.create_future()

        def deliver(value: _T) -> None:
            if not future.done():
                future.set_result(value)

        submit(lambda value: loop.call_soon_threadsafe(deliver, value))
        return await future

    import anyio

    done = anyio.Event()
    box: list[_T] = []

    def hand_over(value: _T) -> None:
        box.append(value)
        done.set()

    post = threadsafe_soon()
    submit(lambda value: post(lambda: hand_over(value)))
    await done.wait()
    return box[0]
