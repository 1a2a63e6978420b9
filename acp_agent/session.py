"""Per-ACP-session state: the session's cwd, roots, mode, config, slot and history.

An ACP *session* is what ``session/new`` creates (a ``sessionId``); it is not the
per-connection :class:`acp_agent.connection.AgentSession`. This module owns
:class:`Session`: the state of one session and the checks that tie a path to its
roots. Its parts live beside it: :mod:`acp_agent.prompt_slot` (the prompt slot table
and the running :class:`Turn`), :mod:`acp_agent.history` (turn-scoped history) and
:mod:`acp_agent.paths` (path validation and :class:`Roots`).

It does not know JSON-RPC, transports or the store: persistence is reached through
the small :class:`TurnSink` interface the server layer supplies.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from .history import History
from .paths import Roots, check_path_text
from .prompt_slot import PromptSlot, SlotState, Turn


@dataclass(eq=False, slots=True)
class Session:
    """One ACP session (a ``sessionId``) live on a connection.

    A server holds thousands of idle ones: what a session needs only once it is used (its
    ``state`` dict, its tool call id prefix, its resolved roots) is made at first use.
    """

    session_id: str
    cwd: str
    additional_directories: tuple[str, ...] = ()
    title: str | None = None
    mode_id: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    mcp_servers: list[Any] = field(default_factory=list)
    slot: PromptSlot = field(default_factory=PromptSlot)
    history: History = field(default_factory=History)
    #: the most recent turn (it may still be unwinding after a cancel)
    last_turn: Turn | None = None
    #: the turn whose history is open (or being made durable); the next turn waits for it
    history_turn: Turn | None = None
    _state: dict[str, Any] | None = field(default=None, repr=False)
    _tool_ids: int = 0
    _root_set: Roots | None = None
    _tool_prefix: str | None = None

    @property
    def state(self) -> dict[str, Any]:
        """A free slot for the agent's own per-session state (made at first use)."""
        if self._state is None:
            self._state = {}
        return self._state

    @property
    def roots(self) -> tuple[str, ...]:
        return (self.cwd, *self.additional_directories)

    @property
    def closed(self) -> bool:
        return self.slot.state is SlotState.CLOSED

    @property
    def active_turn(self) -> Turn | None:
        return self.slot.turn

    def resolve_path(self, path: str) -> str:
        """An absolute path: relative ones resolve against the session's cwd."""
        check_path_text(path)
        return os.path.normpath(path if os.path.isabs(path) else os.path.join(self.cwd, path))

    def within_roots(self, path: str) -> bool:
        """Whether ``path`` (absolute, normalised) lies inside one of the session's roots,
        symbolic links followed."""
        # cwd and the extra roots are fixed for a live session: resolved at the first check
        if self._root_set is None:
            self._root_set = Roots(self.roots)
        return self._root_set.contains(path)

    def new_tool_call_id(self) -> str:
        return self._new_id("call")

    def new_compaction_id(self) -> str:
        return self._new_id("compaction")

    def _new_id(self, kind: str) -> str:
        if self._tool_prefix is None:  # drawn at the session's first id
            self._tool_prefix = os.urandom(3).hex()
        self._tool_ids += 1
        return f"{kind}_{self._tool_prefix}_{self._tool_ids}"
