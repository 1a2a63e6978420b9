"""The handshake: ``initialize``, ``authenticate`` and ``logout``, and what they decide
for the rest of the connection (the client's capabilities, whether it is initialized).

``initialize`` negotiates the version (a v1 agent answers ``1`` whatever it is asked)
and answers the capabilities in the schema's exact encodings, following what is
implemented. Requests other than ``initialize`` that arrive before it are refused with
``-32600`` (a documented choice: capabilities are unknown until then).

It does not know sessions or turns.
"""

from __future__ import annotations

from typing import Any, Final

import anyio

from ..agent import Agent, InitializeParams
from ..client import ClientCapabilities
from ..dispatch import RequestContext
from ..errors import INVALID_REQUEST, AuthRequired, InvalidParams, MethodNotFound, RequestError
from .params import JSON, PROTOCOL_VERSION, params_object

#: what ``sessionCapabilities`` gains with ``unstable`` (see :mod:`.unstable`)
UNSTABLE_SESSION_CAPABILITIES: Final[JSON] = {"fork": {}, "title": {}}


class Handshake:
    """``initialize`` and authentication for one connection."""

    __slots__ = ("_agent", "_unstable", "capabilities", "initialized")

    def __init__(self, agent: Agent, *, unstable: bool) -> None:
        self._agent = agent
        self._unstable = unstable
        self.capabilities = ClientCapabilities()
        #: set by the first ``initialize``
        self.initialized = anyio.Event()

    def check_initialized(self) -> None:
        if not self.initialized.is_set():
            raise RequestError(
                "The connection is not initialized: send initialize first",
                code=INVALID_REQUEST,
            )

    def require_auth(self) -> None:
        agent = self._agent
        if agent.requires_auth() and list(agent.auth_methods(self.capabilities)):
            raise AuthRequired("Authentication required: call authenticate first")

    async def initialize(self, params: Any, ctx: RequestContext) -> JSON:
        # No pydantic here: initialize is the start-up path (see .models).
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
        agent = self._agent
        self.capabilities = ClientCapabilities(caps_raw)
        self.initialized.set()
        await agent.initialize(
            InitializeParams(
                version,
                self.capabilities,
                info if isinstance(info, dict) else None,
                meta if isinstance(meta, dict) else None,
            )
        )
        caps = agent.prompt_capabilities
        auth = [
            dict(m)
            for m in agent.auth_methods(self.capabilities)
            if m.get("type") != "terminal" or self.capabilities.auth_terminal
        ]
        agent_info: JSON = {"name": agent.name, "version": agent.version}
        if agent.title:
            agent_info["title"] = agent.title
        sessions: JSON = {"list": {}, "delete": {}, "resume": {}, "close": {}}
        sessions["additionalDirectories"] = {}
        if self._unstable:
            sessions.update(UNSTABLE_SESSION_CAPABILITIES)
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {
                    "image": bool(caps.get("image", False)),
                    "audio": bool(caps.get("audio", False)),
                    "embeddedContext": bool(caps.get("embeddedContext", False)),
                },
                "mcpCapabilities": {"http": agent.mcp_http, "sse": agent.mcp_sse},
                "sessionCapabilities": sessions,
                **({"auth": {"logout": {}}} if agent.supports_logout() else {}),
            },
            "authMethods": auth,
            "agentInfo": agent_info,
        }

    async def authenticate(self, params: Any, ctx: RequestContext) -> JSON:
        raw = params_object(params)
        method_id = raw.get("methodId")
        if not isinstance(method_id, str):
            raise InvalidParams("methodId: a string is required")
        offered = {m["id"]: m for m in self._agent.auth_methods(self.capabilities)}
        if method_id not in offered:
            raise InvalidParams(f"unknown authentication method {method_id[:100]!r}")
        if offered[method_id].get("type") == "terminal":
            raise InvalidParams("terminal authentication methods are run by the client")
        await self._agent.authenticate(method_id, raw.get("_meta"))
        return {}

    async def logout(self, params: Any, ctx: RequestContext) -> JSON:
        params_object(params)
        if not self._agent.supports_logout():
            raise MethodNotFound("logout: this agent does not authenticate")
        await self._agent.logout()
        return {}
