"""Prompt turns: ``session/prompt`` and ``session/cancel``, one path for every prompt.

A :class:`Prompt` is the record of one prompt from the moment it is read to its answer.
:meth:`Turns.prompt` follows it top to bottom:

1. arrival (:meth:`Turns._arrive`, before the handler's first ``await``, so in the order
   the client sent it): behind a ``session/load`` or ``close`` of its session it takes a
   place in the session's line (:mod:`.ordering`); else it takes the prompt slot if the
   slot is free and nobody waits for it, or a place in the slot's FIFO line
   (``busy_policy`` queue). A ``session/cancel`` or ``session/close`` read next then
   finds it;
2. its params are checked (plain text without pydantic, anything else through the
   generated models);
3. without the slot, it waits for it (kept durably meanwhile on a store shared by
   several hosts) or is refused at once (``busy_policy`` reject);
4. the agent runs the turn, with its optional time limit; its one authoritative end is
   written after the turn is durable, then answered. A cancel of the request
   (``$/cancel_request``, shutdown) once it holds the slot ends the turn ``cancelled``.
   A cancel (``session/cancel`` or of the request) that comes while the turn's last write
   is in flight answers ``cancelled`` at once; the write goes on in the persister's task,
   and the session's next prompt waits until it is confirmed (see :mod:`..persistence`).

Prompts another host held for a session (it died or lost the session) take the same
path, from step 2, with no request to answer (:meth:`Turns.run_held`).

It does not create or close sessions (:mod:`.lifecycle`) and knows nothing of JSON-RPC
beyond the request context it is handed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from ..agent import Agent, PromptTurn, run_prompt
from ..client import SessionClient
from ..dispatch import RequestContext
from ..errors import (
    ConnectionClosed,
    InternalError,
    InvalidParams,
    PathOutsideRoots,
    PromptAlreadyActive,
    RequestError,
    SessionLeased,
    TurnTimeout,
)
from ..history import FAILED_TURN
from ..options import ServerOptions
from ..persistence import Persister
from ..prompt_slot import CancelReason, Turn
from ..protocol.wire import MAX_PROMPT_DEPTH, nesting_within, plain_text_prompt
from ..session import Session
from .handshake import Handshake
from .live import OpenSessions
from .models import ProtocolModels
from .ordering import ArrivalOrder, Place
from .params import (
    JSON,
    check_prompt_blocks,
    log,
    not_found,
    params_object,
    require_session_id,
    session_id_of,
)

if TYPE_CHECKING:
    from ..protocol import PromptRequest

#: a prompt's params, its typed request when already built, its content blocks
Parsed = tuple[JSON, "PromptRequest | None", list[Any]]


@dataclass(eq=False)
class Prompt:
    """One prompt, from arrival to answer. Its :class:`Turn` exists from arrival, so a
    cancel read while it waits marks it (the turn then ends ``cancelled`` unrun)."""

    params: Any
    turn: Turn
    #: when it was read (ns since the epoch): orders it among prompts held in the store
    arrival: int
    #: the live session it names, once known
    session: Session | None = None
    #: its place in the session's line, while a load or close ahead of it runs
    place: Place | None = None
    #: its place in the slot's FIFO line, while it waits for the slot
    waiter: anyio.Event | None = None
    #: whether it took the slot (then it must give it back)
    holds_slot: bool = False
    #: the turn before it (it may still unwind) and the client its turn streams to
    previous: Turn | None = None
    client: SessionClient | None = None
    #: kept in the store by another host (no request waits for its answer)
    held: bool = False


def new_turn_id() -> str:
    return f"turn_{os.urandom(8).hex()}"


class Turns:
    """Run one prompt turn at a time per session."""

    def __init__(
        self,
        agent: Agent,
        options: ServerOptions,
        open_sessions: OpenSessions,
        persister: Persister,
        order: ArrivalOrder,
        handshake: Handshake,
        models: ProtocolModels,
    ) -> None:
        self._agent, self._options, self._open = agent, options, open_sessions
        self._persister, self._order = persister, order
        self._handshake, self._models = handshake, models

    # ------------------------------------------------------------------ methods

    async def prompt(self, params: Any, ctx: RequestContext) -> JSON:
        """``session/prompt``: the one path of a prompt, arrival to answer."""
        return await self._serve(self._arrive(params))

    async def cancel(self, params: Any) -> None:
        """``session/cancel``: applies to the prompts read before it (nothing awaited)."""
        session_id = session_id_of(params)
        if session_id is None:
            return
        self._order.cancel(session_id)  # prompts waiting behind a load or a close
        session = self._open.get(session_id)
        if session is None:
            return  # unknown or closed: a silent no-op
        turn = session.slot.cancel()
        if turn is not None:
            turn.cancel(CancelReason.SESSION_CANCEL)

    async def run_held(self, session: Session) -> None:
        """Run, in arrival order, the prompts other hosts held for ``session`` (queued
        there, never begun: the host died or lost the session). Their senders are gone,
        so their answers go nowhere; their turns stream to this session's client."""
        for turn_id, params in await self._persister.held_prompts(session.session_id):
            if self._open.get(session.session_id) is not session:
                return  # closed or reloaded: the next owner runs the rest
            prompt = Prompt(params, Turn(turn_id), time.time_ns(), session=session, held=True)
            try:
                await self._serve(prompt)
            except SessionLeased:
                return  # another host owns it now and runs what is left
            except RequestError as exc:
                log.info("held prompt %s of session %s: %s", turn_id, session.session_id, exc)

    # ------------------------------------------------------------------ the path

    def _arrive(self, params: Any) -> Prompt:
        """Take the prompt's place in arrival order (called before any ``await``)."""
        prompt = Prompt(params, Turn(new_turn_id()), time.time_ns())
        session_id = session_id_of(params)
        if session_id is not None and self._order.busy(session_id):
            prompt.place = self._order.enter(session_id)
        else:
            self._claim(prompt, session_id)
        return prompt

    def _claim(self, prompt: Prompt, session_id: str | None) -> None:
        """Take the slot, or a place in its line, as of now (nothing awaited)."""
        if not self._handshake.initialized.is_set() or session_id is None:
            return
        session = self._open.get(session_id)
        if session is None:
            return
        prompt.session = session
        # Queued prompts keep their places: a slot freed by a cancel is theirs first.
        if not session.slot.waiting and self._take_slot(prompt, session):
            return
        if self._options.busy_policy == "queue" and not session.closed:
            prompt.waiter = session.slot.enqueue()

    def _take_slot(self, prompt: Prompt, session: Session) -> bool:
        if not session.slot.try_start(prompt.turn):
            return False
        prompt.holds_slot = True
        prompt.session = session
        prompt.previous, session.last_turn = session.last_turn, prompt.turn
        prompt.client = self._open.client(session)
        return True

    async def _serve(self, prompt: Prompt) -> JSON:
        try:
            if prompt.place is not None:
                await self._wait_in_line(prompt, prompt.place)
            self._handshake.check_initialized()
            session = prompt.session
            if session is None:
                session = self._open.live(require_session_id(params_object(prompt.params)))
            try:
                parsed = await self._parse(prompt.params)
            except RequestError:
                if prompt.held:  # it can never run
                    await self._persister.drop_prompt(session.session_id, prompt.turn.turn_id)
                raise
            if not prompt.holds_slot:
                await self._wait_for_slot(prompt, session)
            return await self._run(prompt, session, parsed)
        finally:
            self._release(prompt)

    async def _wait_in_line(self, prompt: Prompt, place: Place) -> None:
        """Wait for the requests read before it for its session (a load, a close), then
        take the slot as if it had arrived now; a cancel read meanwhile cancels it."""
        try:
            await place.wait()
            self._claim(prompt, place.session_id)
        finally:
            self._order.leave(place)
        if place.cancelled:  # a session/cancel was read while it waited: it will not run
            session = prompt.session
            if prompt.holds_slot and session is not None and session.slot.turn is prompt.turn:
                session.slot.cancel()
            prompt.turn.cancel(CancelReason.SESSION_CANCEL)

    async def _parse(self, params: Any) -> Parsed:
        """Validate the params: (params, the typed request or None, the blocks).

        A prompt of plain text blocks (the common case) is checked here exactly, without
        pydantic, and its typed model is left for :attr:`PromptTurn.request` to build if
        the agent asks for it; anything else goes through the generated models.
        """
        raw = params_object(params)
        if plain_text_prompt(raw):  # only text blocks: none needs a capability
            return raw, None, raw["prompt"]
        if not nesting_within(raw, MAX_PROMPT_DEPTH):
            # What cannot be stored and replayed is refused before the turn starts.
            raise InvalidParams(f"the prompt nests deeper than {MAX_PROMPT_DEPTH} levels")
        await self._models.ensure()
        from ..protocol import PromptRequest
        from ..protocol.wire import from_wire

        request = from_wire(PromptRequest, raw)
        blocks = raw["prompt"]
        check_prompt_blocks(blocks, self._agent)
        return raw, request, blocks

    async def _wait_for_slot(self, prompt: Prompt, session: Session) -> None:
        """Take the slot, refusing at once or waiting in FIFO order (``busy_policy``).

        A waiter keeps its place until it holds the slot, so a prompt read while the
        first in line is being woken queues behind it instead of taking the slot.
        """
        slot = session.slot
        if prompt.waiter is None and slot.waiting:
            prompt.waiter = slot.enqueue()
        # kept durably while it waits (its turn's first write removes it)
        hold = prompt.waiter is not None and self._persister.holds_prompts and not prompt.held
        turn_id = prompt.turn.turn_id
        try:
            if hold:
                await self._persister.hold_prompt(
                    session.session_id, turn_id, prompt.params, prompt.arrival
                )
            while True:
                if prompt.waiter is not None:
                    await prompt.waiter.wait()
                    slot.leave(prompt.waiter, pass_on=False)
                    prompt.waiter = None
                if self._take_slot(prompt, session):
                    return
                if session.closed or self._open.get(session.session_id) is not session:
                    raise not_found(session.session_id, "is closed")
                if self._options.busy_policy == "reject" and not prompt.held:
                    raise PromptAlreadyActive(
                        f"A prompt is already active for session {session.session_id}"
                    )
                prompt.waiter = slot.enqueue()
        except BaseException as exc:
            if hold and not isinstance(exc, SessionLeased):  # answered: it will not run
                with anyio.CancelScope(shield=True):
                    await self._persister.drop_prompt(session.session_id, turn_id)
            raise

    def _release(self, prompt: Prompt) -> None:
        session = prompt.session
        if session is None:
            return
        if prompt.waiter is not None:  # gave up waiting: a wake-up it had goes on
            session.slot.leave(prompt.waiter, pass_on=True)
        if prompt.holds_slot:
            if not prompt.turn.finished:
                prompt.turn.finish(None)  # ended before it ran (bad params, closed session)
            session.slot.end_if_current(prompt.turn)
            session.slot.wake_next()

    async def _saved(self, turn: Turn, session: Session) -> bool:
        """Wait for the turn's writes; True if a cancel came first (the turn is answered
        ``cancelled``, its write goes on)."""
        try:
            with turn.saving(shield=turn.cancel_reason is CancelReason.CANCEL_REQUEST) as wait:
                await self._persister.sync(session.session_id)
            if not wait.cancelled_caught:
                return False
        except anyio.get_cancelled_exc_class():
            # The request was cancelled ($/cancel_request, shutdown) while it waited.
            if session.slot.turn is turn:
                session.slot.cancel()
            turn.cancel(CancelReason.CANCEL_REQUEST)
        self._persister.answered_cancelled(session.session_id, turn.turn_id)
        log.info(
            "turn %s of session %s answered cancelled before its write was confirmed",
            turn.turn_id,
            session.session_id,
        )
        return True

    async def _run(self, prompt: Prompt, session: Session, parsed: Parsed) -> JSON:
        params, request, blocks = parsed
        turn, client = prompt.turn, prompt.client
        assert client is not None  # given with the slot
        previous = prompt.previous
        if (previous is not None and not previous.finished) or session.history_turn is not None:
            with anyio.CancelScope(shield=True):  # a cancel now applies to the turn, below
                if previous is not None and not previous.finished:
                    # A cancelled turn may still be unwinding: its history closes first.
                    await previous.done.wait()
                while (holder := session.history_turn) is not None:
                    # An older turn still unwinds (one that never ran can sit in between).
                    await holder.done.wait()
        # Another host serves it now, or its last write failed and fails again: refused
        # before the agent runs.
        await self._persister.before_turn(session.session_id)
        handle = session.history.start_turn(turn.turn_id, blocks)
        session.history_turn = turn
        prompt_turn = PromptTurn(session, client, params, blocks, turn.turn_id, _request=request)
        stop: str | None = None
        error: RequestError | None = None
        timeout = self._options.turn_timeout
        try:
            with turn.scope:
                # A cancel (or close) read before the turn began: the prompt is kept in
                # history, the agent never runs it.
                if not turn.cancelled:
                    if timeout is not None:
                        turn.scope.deadline = anyio.current_time() + timeout
                    stop = await run_prompt(self._agent, prompt_turn)
            if turn.expire():  # the time limit came before any cancel
                session.slot.time_out(turn)
                stop = None
                error = TurnTimeout(f"The prompt turn exceeded its {timeout:g} s time limit")
        except anyio.get_cancelled_exc_class():
            # The request was cancelled ($/cancel_request, shutdown): the turn ends so.
            if session.slot.turn is turn:
                session.slot.cancel()
            turn.cancel(CancelReason.CANCEL_REQUEST)
        except RequestError as exc:
            error = exc
        except ConnectionClosed:
            # The client went away mid-turn (its answer to our call will never come):
            # the turn ends cancelled, as on end of input.
            turn.cancel(CancelReason.SHUTDOWN)
        except PathOutsideRoots as exc:
            # A path from the prompt that leaves the session's roots: bad input.
            error = InvalidParams(str(exc))
        finally:
            final = "cancelled" if turn.cancelled else (stop if error is None else None)
            if final is not None:
                handle.commit(final)
                self._persister.end(session.session_id, turn.turn_id, final)
            else:
                handle.abandon()
                self._persister.end(session.session_id, turn.turn_id, FAILED_TURN)
            try:
                # Durable before the answer. A failed write of this session (and only of
                # this one) fails the turn. A cancel that comes while it waits answers at
                # once; a cancel of the request that came before does not end the wait.
                if await self._saved(turn, session):
                    final = "cancelled"
            finally:
                if session.history_turn is turn:
                    session.history_turn = None
                turn.finish(final)
                log.debug(
                    "turn %s of session %s ended: %s",
                    turn.turn_id,
                    session.session_id,
                    final or f"error {error.code if error is not None else '?'}",
                )
        if final is None:
            raise error if error is not None else InternalError("The turn ended without a result")
        refused = self._persister.refused(session.session_id)
        if refused is not None:  # fenced out: the history is the new owner's
            raise refused
        if self._options.unstable and prompt_turn.usage is not None:
            return {"stopReason": final, "usage": prompt_turn.usage}
        return {"stopReason": final}
