"""What the client advertised in ``initialize``, and which updates that lets it see.

Owns :class:`ClientCapabilities` (the advertised capabilities read with the schema's
exact encodings), the update kinds a client must have advertised
(:data:`GATED_UPDATES`) and :func:`replayable`, which says whether a recorded update
may be sent again to a client on ``session/load``.

It does not send anything (:mod:`acp_agent.client`) nor decide what an agent does
without a capability.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .history import STATE_KIND


class ClientCapabilities:
    """What the client advertised in ``initialize``, read with the schema's exact encodings.

    Anything missing is unsupported. Booleans must be ``true``; object markers must be
    present and non-null (``{}`` counts).
    """

    __slots__ = ("raw",)

    def __init__(self, raw: Mapping[str, Any] | None = None) -> None:
        self.raw: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}

    def _obj(self, *path: str) -> Mapping[str, Any] | None:
        node: Any = self.raw
        for key in path:
            if not isinstance(node, Mapping):
                return None
            node = node.get(key)
        return node if isinstance(node, Mapping) else None

    def _flag(self, *path: str) -> bool:
        parent = self._obj(*path[:-1]) if len(path) > 1 else self.raw
        return parent is not None and parent.get(path[-1]) is True

    @property
    def read_text_file(self) -> bool:
        return self._flag("fs", "readTextFile")

    @property
    def write_text_file(self) -> bool:
        return self._flag("fs", "writeTextFile")

    @property
    def terminal(self) -> bool:
        return self._flag("terminal")

    @property
    def auth_terminal(self) -> bool:
        """``auth.terminal``, or the legacy ``_meta["terminal-auth"]`` clients still send."""
        return self._flag("auth", "terminal") or self._flag("_meta", "terminal-auth")

    @property
    def notices(self) -> bool:
        return self._obj("session", "notices") is not None

    @property
    def compaction(self) -> bool:
        return self._obj("session", "compaction") is not None

    @property
    def elicitation_form(self) -> bool:
        return self._obj("elicitation", "form") is not None

    @property
    def elicitation_url(self) -> bool:
        return self._obj("elicitation", "url") is not None

    @property
    def boolean_config_options(self) -> bool:
        return self._obj("session", "configOptions", "boolean") is not None


# update kinds a client must have advertised (by the capability that names them)
GATED_UPDATES: Final[Mapping[str, str]] = {
    "notice": "session.notices",
    "compaction_update": "session.compaction",
    "compaction_summary_chunk": "session.compaction",
}


def allows_update_kind(capabilities: ClientCapabilities, kind: str) -> bool:
    """Whether the client advertised the capability a gated update ``kind`` needs."""
    return capabilities.notices if kind == "notice" else capabilities.compaction


def replayable(capabilities: ClientCapabilities, update: Mapping[str, Any]) -> bool:
    """Whether a recorded ``update`` may be sent to this client on ``session/load``
    (an agent's saved state never is)."""
    kind = update.get("sessionUpdate")
    if kind == STATE_KIND:
        return False
    return kind not in GATED_UPDATES or allows_update_kind(capabilities, str(kind))
