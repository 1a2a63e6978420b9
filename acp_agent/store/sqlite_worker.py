"""The worker thread of the SQLite store: jobs run there one at a time, in arrival order.

It owns the thread, its queue and the hand-over of each result to the event loop, and
counts the jobs, so that the store can tell when none is queued or running (``free``):
only then may the store use its other connection on the event loop's thread without
overtaking an earlier operation. It knows nothing of SQL.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from functools import partial
from typing import Any, Final, TypeVar, cast

import anyio.lowlevel

from acp_agent._loop import thread_result

__all__ = ["Worker"]

_T = TypeVar("_T")

_NUDGE: Final = ("nudge",)  # a wake-up of the worker thread, not a job


class Worker:
    """A thread that runs jobs in arrival order; callers await their results.

    The result is handed back to the event loop as a callback (no thread waits for the
    loop). A job, once queued, always runs to its end; a caller cancelled meanwhile
    stops waiting for it.
    """

    def __init__(self, idle: Callable[[], None]) -> None:
        """``idle`` runs on the thread when no job is left to run."""
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="acp-agent-sqlite", daemon=True)
        self._idle = idle
        self._queued = 0  # jobs queued so far (counted on the event loop's thread)
        self._finished = 0  # jobs run to their end (counted on the worker thread)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._jobs.put(None)

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if job is _NUDGE:
                idle = self._jobs.empty()
            else:
                fn, done = job
                del job
                try:
                    outcome: tuple[bool, Any] = (True, fn())
                except BaseException as exc:  # handed to the waiting task, which raises it
                    outcome = (False, exc)
                self._finished += 1
                del fn
                idle = self._jobs.empty()  # nothing waits: after this answer, a good moment
                with contextlib.suppress(RuntimeError):  # the event loop is already gone
                    done(outcome)
                del done, outcome
            if idle:
                self._idle()

    @property
    def free(self) -> bool:
        """On the event loop's thread: no job is queued or running."""
        return self._finished == self._queued

    def post(self, fn: Callable[[], object], done: Callable[[tuple[bool, Any]], object]) -> None:
        """Queue ``fn`` without waiting for it: ``done`` gets its outcome, ``(True, result)``
        or ``(False, exception)``, on the worker thread."""
        self._queued += 1
        self._jobs.put((fn, done))

    def nudge(self) -> None:
        """Have the thread run ``idle`` soon (this is no job: ``free`` stays true)."""
        self._jobs.put(_NUDGE)

    async def run(self, fn: Callable[[], _T]) -> _T:
        await anyio.lowlevel.checkpoint_if_cancelled()  # a cancelled caller starts nothing
        self._queued += 1
        ok, value = await thread_result(partial(self._put, fn))
        if ok:
            return cast(_T, value)
        raise value

    def _put(self, fn: Callable[[], object], done: Callable[[tuple[bool, Any]], object]) -> None:
        self._jobs.put((fn, done))
