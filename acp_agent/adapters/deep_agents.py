"""Deep Agents (``deepagents``) on the LangGraph adapter: a ``create_deep_agent(...)``
graph is a compiled LangGraph graph and is served as one (:mod:`acp_agent.adapters.langgraph`:
its ``write_todos`` as plans, its ``task`` subagent calls and file tools as tool calls,
``interrupt_on`` as permission requests, memory across processes).

Owns what is Deep Agents' own:

* :func:`editor_backend`: a Deep Agents backend whose ``read_file``, ``write_file`` and
  ``edit_file`` go through the client's ``fs/*`` (the editor's buffers, unsaved changes
  included) when the client offers them, and to the graph's virtual filesystem (Deep
  Agents' ``StateBackend``) otherwise, and for ``ls``, ``glob`` and ``grep``, which ACP
  has no request for. The virtual root ``/`` is the session's cwd; a path already inside
  the session's folders is used as it is;
* :data:`TOOL_METADATA`: the ACP kind of each Deep Agents tool and the argument naming
  the file it touches, for :class:`~acp_agent.adapters.langgraph.LangGraphAgent`'s
  ``tool_metadata`` (:func:`serve`).

It imports ``deepagents`` only when :func:`editor_backend` is called.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .langgraph import LangGraphAgent

__all__ = ["TOOL_METADATA", "editor_backend", "serve"]

#: Deep Agents' tools: their ACP kinds and path arguments
TOOL_METADATA: Final[Mapping[str, Mapping[str, Any]]] = {
    "ls": {"acp_kind": "search", "acp_path": "path"},
    "read_file": {"acp_kind": "read", "acp_path": "file_path"},
    "write_file": {"acp_kind": "edit", "acp_path": "file_path"},
    "edit_file": {"acp_kind": "edit", "acp_path": "file_path"},
    "glob": {"acp_kind": "search"},
    "grep": {"acp_kind": "search"},
    "write_todos": {"acp_kind": "think"},
    "task": {"acp_kind": "think"},
}


def editor_backend() -> Any:
    """A backend for ``create_deep_agent(..., backend=editor_backend())``: files through
    the client's editor when it offers ``fs/*`` (see the module docstring)."""
    from ._deep_agents_backend import EditorBackend

    return EditorBackend()


def serve(graph: Any, **options: Any) -> LangGraphAgent:
    """A deep agent's graph as an ACP agent, its tools' kinds declared
    (:data:`TOOL_METADATA`, then ``options["tool_metadata"]``); ``options`` as
    :class:`~acp_agent.adapters.langgraph.LangGraphAgent` takes them."""
    metadata = {**TOOL_METADATA, **(options.pop("tool_metadata", None) or {})}
    return LangGraphAgent(graph, tool_metadata=metadata, **options)
