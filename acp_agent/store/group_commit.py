"""Group commit: the turn writes of one host waiting at the same moment, in one transaction.

It owns the batching only. ``write`` queues one write's parameters and waits for its outcome.
The first caller that finds no batch in flight leads: it lets the other ready tasks run
once (a commit on the event loop's thread would otherwise always go alone), takes every
write waiting then, hands them to the commit function it was given (one transaction, one WAL flush),
and wakes each writer with its own outcome; writes that arrive meanwhile form the next batch,
led by one of their own callers. No task runs in the background: every batch is committed by
a caller that waits for it. A batch is committed shielded from its leader's cancellation, so
its outcome always reaches every writer in it; a write cancelled before a batch took it is not
written, and one cancelled after returns its outcome all the same.

It knows nothing of SQL, threads or connections (``acp_agent.store.postgres`` and
``acp_agent.store.sqlite`` give it the commit function), and nothing of what an outcome means.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio
import anyio.lowlevel

__all__ = ["GroupCommit"]

P = TypeVar("P")
R = TypeVar("R")


@dataclass(slots=True)
class _Pending(Generic[P, R]):
    params: P
    outcome: R | None = None
    error: BaseException | None = None
    done: anyio.Event = field(default_factory=anyio.Event)


class GroupCommit(Generic[P, R]):
    """Writes waiting at the same moment, committed together by ``commit``.

    ``commit`` receives the batch's parameters in arrival order and returns one outcome per
    write, in the same order; if it raises, every write of the batch raises that error.
    """

    def __init__(self, commit: Callable[[Sequence[P]], Awaitable[Sequence[R]]]) -> None:
        self._commit = commit
        self._waiting: list[_Pending[P, R]] = []
        self._leading = False
        self._free = anyio.Event()  # set (and replaced) when a batch ends

    async def write(self, params: P) -> R:
        """Queue one write and wait until the batch holding it is committed."""
        pending: _Pending[P, R] = _Pending(params)
        self._waiting.append(pending)
        try:
            while not pending.done.is_set():
                if self._leading:
                    await self._free.wait()  # the batch in flight ends (this may be in it)
                else:
                    await self._lead()
        except BaseException:
            if pending in self._waiting:  # cancelled before any batch took it: not written
                self._waiting.remove(pending)
                raise
            # In the batch in flight: its outcome is its caller's, as if it had come
            # first; the cancellation is raised at the caller's next checkpoint.
            with anyio.CancelScope(shield=True):
                await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return pending.outcome  # type: ignore[return-value]

    async def _lead(self) -> None:
        self._leading = True
        batch: list[_Pending[P, R]] = []
        try:
            with anyio.CancelScope(shield=True):
                await anyio.lowlevel.checkpoint()  # writers ready now join this batch
                batch, self._waiting = self._waiting, []
                outcomes = await self._commit([pending.params for pending in batch])
            for pending, outcome in zip(batch, outcomes, strict=True):
                pending.outcome = outcome
        except BaseException as exc:
            for pending in batch:
                pending.error = exc
            if not isinstance(exc, Exception):
                raise
        finally:
            self._leading = False
            for pending in batch:
                pending.done.set()
            free, self._free = self._free, anyio.Event()
            free.set()
