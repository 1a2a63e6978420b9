"""Run an agent over stdio: the few lines between an :class:`Agent` and a process.

``run_agent(agent)`` reserves the real stdout for protocol frames (everything else that
writes to stdout goes to stderr), opens and checks the session store (SQLite in the user's
data directory, a file named after the agent, unless told otherwise; one line on stderr and
exit status 2 if it cannot be used, before anything is served), serves until stdin
reaches EOF or SIGTERM arrives, and shuts down cleanly: in-flight turns are cancelled,
pending calls fail, the last frames are flushed and the store is closed.

It owns process-level concerns only; the protocol lives in :mod:`acp_agent.server`.
"""

from __future__ import annotations

import functools
import logging
import shlex
import signal
import sys
from collections.abc import Callable

import anyio

from ._loop import Backend, run
from .agent import Agent
from .options import ServerOptions
from .preflight import waiting_note
from .server import AcpServer
from .store import SessionStore, StoreFailed, open_store
from .transport import open_stdio, reserve_stdout

log = logging.getLogger("acp_agent.runner")

EXIT_STORE = 2  # a store that cannot be used is a person's mistake on the command line


async def watch_signals(stop: Callable[[], None], force: Callable[[], None]) -> None:
    """The first signal ends input as EOF would (turns answer ``cancelled`` after the
    same grace); a second one stops at once."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        seen = 0
        async for signum in signals:
            seen += 1
            log.info("received signal %s: shutting down", signum)
            if seen == 1:
                stop()
            else:
                force()
                return


def store_name(agent: Agent) -> str:
    """The name of ``agent``'s default store: its ``name`` if its class (or a base other
    than :class:`Agent`) sets one, else its class name, so that two agents never share a
    default store by accident."""
    for cls in type(agent).__mro__:
        if cls is Agent:
            break
        if "name" in vars(cls):
            return agent.name
    return type(agent).__name__


async def serve_stdio(
    agent: Agent,
    *,
    store: SessionStore | str | None = None,
    write_fd: int = 1,
    read_fd: int = 0,
    lease_timeout: float | None = None,
    options: ServerOptions | None = None,
) -> None:
    """Serve ``agent`` on the given descriptors until EOF or SIGTERM. A store named (or
    the default one) is opened and checked first: ``StoreFailed`` if it cannot be used,
    before anything is served."""
    opened = store if store is not None and not isinstance(store, str) else None
    name = store if isinstance(store, str) else None
    the_store = (
        opened
        if opened is not None
        else await open_store(name, lease_timeout=lease_timeout, agent=store_name(agent))
    )
    transport = open_stdio(read_fd, write_fd)
    server = AcpServer(agent, the_store, options)
    try:
        async with anyio.create_task_group() as tg:
            serving = anyio.CancelScope()

            async def run_server() -> None:
                log.info("serving %s on stdio", agent.name)
                with serving:
                    await server.serve(transport)
                log.info("the connection ended; stopped")
                tg.cancel_scope.cancel()

            tg.start_soon(watch_signals, server.stop, serving.cancel)
            tg.start_soon(run_server)
    finally:
        with anyio.CancelScope(shield=True):
            await transport.aclose()
            if opened is None:
                await the_store.aclose()


def run_agent(
    agent: Agent,
    *,
    backend: Backend = "auto",
    prog: str | None = None,
    hint: bool = True,
    store: SessionStore | str | None = None,
    lease_timeout: float | None = None,
    options: ServerOptions | None = None,
) -> int:
    """Serve ``agent`` over this process's stdin/stdout; returns the exit code: 0, or 2
    after one line on stderr (``prog: ...``, ``prog`` defaulting to the agent's name)
    when the session store cannot be used. Started in a terminal (and ``hint``), it says
    on stderr what it waits for."""
    if hint and sys.stdin.isatty():
        chat = "acp-agent-kit chat -- " + shlex.join(sys.orig_argv)
        print(waiting_note(prog or agent.name, chat), file=sys.stderr, flush=True)
    reservation = reserve_stdout()
    serve = functools.partial(serve_stdio, agent, store=store, options=options)
    try:
        run(lambda: serve(write_fd=reservation.fd, lease_timeout=lease_timeout), backend=backend)
    except StoreFailed as exc:
        print(f"{prog or agent.name}: {exc.message}", file=sys.stderr)
        return EXIT_STORE
    finally:
        reservation.restore()
    return 0
