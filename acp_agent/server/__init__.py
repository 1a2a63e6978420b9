"""ACP on top of the JSON-RPC engine: routes every v1 agent method to an :class:`Agent`.

``AcpServer`` owns the ACP semantics the library guarantees, whatever the agent does:

* ``initialize``: version negotiation (a v1 agent answers ``1`` whatever it is asked),
  capabilities in the schema's exact encodings, following what is implemented;
* sessions: creation, load with exact replay, resume, list, close, delete, backed by a
  :class:`~acp_agent.store.SessionStore`; updates for a session never precede the
  response that created it, and nothing follows a ``session/load`` response;
* prompt turns: one active prompt per session (refused at once, or queued FIFO by
  choice); one authoritative end per turn, written after every update of the turn
  and after the turn is durable in the store; ``cancelled`` whichever path races
  first; an optional per-turn time limit;
* modes and config options kept in step;
* ``logout`` for agents that authenticate; with ``unstable``, the methods of
  :mod:`.unstable` (``session/fork``, ``session/set_title``) and ``usage`` on prompt
  results, advertised only then.

Requests other than ``initialize`` that arrive before it are refused with
``-32600`` (a documented choice: capabilities are unknown until then).

This module holds the method table, ``initialize``, ``authenticate`` and the serve
loop; the other concerns are its siblings: :mod:`.lifecycle` (sessions), :mod:`.turns`
(prompts and cancel), :mod:`.modes` (modes and config) and :mod:`.base` (shared state
and helpers). The store is fed by :mod:`acp_agent.persistence`.

It does not read or write bytes (that is :class:`~acp_agent.connection.AgentSession`)
and does not know concrete transports or agents.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import anyio
import anyio.abc
import anyio.to_thread

from ..agent import Agent, InitializeParams
from ..client import ClientCapabilities
from ..connection import AgentSession, MethodTable, NativeDispatcher, RequestContext
from ..errors import InvalidParams, MethodNotFound, RequestError
from ..prompt_slot import CancelReason
from ..store import SessionStore
from ..transport import Transport
from .base import (
    CLOSE_GRACE,
    JSON,
    PROTOCOL_VERSION,
    BusyPolicy,
    build_models,
    log,
    models_built,
    params_object,
)
from .modes import ModesAndConfig
from .ordering import Place
from .turns import PromptTurns
from .unstable import UNSTABLE_SESSION_CAPABILITIES, UnstableMethods

#: requests applied one at a time per session, in arrival order (see ordering)
ORDERED_METHODS: Final = (
    "session/load",
    "session/resume",
    "session/close",
    "session/delete",
    "session/set_mode",
    "session/set_config_option",
)
#: the methods refused before initialize, and their handlers
GATED: Final = {
    "authenticate": "_authenticate",
    "logout": "_logout",
    "session/new": "_new_session",
    "session/load": "_load_session",
    "session/resume": "_resume_session",
    "session/list": "_list_sessions",
    "session/close": "_close_session",
    "session/delete": "_delete_session",
    "session/set_mode": "_set_mode",
    "session/set_config_option": "_set_config_option",
}
UNSTABLE_GATED: Final = {"session/fork": "_fork_session", "session/set_title": "_set_title"}
WARM_IDLE: Final = 0.1  # seconds of a quiet connection before the models are built


class AcpServer(UnstableMethods, ModesAndConfig, PromptTurns):
    """Serve an :class:`Agent` over ACP v1. One instance per connection.

    (``UnstableMethods`` extends ``SessionLifecycle``: a fork is restored like a load.)
    """

    def method_table(self) -> MethodTable:
        # One handler for every gated method: one bound method per connection rather
        # than two closures per method (the table is built for every connection).
        gated = self._gated
        requests: dict[str, Any] = dict.fromkeys(GATED, gated)
        requests["initialize"] = self._initialize
        requests["session/prompt"] = self._prompt  # gated and ordered itself (see turns)
        if self.unstable:
            requests.update(dict.fromkeys(UNSTABLE_GATED, gated))
        prepare: dict[str, Callable[[Any, RequestContext], None]] = dict.fromkeys(
            ORDERED_METHODS, self._take_place
        )
        prepare["session/prompt"] = self._prompt_arrived
        return MethodTable(
            requests=requests,
            inline={"session/cancel": self._cancel},
            prepare=prepare,
            fallback_request=self._ext_request,
            fallback_notification=self._ext_notification,
        )

    def _take_place(self, params: Any, ctx: RequestContext) -> None:
        """Take the request's place in its session's line (run in arrival order)."""
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        if isinstance(session_id, str):
            ctx.state["place"] = self._order.enter(session_id)

    async def _gated(self, params: Any, ctx: RequestContext) -> Any:
        """Run the method's handler once the connection is initialized and (for the
        ordered methods) once every request read before it for its session is done."""
        fn = getattr(self, GATED.get(ctx.method) or UNSTABLE_GATED[ctx.method])
        place: Place | None = ctx.state.pop("place", None)
        if place is None:
            self._check_initialized()
            return await fn(params, ctx)
        try:
            await place.wait()
            self._check_initialized()
            return await fn(params, ctx)
        finally:
            self._order.leave(place)

    async def serve(self, transport: Transport) -> None:
        """Serve ``transport`` until EOF; then close every session and flush the store."""
        kwargs: dict[str, Any] = {"max_line": self.max_line}
        if self.dispatcher is not None:
            kwargs["dispatcher"] = self.dispatcher
        conn = AgentSession(transport, self.method_table(), **kwargs)
        self._conn = conn
        self._new_scope = type(anyio.CancelScope())
        async with self.agent.lifespan(), anyio.create_task_group() as tg:
            self._tg = tg
            self._persister.start(tg)
            try:
                await conn.serve()
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_GRACE):
                    for session in list(self.sessions.values()):
                        await self._shutdown_session(session, CancelReason.SHUTDOWN)
                    await self._persister.sync()
                    if self._persister.failed:  # logged when it failed; the turns were told
                        log.warning(
                            "the session store failed earlier for %d session(s): "
                            "their history was not all saved",
                            len(self._persister.failed),
                        )
                tg.cancel_scope.cancel()

    # ------------------------------------------------------------------ initialize

    async def _initialize(self, params: Any, ctx: RequestContext) -> JSON:
        # No pydantic here: initialize is the start-up path (see _warm_when_idle).
        raw = params_object(params)
        version = raw.get("protocolVersion")
        if isinstance(version, str):
            # Clients in the wild send "1" or a date: as the official SDKs do, that is v1.
            version = PROTOCOL_VERSION
        if isinstance(version, bool) or not isinstance(version, int):
            raise InvalidParams("protocolVersion: an integer is required")
        caps_raw = raw.get("clientCapabilities")
        if caps_raw is not None and not isinstance(caps_raw, dict):
            raise InvalidParams("clientCapabilities must be an object")
        info = raw.get("clientInfo")
        meta = raw.get("_meta")
        self.capabilities = ClientCapabilities(caps_raw)
        self.initialized = True
        await self.agent.initialize(
            InitializeParams(
                version,
                self.capabilities,
                info if isinstance(info, dict) else None,
                meta if isinstance(meta, dict) else None,
            )
        )
        if not self._warm_scheduled and self._tg is not None and not models_built():
            self._warm_scheduled = True
            self._tg.start_soon(self._warm_when_idle, name="acp-model-warm-up")
        caps = self.agent.prompt_capabilities
        auth = [
            dict(m)
            for m in self.agent.auth_methods(self.capabilities)
            if m.get("type") != "terminal" or self.capabilities.auth_terminal
        ]
        agent_info: JSON = {"name": self.agent.name, "version": self.agent.version}
        if self.agent.title:
            agent_info["title"] = self.agent.title
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {
                    "image": bool(caps.get("image", False)),
                    "audio": bool(caps.get("audio", False)),
                    "embeddedContext": bool(caps.get("embeddedContext", False)),
                },
                "mcpCapabilities": {"http": self.agent.mcp_http, "sse": self.agent.mcp_sse},
                "sessionCapabilities": self._session_capabilities(),
                **({"auth": {"logout": {}}} if self.agent.supports_logout() else {}),
            },
            "authMethods": auth,
            "agentInfo": agent_info,
        }

    def _session_capabilities(self) -> JSON:
        caps: JSON = {"list": {}, "delete": {}, "resume": {}, "close": {}}
        caps["additionalDirectories"] = {}
        if self.unstable:
            caps.update(UNSTABLE_SESSION_CAPABILITIES)
        return caps

    async def _warm_when_idle(self) -> None:
        """Build the protocol models once the client has gone quiet.

        Importing pydantic and building the models costs hundreds of milliseconds of
        CPU. Done in a thread while requests stream in, it would take the interpreter
        lock from them in 5 ms slices; so it waits until nothing has arrived and nothing
        is running for ``WARM_IDLE`` seconds (a person reading or typing). Plain text
        prompts never need the models; any other request that does builds them at once
        (:meth:`_models`).
        """
        conn = self.connection
        while self._models_ready is None and not models_built():
            seen = conn.received_count
            await anyio.sleep(WARM_IDLE)
            if conn.received_count == seen and not conn.inflight_count:
                await self._models()

    async def _authenticate(self, params: Any, ctx: RequestContext) -> JSON:
        raw = params_object(params)
        method_id = raw.get("methodId")
        if not isinstance(method_id, str):
            raise InvalidParams("methodId: a string is required")
        offered = {m["id"]: m for m in self.agent.auth_methods(self.capabilities)}
        if method_id not in offered:
            raise InvalidParams(f"unknown authentication method {method_id[:100]!r}")
        if offered[method_id].get("type") == "terminal":
            raise InvalidParams("terminal authentication methods are run by the client")
        await self.agent.authenticate(method_id, raw.get("_meta"))
        return {}

    def stop(self) -> None:
        """End input as EOF would (used on SIGTERM); :meth:`serve` then returns."""
        if self._conn is not None:
            self._conn.stop_reading()

    async def _logout(self, params: Any, ctx: RequestContext) -> JSON:
        params_object(params)
        if not self.agent.supports_logout():
            raise MethodNotFound("logout: this agent does not authenticate")
        await self.agent.logout()
        return {}

    # ------------------------------------------------------------------ extensions

    async def _ext_request(self, method: str, params: Any, ctx: RequestContext) -> Any:
        if not method.startswith("_"):
            raise RequestError(f"Method not found: {method[:100]}", code=-32601)
        return await self.agent.ext_method(method, params)

    async def _ext_notification(self, method: str, params: Any) -> None:
        if method.startswith("_"):
            await self.agent.ext_notification(method, params)
        else:
            log.debug("ignored unknown notification %r", method[:100])


async def serve(
    agent: Agent,
    transport: Transport,
    store: SessionStore | None = None,
    **options: Any,
) -> None:
    """Serve ``agent`` on ``transport`` until EOF (an in-memory store unless given one)."""
    await AcpServer(agent, store, **options).serve(transport)


__all__ = ["AcpServer", "BusyPolicy", "NativeDispatcher", "build_models", "serve"]
