"""``--agent module:object`` over stdio, served while the module is still being imported.

The module of a framework's agent imports its framework: a second or more. So
:func:`serve_loading` serves at once and imports the module in a thread
(:func:`imported`; the task waiting for it lives under the serving task group, and is
cancelled if the client leaves first, after :data:`IMPORT_GRACE`). Meanwhile every
request and notification waits in one line (:class:`Line`), released in arrival order
once the agent is loaded and its store opened (its default file is named after the
agent), then handed to the real :class:`~acp_agent.server.AcpServer`'s method table.

``initialize`` waits in that line too, but only until ``wait`` seconds after serving
began (:data:`INITIALIZE_WAIT` by default: editors' own limits are in
docs/command-line.md). Answered in time, it is the object's own answer. Past that, it is
answered by a :class:`Handshake` over :class:`Announced`: what a plain
:class:`~acp_agent.agent.Agent` announces (prompts of text and resource links, MCP
servers over stdio, no authentication), which every agent ``--agent`` serves
supports; those ``initialize`` requests are replayed into the real server once it is
loaded (their answers dropped: the client has its answer). The first answer decides
for the connection: every later ``initialize`` announces the same, and after a
:class:`Announced` answer what it did not announce is refused ``-32602`` even where the
object would take it (an image for the pydantic-ai adapter, an MCP server over HTTP).
An object that authenticates cannot be announced before it is known: it is refused,
whether or not it was loaded in time.

A module that fails while importing, an object that is not an agent (or authenticates)
and a store that cannot be used are one line on stderr (``prog: --agent ...``) and exit
code 2; the requests waiting (``initialize`` among them) are answered ``-32603`` saying
why. A module that cannot be found is refused before serving
(:func:`acp_agent.adapters.check_spec`).

It does not know ACP's methods beyond ``initialize`` and the params checked against
what was announced: the rest are forwarded by name.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections import deque
from typing import Any, Final

import anyio
import anyio.from_thread
import anyio.lowlevel

from .. import __version__
from .._loop import Backend, run
from ..agent import Agent
from ..client import ClientCapabilities
from ..connection import AgentSession
from ..dispatch import MethodTable, RequestContext
from ..errors import InternalError
from ..options import ServerOptions
from ..runner import store_name, watch_signals
from ..server import AcpServer, connect
from ..server.handshake import Handshake
from ..server.params import check_mcp_servers, check_prompt_blocks
from ..store import StoreFailed, open_store
from ..transport import open_stdio, reserve_stdout
from . import LoadError, load

log = logging.getLogger("acp_agent.adapters.loading")

#: the exit status of an agent that cannot be served (a person's mistake on the command line)
EXIT_USAGE: Final = 2
#: how long, once the client has left, the import may go on to say why the agent cannot
#: be served (``acp-agent-kit --agent x:y </dev/null``); then it is abandoned
IMPORT_GRACE: Final = 2.0
#: how long, from the start of serving, ``initialize`` may wait for the object to be
#: loaded before it is answered without it: within the shortest limit an editor is known
#: to put on it (CodeCompanion.nvim's 20 s; Zed, acp.el and the official SDKs set none),
#: with room for the process's start, and above a framework's import on a 2-core machine
#: at load average 14 (10.7 s); docs/command-line.md
INITIALIZE_WAIT: Final = 15.0

__all__ = ["Announced", "Line", "serve_loading"]


class Announced(Agent):
    """What ``initialize`` announces when the served object is not known in time: a
    plain :class:`Agent`'s capabilities, named after the program and the ``--agent``
    given."""

    name = "acp-agent-kit"
    version = __version__

    def __init__(self, spec: str) -> None:
        self.title = spec  # type: ignore[misc]


class Line:
    """The requests read before the agent is loaded, released one at a time in arrival
    order: each wakes the next as it goes on, and the next runs only when it reaches
    its first ``await`` in its handler (what a handler does in arrival order, it does
    before that)."""

    __slots__ = ("_places", "failure", "opened")

    def __init__(self) -> None:
        self._places: deque[anyio.Event] = deque()
        self.opened = False
        #: why the agent cannot be served (the line is then open, every request fails)
        self.failure: str | None = None

    def enter(self) -> anyio.Event | None:
        """A place in line (call it before any ``await``), or None: go on at once."""
        if self.opened and not self._places:
            return None
        place = anyio.Event()
        self._places.append(place)
        return place

    async def wait(self, place: anyio.Event) -> None:
        """Wait for ``place``'s turn, then give it up (the next may go)."""
        try:
            await place.wait()
        finally:
            first = self._places[0] is place
            self._places.remove(place)
            if first and self._places and self.opened:
                self._places[0].set()

    def open(self, failure: str | None = None) -> None:
        """The agent is loaded (or, with ``failure``, cannot be): release the line."""
        self.opened = True
        self.failure = failure
        if self._places:
            self._places[0].set()


