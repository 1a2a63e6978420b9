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


@dataclass(eq=False)
class Session:
    """One ACP session (a ``sessionId``) live on a connection."""

    session_id: str
    cwd: str
    additional_directories: tuple[str, ...] = ()
    title: str | None = None
    mode_id: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    mcp_servers: list[Any] = field(default_factory=list)
    slot: PromptSlot = field(default_factory=PromptSlot)
    history: History = field(default_factory=History)
    #: free slot for the agent's own per-session state
    state: dict[str, Any] = field(default_factory=dict)
    #: the most recent turn (it may still be unwinding after a cancel)
    last_turn: Turn | None = None
    #: the turn whose history is open (or being made durable); the next turn waits for it
    history_turn: Turn | None = None
    _tool_ids: int = 0
    _root_set: Roots | None = None
    _tool_prefix: str = field(default_factory=lambda: os.urandom(3).hex())

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
        self._tool_ids += 1
        return f"call_{self._tool_prefix}_{self._tool_ids}"

    def new_compaction_id(self) -> str:
        self._tool_ids += 1
        return f"compaction_{self._tool_prefix}_{self._tool_ids}"
