"""Prompt turns: ``session/prompt`` and ``session/cancel``.

It owns taking the one prompt slot of a session (refused at once or queued FIFO by
``busy_policy``), parsing the prompt, running the agent's turn with its optional time
limit, and the turn's one authoritative end, written after the turn is durable. On a
store shared by several hosts it also checks the session's lease before a turn, keeps
queued prompts in the store while they wait, and runs those another host left behind.
It does not create or close sessions (:mod:`.lifecycle`).
"""

from __future__ import annotations

import os
import time
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from ..agent import PromptTurn, run_prompt
from ..client import SessionClient
from ..connection import RequestContext
from ..errors import (
    ConnectionClosed,
    InternalError,
    InvalidParams,
    PathOutsideRoots,
    PromptAlreadyActive,
    RequestError,
    ResourceNotFound,
    SessionLeased,
    TurnTimeout,
)
from ..history import FAILED_TURN, STOP_REASONS
from ..prompt_slot import CancelReason, Turn
from ..protocol.wire import MAX_PROMPT_DEPTH, nesting_within, plain_text_prompt
from ..session import Session
from .base import JSON, ParsedPrompt, ServerBase, log, params_object, require_session_id
from .ordering import Place


class PromptTurns(ServerBase):
    """Run one prompt turn at a time per session."""

    async def _acquire_slot(
        self, session: Session, turn: Turn, waiter: anyio.Event | None = None
    ) -> None:
        """Take the slot, refusing at once or waiting in FIFO order (``busy_policy``).

        ``waiter`` is a place in the queue taken at arrival (by :meth:`_claim_slot`). A
        waiter keeps its place until it holds the slot, so a prompt read while the
        first in line is being woken queues behind it instead of taking the slot.
        """
        slot = session.slot
        if waiter is None and slot.waiting:
            waiter = slot.enqueue()
        while True:
            if waiter is not None:
                try:
                    await waiter.wait()
                except BaseException:
                    slot.leave(waiter, pass_on=True)
                    raise
                slot.leave(waiter, pass_on=False)
                waiter = None
            if session.slot.try_start(turn):
                return
            if session.closed or session.session_id not in self.sessions:
                raise ResourceNotFound(
                    f"Session {session.session_id!r} is closed",
                    data={"sessionId": session.session_id},
                )
            if self.busy_policy == "reject":
                raise PromptAlreadyActive(
                    f"A prompt is already active for session {session.session_id}"
                )
            waiter = slot.enqueue()

    def _prompt_arrived(self, params: Any, ctx: RequestContext) -> None:
        """Claim the slot at arrival, or, while other requests for the session wait in
        its line (a load, a close), take a place behind them (see ordering)."""
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        if isinstance(session_id, str) and self._order.busy(session_id):
            ctx.state["place"] = self._order.enter(session_id)
        else:
            self._claim_slot(params, ctx)

    def _claim_slot(self, params: Any, ctx: RequestContext) -> None:
        """Take the prompt slot in arrival order (run by the receive loop, not a task).

        A ``session/cancel`` or ``session/close`` read right after this prompt then
        finds its turn, even if the prompt's handler task has not started yet.
        """
        if not self.initialized or not isinstance(params, dict):
            return
        session_id = params.get("sessionId")
        session = self.sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None:
            return
        turn = Turn(f"turn_{os.urandom(8).hex()}", self._new_scope())
        # Queued prompts keep their places: a slot freed by a cancel is theirs first.
        if not session.slot.waiting and session.slot.try_start(turn):
            ctx.state["claim"] = (session, turn, session.last_turn, self._client(session))
            session.last_turn = turn
            ctx.cancel_hook = lambda: self._cancel_turn(session, turn, CancelReason.CANCEL_REQUEST)
        elif self.busy_policy == "queue" and not session.closed:
            # Queue in arrival order, not in the order handler tasks happen to start.
            ctx.state["waiter"] = (session, session.slot.enqueue())
            ctx.state["arrival"] = time.time_ns()  # orders it if it is held (shared stores)

    async def _parse_prompt(self, params: Any) -> ParsedPrompt:
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
        await self._models()
        from ..protocol import PromptRequest
        from ..protocol.wire import from_wire

        request = from_wire(PromptRequest, raw)
        blocks = raw["prompt"]
        self._check_prompt_blocks(blocks)
        return raw, request, blocks

    async def _prompt(self, params: Any, ctx: RequestContext) -> JSON:
        place: Place | None = ctx.state.pop("place", None)
        if place is not None:
            try:
                await place.wait()
                self._claim_slot(params, ctx)  # as if it had arrived now
            finally:
                self._order.leave(place)
            if place.cancelled:  # a session/cancel read while it waited: it will not run
                ctx.state["cancelled"] = True
                claimed = ctx.state.get("claim")
                if claimed is not None:
                    session, turn = claimed[0], claimed[1]
                    self._cancel_turn(session, turn, CancelReason.SESSION_CANCEL)
        claim: tuple[Session, Turn, Turn | None, SessionClient] | None = ctx.state.pop(
            "claim", None
        )
        if claim is None:
            self._check_initialized()  # a claim is only made once initialized
            return await self._prompt_unclaimed(params, ctx, ctx.state.pop("waiter", None))
        session, turn, previous, client = claim
        try:
            parsed = await self._parse_prompt(params)
            return await self._run_turn(session, client, turn, previous, parsed)
        finally:
            self._release(session, turn)

    async def _prompt_unclaimed(
        self, params: Any, ctx: RequestContext, queued: tuple[Session, anyio.Event] | None
    ) -> JSON:
        try:
            session = self._live(require_session_id(params_object(params)))
            parsed = await self._parse_prompt(params)
        except BaseException:
            if queued is not None:
                session_queued, waiter_queued = queued
                if waiter_queued is not None:
                    session_queued.slot.leave(waiter_queued, pass_on=True)
            raise
        turn = Turn(f"turn_{os.urandom(8).hex()}", self._new_scope())
        if ctx.state.pop("cancelled", False):
            turn.cancel(CancelReason.SESSION_CANCEL)  # it waits for the slot, then ends
        waiter = queued[1] if queued is not None and queued[0] is session else None
        held = waiter is not None and self._persister.holds_prompts
        try:
            if held:  # kept durably while it waits (its turn's first write removes it)
                arrival = ctx.state.get("arrival") or time.time_ns()
                await self._persister.hold_prompt(session.session_id, turn.turn_id, params, arrival)
            await self._acquire_slot(session, turn, waiter)
        except BaseException as exc:
            if held and not isinstance(exc, SessionLeased):  # answered: it will not run
                with anyio.CancelScope(shield=True):
                    await self._persister.drop_prompt(session.session_id, turn.turn_id)
            raise
        try:
            previous, session.last_turn = session.last_turn, turn
            client = self.clients.get(session.session_id)
            if client is None:
                raise ResourceNotFound(
                    f"Session {session.session_id!r} is closed",
                    data={"sessionId": session.session_id},
                )
            ctx.cancel_hook = lambda: self._cancel_turn(session, turn, CancelReason.CANCEL_REQUEST)
            return await self._run_turn(session, client, turn, previous, parsed)
        finally:
            self._release(session, turn)

    async def _run_held_prompts(self, session: Session) -> None:
        """Run, in arrival order, the prompts other hosts held for ``session`` (queued
        there, never begun: the host died or lost the session). Their senders are gone,
        so their answers go nowhere; their turns stream to this session's client."""
        for turn_id, params in await self._persister.held_prompts(session.session_id):
            if self.sessions.get(session.session_id) is not session:
                return  # closed or reloaded: the next owner runs the rest
            turn = Turn(turn_id, self._new_scope())
            try:
                try:
                    parsed = await self._parse_prompt(params)
                except RequestError:  # it can never run
                    await self._persister.drop_prompt(session.session_id, turn_id)
                    raise
                if not session.slot.try_start(turn):
                    await self._acquire_slot(session, turn, session.slot.enqueue())
                previous, session.last_turn = session.last_turn, turn
                await self._run_turn(session, self._client(session), turn, previous, parsed)
            except SessionLeased:
                return  # another host owns it now and runs what is left
            except RequestError as exc:
                log.info("held prompt %s of session %s: %s", turn_id, session.session_id, exc)
            finally:
                self._release(session, turn)

    def _release(self, session: Session, turn: Turn) -> None:
        if not turn.finished:
            turn.finish(None)  # ended before it ran (bad params, closed session)
        session.slot.end_if_current(turn)
        session.slot.wake_next()

    async def _run_turn(
        self,
        session: Session,
        client: SessionClient,
        turn: Turn,
        previous: Turn | None,
        parsed: ParsedPrompt,
    ) -> JSON:
        if previous is not None and not previous.finished:
            # A cancelled turn may still be unwinding: its history closes first.
            await previous.done.wait()
        while (holder := session.history_turn) is not None:
            # An older turn still unwinds (one that never ran can sit in between).
            await holder.done.wait()
        params, request, blocks = parsed
        # Another host serves it now, or its last write failed and fails again: refused
        # before the agent runs.
        await self._persister.before_turn(session.session_id)
        handle = session.history.start_turn(turn.turn_id, blocks)
        session.history_turn = turn
        prompt_turn = PromptTurn(session, client, params, blocks, turn.turn_id, _request=request)
        stop: str | None = None
        error: RequestError | None = None
        try:
            with turn.scope:
                if turn.cancelled:
                    # The cancel (or close) arrived before the turn began: the prompt
                    # is kept in history, the agent never runs it.
                    pass
                else:
                    if self.turn_timeout is not None:
                        turn.scope.deadline = anyio.current_time() + self.turn_timeout
                    stop = await run_prompt(self.agent, prompt_turn)
            if turn.expire():  # the time limit came before any cancel
                session.slot.time_out(turn)
                stop, error = (
                    None,
                    TurnTimeout(f"The prompt turn exceeded its {self.turn_timeout:g} s time limit"),
                )
            if stop is not None and stop not in STOP_REASONS:
                log.error("agent returned an invalid stop reason %r", stop)
                error, stop = (
                    InternalError("The agent ended the turn with an invalid stop reason"),
                    None,
                )
        except RequestError as exc:
            error = exc
        except ConnectionClosed:
            # The client went away mid-turn (its answer to our call will never come):
            # the turn ends cancelled, as on end of input.
            turn.cancel(CancelReason.SHUTDOWN)
        except PathOutsideRoots as exc:
            # A path from the prompt that leaves the session's roots: bad input.
            error = InvalidParams(str(exc))
        except Exception:
            log.exception("agent.prompt failed in session %s", session.session_id)
            error = InternalError("The agent failed while handling the prompt")
        finally:
            final = "cancelled" if turn.cancelled else (stop if error is None else None)
            if final is not None:
                handle.commit(final)
                self._persister.end(session.session_id, turn.turn_id, final)
            else:
                handle.abandon()
                self._persister.end(session.session_id, turn.turn_id, FAILED_TURN)
            try:
                # Durable before the answer, shielded from this task's cancel. A failed
                # write of this session (and only of this one) fails the turn.
                with anyio.CancelScope(shield=True):
                    await self._persister.sync(session.session_id)
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
        if self.unstable and prompt_turn.usage is not None:
            return {"stopReason": final, "usage": prompt_turn.usage}
        return {"stopReason": final}

    def _cancel_turn(self, session: Session, turn: Turn, reason: CancelReason) -> None:
        if session.slot.turn is turn:
            session.slot.cancel()
        turn.cancel(reason)

    def _cancel(self, params: Any) -> None:
        raw = params if isinstance(params, dict) else {}
        session_id = raw.get("sessionId")
        if not isinstance(session_id, str):
            return
        self._order.cancel(session_id)  # prompts waiting behind a load or a close
        session = self.sessions.get(session_id)
        if session is None:
            return  # unknown or closed: a silent no-op
        turn = session.slot.cancel()
        if turn is not None:
            turn.cancel(CancelReason.SESSION_CANCEL)