class _Loading:
    """One stdio connection serving ``--agent spec`` before and after it is loaded."""

    def __init__(
        self,
        spec: str,
        *,
        prog: str,
        store: str | None,
        lease_timeout: float | None,
        options: ServerOptions,
        wait: float = INITIALIZE_WAIT,
    ) -> None:
        self.spec = spec
        #: when ``initialize`` stops waiting for the object (``time.monotonic()``)
        self.deadline = time.monotonic() + wait
        self.prog = prog
        self.store_name = store
        self.lease_timeout = lease_timeout
        self.options = options
        self.line = Line()
        self.announced = Announced(spec)
        self.announcer = Handshake(self.announced, unstable=options.unstable)
        #: the served agent's server's method table, once it is loaded
        self.table: MethodTable | None = None
        #: whose capabilities the first ``initialize`` answer announced: the loaded
        #: agent's or, past the deadline, ``announced``'s (None: not answered yet)
        self.announcing: Agent | None = None
        self.agent: Agent | None = None
        #: ``initialize`` requests answered before that, to replay into it
        self.initialized: list[tuple[Any, RequestContext]] = []
        self.ended = anyio.Event()
        #: set once the import has ended (loaded, failed or refused)
        self.import_done = anyio.Event()
        self.conn: AgentSession | None = None

    # -- the connection's method table -------------------------------------------------

    def method_table(self) -> MethodTable:
        return MethodTable(
            requests={"initialize": self.initialize},
            fallback_request=self.request,
            fallback_notification=self.notification,
        )

    async def initialize(self, params: Any, ctx: RequestContext) -> Any:
        if self.announcing is None:  # wait for the agent, up to the deadline
            place = self.line.enter()
            if place is not None:
                with anyio.move_on_after(self.deadline - time.monotonic()):
                    await self.line.wait(place)
            if self.table is None and self.line.failure is not None:
                raise InternalError(f"The agent could not be served: {self.line.failure}")
            if self.announcing is None:
                self.announcing = self.agent if self.agent is not None else self.announced
        if self.announcing is not self.announced:  # the object's own answer
            assert self.table is not None
            return await self.table.requests["initialize"](params, ctx)
        answer = await self.announcer.initialize(params, ctx)
        if self.table is None:
            self.initialized.append((params, ctx))
        else:
            await self.table.requests["initialize"](params, ctx)
        return answer

    async def request(self, method: str, params: Any, ctx: RequestContext) -> Any:
        place = self.line.enter()
        if place is not None:
            await self.line.wait(place)
        if self.table is None:
            raise InternalError(f"The agent could not be served: {self.line.failure}")
        if self.announcing is self.announced and isinstance(params, dict):
            # the client may give only what initialize announced
            if "mcpServers" in params:
                check_mcp_servers(params, self.announced)
            prompt = params.get("prompt") if method == "session/prompt" else None
            if isinstance(prompt, list):
                check_prompt_blocks(prompt, self.announced)
        table = self.table
        fn = table.requests.get(method)
        if fn is not None:
            return await fn(params, ctx)
        note = table.notifications.get(method)
        if note is not None:  # a notification sent as a request (session/cancel with an id)
            await note(params)
            return None
        assert table.fallback_request is not None
        return await table.fallback_request(method, params, ctx)

    async def notification(self, method: str, params: Any) -> None:
        place = self.line.enter()
        if place is not None:
            await self.line.wait(place)
        if self.table is None:
            return  # the agent cannot be served: nothing to notify
        note = self.table.notifications.get(method)
        if note is not None:
            await note(params)
        elif self.table.fallback_notification is not None:
            await self.table.fallback_notification(method, params)

    # -- loading ---------------------------------------------------------------------

    def fail(self, message: str) -> None:
        """Say why in one line, answer the waiting requests so, and stop serving."""
        print(f"{self.prog}: {message}", file=sys.stderr, flush=True)
        self.line.open(failure=message)
        if self.conn is not None:
            self.conn.stop_reading()

    async def load_and_serve(self, conn: AgentSession) -> None:
        """Load the agent, open its store, then serve it on ``conn`` until ``ended``."""
        try:
            agent = await imported(self.spec)
            refuse_unannounceable(agent, self.spec)
        except LoadError as exc:
            return self.fail(str(exc))
        except Exception as exc:  # the object's own code (an adapter refusing it, ...)
            return self.fail(f"--agent {self.spec}: {type(exc).__name__}: {exc}")
        finally:
            self.import_done.set()
        if self.ended.is_set():
            return
        try:
            store = await open_store(
                self.store_name, lease_timeout=self.lease_timeout, agent=store_name(agent)
            )
        except StoreFailed as exc:
            return self.fail(exc.message)
        try:
            await self.serve_loaded(AcpServer(agent, store, self.options), conn)
        finally:
            with anyio.CancelScope(shield=True):
                await store.aclose()

    async def serve_loaded(self, server: AcpServer, conn: AgentSession) -> None:
        table = server.method_table()
        async with server.serving(conn):
            try:
                while self.initialized:  # (one may arrive while another is replayed)
                    params, ctx = self.initialized.pop(0)
                    await table.requests["initialize"](params, ctx)
            except Exception as exc:  # the agent's own initialize, after the answer was sent
                name = type(server.agent).__qualname__
                return self.fail(
                    f"--agent {self.spec}: {name}.initialize raised {type(exc).__name__}: {exc}"
                )
            self.agent = server.agent
            self.table = table
            self.line.open()
            log.info("serving %s (%s) on stdio", self.spec, server.agent.name)
            await self.ended.wait()

    async def serve(self, write_fd: int) -> None:
        transport = open_stdio(0, write_fd)
        self.conn = conn = connect(transport, self.method_table(), self.options)
        try:
            async with anyio.create_task_group() as tg:
                serving = anyio.CancelScope()
                tg.start_soon(watch_signals, conn.stop_reading, serving.cancel)
                with serving:
                    async with anyio.create_task_group() as loading:
                        loading.start_soon(self.load_and_serve, conn, name="acp-agent-load")
                        try:
                            await conn.serve()
                        finally:
                            self.ended.set()
                            if self.table is None:  # the client left before it was loaded
                                with anyio.move_on_after(IMPORT_GRACE):
                                    await self.import_done.wait()  # to say why it failed
                                loading.cancel_scope.cancel()
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await transport.aclose()


