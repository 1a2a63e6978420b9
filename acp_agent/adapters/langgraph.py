"""Serve a compiled LangGraph graph (a LangChain ``create_agent`` result too) over ACP.

Owns :class:`LangGraphAgent` and the translation of one graph run into ACP updates:

* ``stream_mode=["messages", "updates", "tasks"]`` (``version="v2"``, subgraphs
  included): text and reasoning content blocks become message and thought chunks as the
  model streams them; a tool call is announced ``pending`` from its first streamed chunk
  (with the tool's ``name`` and the kind its ``metadata["acp_kind"]`` declares), goes
  ``in_progress`` when the tool really starts (a callback, so an approval asked before it
  runs sees it still ``pending``) and ``completed``/``failed`` from its ``ToolMessage``,
  whose text is the call's content; a ``todos`` state update (langchain's
  ``write_todos``) becomes a plan; token usage is counted from the messages' usage;
* interrupts: the human-in-the-loop middleware's requests (batched and per call) and an
  ``interrupt()`` raised inside a tool become ``session/request_permission`` on that
  tool call's own id, resumed with the middleware's decisions (``approve``/``reject``),
  or ``{"type": "approve" | "reject"}`` for a plain ``interrupt()``; a dismissed request
  ends the turn ``cancelled``;
* memory: the graph runs on a checkpointer of this module's own
  (:class:`~acp_agent.adapters._langgraph_runtime.SessionCheckpointer`) whatever it was
  compiled with, one thread per ACP session, folded from the session's saved turns when
  a turn starts (in this process or after ``session/load`` in another), what the turn
  changed in it saved with the turn's end (:mod:`~acp_agent.adapters._langgraph_memory`)
  and the thread dropped from memory after it; a tool call a cancelled turn left
  without a result gets one before the next prompt, so the model's history stays valid;
  a turn that ended with nothing saved is told at ``session/load`` as its messages
  appended to the thread (:mod:`~acp_agent.adapters._langgraph_unfinished`);
* MCP: the servers a client gives in ``session/new``/``load``, connected with this
  project's own MCP host (:mod:`~acp_agent.adapters._langgraph_mcp`) and held for the
  session (:mod:`~acp_agent.adapters.mcp_servers`), reach a graph made with
  :func:`session_mcp` among its middleware as LangChain tools, beside its own.

LangGraph runs on asyncio only. Nothing of LangGraph or LangChain is imported until a
graph is first served.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final

from ..agent import Command, ConfigOption, PromptTurn, StopReason
from ..session import Session
from ._langgraph_memory import changes, fold
from ._langgraph_run import GraphRun
from .mcp_servers import ServersAgent, SessionServers, installed
from .openai_based import require_asyncio, serve_turn
from .turns import (
    AdapterTurn,
    model_option,
    saved,
)
from .unfinished import UnfinishedTurn, remember_unfinished

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from ._langgraph_mcp import McpServer
    from ._langgraph_runtime import SessionCheckpointer

JSON = dict[str, Any]

log = logging.getLogger("acp_agent.adapters.langgraph")

__all__ = ["LangGraphAgent", "adapt", "editor_tools", "session_mcp"]

#: the node-update key under which LangGraph reports the run's interrupts
#: the name of :func:`session_mcp`'s middleware (a graph with it has a node so prefixed)
MIDDLEWARE_NAME: Final = "acp_session_mcp"
#: the tool's result, sent as a ``respond`` decision, where a call may not be rejected


def editor_tools(*, approve_writes: bool = True, approve_commands: bool = True) -> list[Any]:
    """The client's editor as LangChain tools for ``create_agent``: ``read_file``,
    ``write_file`` and ``run_command`` (``sh -c`` in a client terminal, shown in the tool
    call). Paths stay inside the session's roots; a tool the client's capabilities do not
    allow tells the model so. Writing and running ask the person first (an ``interrupt()``)
    unless told not to."""
    from ._langgraph_runtime import editor_tools as made

    return list(made(approve_writes=approve_writes, approve_commands=approve_commands))


def session_mcp() -> Any:
    """The middleware (for ``create_agent(..., middleware=[...])`` or
    ``create_deep_agent``) that gives the graph the MCP servers' tools of the session
    its turn belongs to: offered to the model beside the graph's own tools, and run by
    its tool node. Outside a turn served by :class:`LangGraphAgent` it adds nothing."""
    from ._langgraph_mcp import SessionMcpMiddleware

    return SessionMcpMiddleware()


def adapt(graph: Any) -> LangGraphAgent:
    """The registry's entry point: a compiled graph -> an :class:`Agent`."""
    return LangGraphAgent(graph)


