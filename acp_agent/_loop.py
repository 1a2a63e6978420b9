"""The event loop: which one runs, and plain callbacks on it, whichever it is.

``run`` starts a coroutine function on a named backend: ``asyncio`` (the standard library's
loop), ``uvloop`` (asyncio on libuv, a dependency where it builds: Linux and macOS), ``trio``,
or ``auto``, the default: uvloop when it is installed, else asyncio.

anyio offers tasks and events; this module owns the two smaller things the hot paths need:
a callback run on the loop's next pass (no task, no wake-up of one: about a tenth of the
cost on asyncio), a way for a worker thread to hand a callback to the loop without
waiting for it to run, and the cheap one-shot event a caller waits on for an answer.
It knows nothing of what the callbacks do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

if TYPE_CHECKING:
    import asyncio

    import anyio

__all__ = [
    "BACKENDS",
    "Backend",
    "CallWaiter",
    "Flag",
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


class Flag:
    """A one-shot event on a bare asyncio future: what ``anyio.Event`` does on asyncio,
    for a fraction of the cost (one is made per outbound call). Set, it stays set, even
    when a wait on it was cancelled first."""

    __slots__ = ("_fut", "_set")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._fut: asyncio.Future[None] = loop.create_future()
        self._set = False

    def set(self) -> None:
        self._set = True
        if not self._fut.done():
            self._fut.set_result(None)

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        if not self._set:
            if self._fut.cancelled():  # an earlier wait was cancelled
                self._fut = self._fut.get_loop().create_future()
            await self._fut


class CallWaiter:
    """Where a caller waits for the answer to its request: a :class:`Flag` on asyncio
    (``loop`` given), an ``anyio.Event`` elsewhere."""

    __slots__ = ("error", "event", "result")

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        if loop is None:
            import anyio

            self.event: Flag | anyio.Event = anyio.Event()
        else:
            self.event = Flag(loop)
        self.result: Any = None
        self.error: BaseException | None = None

    def settle(self, result: Any, error: BaseException | None) -> None:
        self.result = result
        self.error = error
        self.event.set()
