"""The checks every ACP method shares on its params, and the server's constants.

It owns reading params as an object, the ``sessionId`` check, the checks of
``mcpServers`` and prompt content against what an agent announces, and the server's
clock format. It does not know sessions, the store or the connection.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any, Final

from ..agent import Agent
from ..errors import InvalidParams, ResourceNotFound

log = logging.getLogger("acp_agent.server")

PROTOCOL_VERSION: Final = 1
CLOSE_GRACE: Final = 5.0  # seconds a cancelled turn gets to unwind on close

JSON = dict[str, Any]


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def params_object(params: Any) -> JSON:
    """Params as an object: absent or null is ``{}``; an array is invalid for ACP."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise InvalidParams("params must be an object")
    return params


def require_session_id(params: JSON) -> str:
    sid = params.get("sessionId")
    if not isinstance(sid, str) or not sid:
        raise InvalidParams("sessionId: a non-empty string is required")
    return sid


def session_id_of(params: Any) -> str | None:
    """The ``sessionId`` of params read in arrival order, before they are checked."""
    sid = params.get("sessionId") if isinstance(params, dict) else None
    return sid if isinstance(sid, str) else None


def not_found(session_id: str, what: str = "not found") -> ResourceNotFound:
    return ResourceNotFound(
        f"Session {session_id[:100]!r} {what}", data={"sessionId": session_id[:200]}
    )


#: prompt content blocks that need a ``promptCapabilities`` flag -> that flag
GATED_BLOCKS: Final = {"image": "image", "audio": "audio", "resource": "embeddedContext"}


def check_prompt_blocks(blocks: list[Any], agent: Agent) -> None:
    """Refuse a prompt block whose kind ``agent`` does not announce."""
    caps = agent.prompt_capabilities
    for i, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        cap = GATED_BLOCKS.get(kind) if isinstance(kind, str) else None
        if cap is not None and not caps.get(cap, False):
            raise InvalidParams(
                f"prompt[{i}] is an {kind} block, but the agent did not advertise "
                f"promptCapabilities.{cap}"
            )


def check_mcp_servers(params: JSON, agent: Agent) -> list[Any]:
    servers = params.get("mcpServers")
    if servers is None:
        return []
    if not isinstance(servers, list):
        raise InvalidParams("mcpServers must be an array")
    for i, server in enumerate(servers):
        if not isinstance(server, dict):
            raise InvalidParams(f"mcpServers[{i}] must be an object")
        kind = server.get("type")
        if kind == "http" and not agent.mcp_http:
            raise InvalidParams(f"mcpServers[{i}]: HTTP MCP servers are not supported")
        if kind == "sse" and not agent.mcp_sse:
            raise InvalidParams(f"mcpServers[{i}]: SSE MCP servers are not supported")
        if kind is None:
            for key in ("name", "command"):
                if not isinstance(server.get(key), str):
                    raise InvalidParams(f"mcpServers[{i}].{key}: a string is required")
    return servers