async def imported(spec: str) -> Agent:
    """:func:`~acp_agent.adapters.load` of ``spec`` in a thread of its own, while this task
    waits. The thread is a daemon: an import cannot be interrupted, so if the client
    leaves first (this task is cancelled) it is abandoned, and the process still exits
    (anyio's worker threads would be joined at exit, for as long as the import takes)."""
    done = anyio.Event()
    outcome: list[Agent | BaseException] = []
    token = anyio.lowlevel.current_token()

    def run() -> None:
        try:
            outcome.append(load(spec))
        except BaseException as exc:  # handed to the waiting task, which raises it
            outcome.append(exc)
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
            anyio.from_thread.run_sync(done.set, token=token)

    threading.Thread(target=run, name="acp-agent-import", daemon=True).start()
    await done.wait()
    [result] = outcome
    if isinstance(result, BaseException):
        raise result
    return result


def refuse_unannounceable(agent: Agent, spec: str) -> None:
    """Refuse an agent whose ``initialize`` answer :class:`Announced` cannot give: one
    that authenticates (its methods are announced in ``initialize``)."""
    if (
        agent.requires_auth()
        or agent.supports_logout()
        or list(agent.auth_methods(ClientCapabilities()))
    ):
        raise LoadError(
            f"--agent {spec}: {type(agent).__qualname__} authenticates, which must be "
            "announced before the agent is loaded: serve it with acp_agent.runner.run_agent"
        )


def serve_loading(
    spec: str,
    *,
    prog: str,
    backend: Backend = "auto",
    store: str | None = None,
    lease_timeout: float | None = None,
    options: ServerOptions | None = None,
    initialize_wait: float = INITIALIZE_WAIT,
) -> int:
    """Serve ``--agent spec`` over this process's stdin/stdout, importing the module
    meanwhile; ``initialize`` waits for it up to ``initialize_wait`` seconds. Returns
    the exit code (0, or 2 when the agent cannot be served, after one line on stderr)."""
    loading = _Loading(
        spec,
        prog=prog,
        store=store,
        lease_timeout=lease_timeout,
        options=options if options is not None else ServerOptions(),
        wait=initialize_wait,
    )
    reservation = reserve_stdout()
    try:
        run(lambda: loading.serve(reservation.fd), backend=backend)
    finally:
        reservation.restore()
    return EXIT_USAGE if loading.line.failure is not None else 0
