"""Session modes and config options: ``session/set_mode`` and
``session/set_config_option``, kept in step when a select option mirrors the modes,
and their wire shapes in the results of ``session/new``, ``load``, ``resume`` and
``fork`` (:meth:`ModesAndConfig.setup_result`).

It does not create sessions or run turns.
"""

from __future__ import annotations

from typing import Any

from ..agent import Agent, ConfigOption
from ..dispatch import RequestContext
from ..errors import InvalidParams, MethodNotFound
from ..session import Session
from ..store import SessionStore
from .handshake import Handshake
from .live import OpenSessions
from .params import JSON, params_object, require_session_id


class ModesAndConfig:
    """Change a live session's mode and config values, store them, announce them."""

    __slots__ = ("_agent", "_handshake", "_open", "_store")

    def __init__(
        self, agent: Agent, store: SessionStore, open_sessions: OpenSessions, handshake: Handshake
    ) -> None:
        self._agent = agent
        self._store = store
        self._open = open_sessions
        self._handshake = handshake

    # ------------------------------------------------------------------ shapes

    def init_state(self, session: Session) -> None:
        """Give a session its default mode and config values where it has none."""
        modes = list(self._agent.modes(session))
        if modes and session.mode_id not in {m["id"] for m in modes}:
            session.mode_id = modes[0]["id"]
        for d in self._agent.config_options(session):
            if d["id"] not in session.config:
                session.config[d["id"]] = d["default"]
            if d.get("category") == "mode" and session.mode_id is not None:
                session.config[d["id"]] = session.mode_id

    def setup_result(self, session: Session, *, with_id: bool) -> JSON:
        """The result of a request that opens a session: its modes and config options."""
        result: JSON = {"sessionId": session.session_id} if with_id else {}
        modes = list(self._agent.modes(session))
        if modes:
            result["modes"] = {
                "currentModeId": session.mode_id or modes[0]["id"],
                "availableModes": [dict(m) for m in modes],
            }
        options = self._config_wire(session)
        if options:
            result["configOptions"] = options
        return result

    def _option_defs(self, session: Session) -> list[ConfigOption]:
        defs = list(self._agent.config_options(session))
        if not self._handshake.capabilities.boolean_config_options:
            defs = [d for d in defs if d["type"] != "boolean"]
        return defs

    def _config_wire(self, session: Session) -> list[JSON]:
        out: list[JSON] = []
        for d in self._option_defs(session):
            item: JSON = {"id": d["id"], "name": d["name"], "type": d["type"]}
            if "description" in d:
                item["description"] = d["description"]
            if "category" in d:
                item["category"] = d["category"]
            if d["type"] == "select":
                item["options"] = [dict(o) for o in d.get("options", [])]
            item["currentValue"] = session.config.get(d["id"], d["default"])
            out.append(item)
        return out

    def _linked_option(self, session: Session) -> ConfigOption | None:
        modes = {m["id"] for m in self._agent.modes(session)}
        for d in self._agent.config_options(session):
            values = {o["value"] for o in d.get("options", [])}
            if d.get("category") == "mode" and d["type"] == "select" and values == modes:
                return d
        return None

    # ------------------------------------------------------------------ methods

    async def set_mode(self, params: Any, ctx: RequestContext) -> JSON:
        raw = params_object(params)
        session = self._open.live(require_session_id(raw))
        mode_id = raw.get("modeId")
        modes = {m["id"] for m in self._agent.modes(session)}
        if not modes:
            raise MethodNotFound("this agent has no session modes")
        if not isinstance(mode_id, str) or mode_id not in modes:
            raise InvalidParams(f"modeId must be one of {sorted(modes)}")
        await self._apply_mode(session, mode_id, announce_mode=False)
        return {}

    async def _apply_mode(self, session: Session, mode_id: str, *, announce_mode: bool) -> None:
        session.mode_id = mode_id
        linked = self._linked_option(session)
        if linked is not None:
            session.config[linked["id"]] = mode_id
        await self._store.update(self._open.record(session))
        client = self._open.client(session)
        if announce_mode:
            await client.current_mode(mode_id)
        elif linked is not None and linked in self._option_defs(session):
            await client.config_options(self._config_wire(session))
        await self._agent.mode_changed(session, mode_id)

    async def set_config_option(self, params: Any, ctx: RequestContext) -> JSON:
        raw = params_object(params)
        session = self._open.live(require_session_id(raw))
        config_id = raw.get("configId")
        defs = {d["id"]: d for d in self._option_defs(session)}
        if not isinstance(config_id, str) or config_id not in defs:
            raise InvalidParams(f"configId must be one of {sorted(defs)}")
        d = defs[config_id]
        value = raw.get("value")
        if d["type"] == "boolean":
            if raw.get("type") != "boolean" or not isinstance(value, bool):
                raise InvalidParams(f"{config_id} is a boolean option: send type boolean")
        else:
            allowed = {o["value"] for o in d.get("options", [])}
            if not isinstance(value, str) or value not in allowed:
                raise InvalidParams(f"value for {config_id} must be one of {sorted(allowed)}")
        linked = self._linked_option(session)
        if linked is not None and linked["id"] == config_id and isinstance(value, str):
            session.config[config_id] = value
            await self._apply_mode(session, value, announce_mode=True)
        else:
            session.config[config_id] = value
            await self._store.update(self._open.record(session))
        await self._agent.config_changed(session, config_id, value)
        return {"configOptions": self._config_wire(session)}