class LangGraphAgent(ServersAgent):
    """An ACP agent running a compiled LangGraph graph whose state has ``messages``.

    A tool's ``metadata`` declares its ACP kind (``acp_kind``), the argument holding the
    path its calls touch (``acp_path``) and whether it is a plan tool (``acp_plan``);
    ``tool_metadata`` adds to it by tool name (for tools the graph does not expose).
    ``commands`` are advertised as slash commands (their text goes to the model as
    typed); ``context_window`` (tokens), when given, enables ``usage_update``.
    ``models`` (two or more names, the first the default) are offered as the session's
    ``model`` config option; the chosen one reaches the graph as
    ``config["configurable"]["model"]``, which a model made with
    ``init_chat_model(..., configurable_fields=("model",))`` follows.
    The session's MCP servers reach a graph that has :func:`session_mcp`'s middleware.
    """

    name = "langgraph"
    # this project's MCP host (the mcp package) speaks streamable HTTP besides stdio
    mcp_http: ClassVar[bool] = installed("mcp")

    def __init__(
        self,
        graph: Any,
        *,
        name: str | None = None,
        tool_metadata: Mapping[str, Mapping[str, Any]] | None = None,
        commands: Sequence[Command] = (),
        context_window: int | None = None,
        models: Sequence[str] = (),
    ) -> None:
        self.graph_given = graph
        self.models = list(dict.fromkeys(models))
        self.given_metadata = dict(tool_metadata or {})
        self.slash_commands = list(commands)
        self.context_window = context_window
        if name is not None:
            self.name = name  # type: ignore[misc]
        self._graph: Any = None
        self._saver: SessionCheckpointer | None = None
        #: tool name -> its metadata (the ``acp_*`` keys are read)
        self.metadata: dict[str, Mapping[str, Any]] = {}
        #: the MCP servers of the sessions, held open (for a graph that takes them)
        self.mcp: SessionServers[McpServer] = SessionServers(_open_server, _ping)
        nodes = getattr(graph, "nodes", None) or {}
        self.takes_mcp = any(str(n).startswith(f"{MIDDLEWARE_NAME}.") for n in nodes)
        self.mcp_http = self.takes_mcp and installed("mcp")  # type: ignore[misc]
        self._untaken_noted = False

    def _ready(self) -> tuple[Any, SessionCheckpointer]:
        """The graph on our checkpointer (made at the first turn: imports LangGraph)."""
        if self._graph is None or self._saver is None:
            from ._langgraph_runtime import SessionCheckpointer, whole_channels

            self._saver = SessionCheckpointer()
            update: JSON = {"checkpointer": self._saver}
            channels = whole_channels(self.graph_given.channels)
            if channels is not None:
                update["channels"] = channels
            self._graph = self.graph_given.copy(update=update)
            for node in self.graph_given.nodes.values():
                for tool_name, tool in (getattr(node.bound, "tools_by_name", None) or {}).items():
                    self.metadata[tool_name] = getattr(tool, "metadata", None) or {}
            self.metadata.update(self.given_metadata)
        return self._graph, self._saver

    async def new_session(self, session: Session) -> None:
        self._hold_servers(session)

    async def load_session(self, session: Session) -> None:
        self._hold_servers(session)
        remember_unfinished(session, self.unfinished_memory)

    def unfinished_memory(self, turn: UnfinishedTurn, before: Sequence[Any]) -> Any:
        from ._langgraph_unfinished import unfinished_changes

        _, saver = self._ready()
        return unfinished_changes(turn, before, saver.serde)

    def _hold_servers(self, session: Session) -> None:
        if self.takes_mcp:
            self.mcp.start(session)
        elif session.mcp_servers and not self._untaken_noted:
            self._untaken_noted = True
            log.warning(
                "the graph has no session_mcp() middleware: the session's MCP servers "
                "are not connected"
            )

    def commands(self, session: Session) -> Sequence[Command]:
        return self.slash_commands

    def config_options(self, session: Session) -> Sequence[ConfigOption]:
        return model_option(self.models)

    def chosen_model(self, session: Session) -> str | None:
        """The session's ``model`` choice (None when no choice is offered)."""
        if len(self.models) < 2:
            return None
        chosen = session.config.get("model")
        return chosen if isinstance(chosen, str) and chosen in self.models else self.models[0]

    async def prompt(self, turn: PromptTurn) -> StopReason:
        require_asyncio("LangGraph")
        graph, saver = self._ready()
        if self.takes_mcp:
            servers = await self.mcp.ready(turn.session)
            if turn.session.mcp_servers:
                from ._langgraph_mcp import set_turn_tools

                set_turn_tools(turn.session.state, servers)
        thread = turn.session.session_id
        # the session's saved turns fold into the thread: restored for the turn, what the
        # turn changed in it saved with its end, and the thread dropped after it
        base = fold(saved(turn.session)[0])
        saver.restore_thread(thread, base)
        adapter = AdapterTurn(turn)
        run = GraphRun(self, adapter, graph)
        try:
            return await serve_turn(
                adapter, run.run, lambda: changes(base, saver.export_thread(thread))
            )
        finally:
            saver.forget_thread(thread)


def _open_server(spec: Mapping[str, Any], cwd: str) -> AbstractAsyncContextManager[McpServer]:
    from ._langgraph_mcp import open_server

    return open_server(spec, cwd)


async def _ping(server: McpServer) -> None:
    from ._langgraph_mcp import ping

    await ping(server)


# -- pure helpers ---------------------------------------------------------------------------
