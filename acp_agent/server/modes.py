"""Session modes and config options: ``session/set_mode`` and
``session/set_config_option``, kept in step when a select option mirrors the modes.

It does not create sessions or run turns.
"""

from __future__ import annotations

from typing import Any

from ..agent import ConfigOption
from ..connection import RequestContext
from ..errors import InvalidParams, MethodNotFound
from ..session import Session
from .base import JSON, ServerBase, params_object, require_session_id


class ModesAndConfig(ServerBase):
    """Change a live session's mode and config values, store them, announce them."""

    def _linked_option(self, session: Session) -> ConfigOption | None:
        modes = {m["id"] for m in self.agent.modes(session)}
        for d in self.agent.config_options(session):
            values = {o["value"] for o in d.get("options", [])}
            if d.get("category") == "mode" and d["type"] == "select" and values == modes:
                return d
        return None

    async def _set_mode(self, params: Any, ctx: RequestContext) -> JSON:
        raw = params_object(params)
        session = self._live(require_session_id(raw))
        mode_id = raw.get("modeId")
        modes = {m["id"] for m in self.agent.modes(session)}
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
        await self.store.update(self._record(session))
        client = self._client(session)
        if announce_mode:
            await client.current_mode(mode_id)
        elif linked is not None and linked in self._option_defs(session):
            await client.config_options(self._config_wire(session))
        await self.agent.mode_changed(session, mode_id)

    async def _set_config_option(self, params: Any, ctx: RequestContext) -> JSON:
        raw = params_object(params)
        session = self._live(require_session_id(raw))
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
            await self.store.update(self._record(session))
        await self.agent.config_changed(session, config_id, value)
        return {"configOptions": self._config_wire(session)}
