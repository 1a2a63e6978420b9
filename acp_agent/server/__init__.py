"""ACP on top of the JSON-RPC connection: routes every v1 agent method to an :class:`Agent`.

``AcpServer`` is the wiring, done once per connection: it makes the parts, each given
what it needs, and builds the method table from the generated one
(:data:`acp_agent.protocol.methods.METHODS`), one direct callable per method:

* :mod:`.handshake` — ``initialize``, ``authenticate``, ``logout``;
* :mod:`.lifecycle` — sessions: new, load with exact replay, resume, list, close,
  delete, backed by a :class:`~acp_agent.store.SessionStore`;
* :mod:`.turns` — ``session/prompt`` and ``session/cancel``: one active prompt per
  session (refused at once, or queued FIFO by choice), one authoritative end per turn,
  written after every update of the turn and after the turn is durable;
* :mod:`.modes` — modes and config options kept in step;
* :mod:`.unstable` — ``session/fork`` and ``session/set_title``, only with ``unstable``.

Requests that change one session apply one at a time, in arrival order
(:mod:`.ordering`); requests other than ``initialize`` that arrive before it are
refused with ``-32600``. The store is fed by :mod:`acp_agent.persistence`.

It does not read or write bytes (that is :class:`~acp_agent.connection.AgentSession`)
and does not know concrete transports or agents.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import anyio
import anyio.abc

from ..agent import Agent
from ..connection import AgentSession, MethodTable, NativeDispatcher, RequestContext
from ..dispatch import NotificationFn, RequestFn
from ..errors import METHOD_NOT_FOUND, RequestError
from ..options import BusyPolicy, ServerOptions
from ..persistence import Persister
from ..protocol.methods import AGENT_METHODS
from ..session import Session
from ..store import DEFAULT_OWNER, MemorySessionStore, SessionStore
from ..transport import Transport
from .handshake import Handshake
from .lifecycle import SessionLifecycle
from .live import OpenSessions
from .models import ProtocolModels, build_models, models_built
from .modes import ModesAndConfig
from .ordering import ArrivalOrder
from .owners import SessionOwners, owners_of
from .params import CLOSE_GRACE, log, session_id_of
from .turns import Turns
from .unstable import UNSTABLE_METHODS, UnstableMethods


class AcpServer:
    """Serve an :class:`Agent` over ACP v1. One instance per connection."""

    def __init__(
        self,
        agent: Agent,
        store: SessionStore | None = None,
        options: ServerOptions | None = None,
        *,
        owner: str = DEFAULT_OWNER,
        owners: SessionOwners | None = None,
    ) -> None:
        self.agent = agent
        self.options = opts = options if options is not None else ServerOptions()
        self.store: SessionStore = store if store is not None else MemorySessionStore()
        self.models = ProtocolModels()
        self._persister = persister = Persister(self.store)
        self._order = ArrivalOrder()
        self._handshake = handshake = Handshake(agent, unstable=opts.unstable)
        self._open = live = OpenSessions(
            handshake, owner=owner, allow_outside_roots=opts.allow_outside_roots
        )
        self._modes = modes = ModesAndConfig(agent, self.store, live, handshake)
        self._turns = turns = Turns(
            agent, opts, live, persister, self._order, handshake, self.models
        )
        self._lifecycle = lifecycle = SessionLifecycle(
            agent,
            self.store,
            persister,
            live,
            handshake,
            modes,
            owners if owners is not None else owners_of(self.store),
            turns.run_held,
            self._start_soon,
        )
        self._unstable = UnstableMethods(self.store, persister, live, lifecycle)
        self._conn: AgentSession | None = None
        self._tg: anyio.abc.TaskGroup | None = None

    @property
    def sessions(self) -> dict[str, Session]:
        """The ACP sessions open on this connection."""
        return self._open.sessions

    @property
    def connection(self) -> AgentSession:
        return self._open.connection

    def _start_soon(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        if self._tg is not None:
            self._tg.start_soon(fn)

    # ------------------------------------------------------------------ the table

    def method_table(self) -> MethodTable:
        """Every agent method of the generated table (and, with ``unstable``, the unstable
        ones) mapped to the part that serves it, gated and ordered as it must be."""
        life, modes, turns, hand = self._lifecycle, self._modes, self._turns, self._handshake
        handlers: dict[str, RequestFn] = {
            "initialize": hand.initialize,
            "authenticate": self._gated(hand.authenticate),
            "logout": self._gated(hand.logout),
            "session/new": self._gated(life.new_session),
            "session/load": self._ordered(life.load_session),
            "session/resume": self._ordered(life.resume_session),
            "session/list": self._gated(life.list_sessions),
            "session/close": self._ordered(life.close_session),
            "session/delete": self._ordered(life.delete_session),
            "session/set_mode": self._ordered(modes.set_mode),
            "session/set_config_option": self._ordered(modes.set_config_option),
            "session/prompt": turns.prompt,  # takes its place in line, then checks
        }
        names = set(AGENT_METHODS)
        if self.options.unstable:
            handlers["session/fork"] = self._gated(self._unstable.fork_session)
            handlers["session/set_title"] = self._gated(self._unstable.set_title)
            names.update(UNSTABLE_METHODS)
        notifications: dict[str, NotificationFn] = {"session/cancel": turns.cancel}
        # (a method of the generated table that no part serves fails here, at once)
        requests = {name: handlers[name] for name in names if name not in notifications}
        return MethodTable(
            requests=requests,
            notifications=notifications,
            fallback_request=self._ext_request,
            fallback_notification=self._ext_notification,
        )

    def _gated(self, fn: RequestFn) -> RequestFn:
        check = self._handshake.check_initialized

        async def gated(params: Any, ctx: RequestContext) -> Any:
            check()
            return await fn(params, ctx)

        return gated

    def _ordered(self, fn: RequestFn) -> RequestFn:
        order, check = self._order, self._handshake.check_initialized

        async def ordered(params: Any, ctx: RequestContext) -> Any:
            session_id = session_id_of(params)
            if session_id is None:
                check()
                return await fn(params, ctx)
            place = order.enter(session_id)  # before the first await: in arrival order
            try:
                await place.wait()
                check()
                return await fn(params, ctx)
            finally:
                order.leave(place)

        return ordered

    async def _ext_request(self, method: str, params: Any, ctx: RequestContext) -> Any:
        if not method.startswith("_"):
            raise RequestError(f"Method not found: {method[:100]}", code=METHOD_NOT_FOUND)
        return await self.agent.ext_method(method, params)

    async def _ext_notification(self, method: str, params: Any) -> None:
        if method.startswith("_"):
            await self.agent.ext_notification(method, params)
        else:
            log.debug("ignored unknown notification %r", method[:100])

    # ------------------------------------------------------------------ serving

    async def serve(self, transport: Transport) -> None:
        """Serve ``transport`` until EOF; then close every session and flush the store."""
        conn = connect(transport, self.method_table(), self.options)
        async with self.serving(conn):
            await conn.serve()

    @contextlib.asynccontextmanager
    async def serving(self, conn: AgentSession) -> AsyncIterator[None]:
        """Serve on ``conn`` while the block runs (it runs ``conn.serve()``, or waits for
        it): the agent's lifespan, the store's writer; on the way out every session is
        closed and the store flushed."""
        self._conn = conn
        self._open.bind(conn)
        async with self.agent.lifespan(), anyio.create_task_group() as tg:
            self._tg = tg
            self._persister.start(tg)
            if not models_built():
                tg.start_soon(self.models.warm_when_idle, self._handshake.initialized, conn)
            try:
                yield
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_GRACE):
                    await self._lifecycle.shutdown()
                    await self._persister.sync()
                    if self._persister.failed:  # logged when it failed; the turns were told
                        log.warning(
                            "the session store failed earlier for %d session(s): "
                            "their history was not all saved",
                            len(self._persister.failed),
                        )
                tg.cancel_scope.cancel()

    def stop(self) -> None:
        """End input as EOF would (used on SIGTERM); :meth:`serve` then returns."""
        if self._conn is not None:
            self._conn.stop_reading()


def connect(transport: Transport, table: MethodTable, options: ServerOptions) -> AgentSession:
    """The connection on ``transport`` dispatching to ``table`` (a server's
    :meth:`~AcpServer.method_table`, or one that leads to it), as ``options`` say."""
    return AgentSession(
        transport,
        table,
        max_line=options.max_line,
        dispatcher=options.dispatcher if options.dispatcher is not None else NativeDispatcher,
    )


async def serve(
    agent: Agent,
    transport: Transport,
    store: SessionStore | None = None,
    options: ServerOptions | None = None,
) -> None:
    """Serve ``agent`` on ``transport`` until EOF (an in-memory store unless given one)."""
    await AcpServer(agent, store, options).serve(transport)


__all__ = ["AcpServer", "BusyPolicy", "ServerOptions", "build_models", "connect", "serve"]
