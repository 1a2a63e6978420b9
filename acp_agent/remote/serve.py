"""Serve an agent to many remote clients: ``serve_http`` and ``run_http``.

This module owns the process around the ``/acp`` endpoint: where it listens (and the
rules that beyond loopback it needs a token file, and TLS unless the operator says TLS
ends in front of it), TLS (HTTP/1.1 and HTTP/2 by ALPN, and ``wss://``), the ASGI
server underneath (Hypercorn, with wsproto for WebSockets: it runs on asyncio, uvloop
and trio alike), one server object per connection sharing one session store, and the
stop: on SIGTERM or SIGINT every connection's input ends as a closed pipe would, open
turns answer ``cancelled``, the streams close and the call returns; a client socket
still open ``CUT_AFTER`` seconds later (a client that stopped reading keeps its
socket's writes waiting forever) is shut down, so the stop takes seconds whatever the
clients do. Sockets that carry no request have ``Limits.head_timeout`` to send one (the
TLS handshake included) and are bounded per peer address (see
:mod:`acp_agent.remote.sockets`); ``run_http`` raises the process's limit on open files
to the hard one.

It knows nothing of the HTTP details (:mod:`acp_agent.remote.asgi`) nor of how the
connections are kept (:mod:`acp_agent.remote.registry`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import logging
import signal
import socket
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from .._loop import Backend, run, running_asyncio_loop
from ..agent import Agent
from ..options import ServerOptions
from ..server import AcpServer, build_models
from ..server.owners import SessionOwners
from ..store import SessionStore, open_store
from .asgi import RemoteApp
from .auth import Principals
from .health import StoreHealth
from .registry import SHUTDOWN_GRACE, Limits, Registry
from .sockets import RequestSockets, bound_idle_sockets, shut_down_accepted

__all__ = ["RemoteConfigError", "Tls", "is_loopback", "parse_listen", "run_http", "serve_http"]

log = logging.getLogger("acp_agent.remote")

AgentSource = Agent | Callable[[], Agent]
"""An agent shared by every connection, or a callable making one per connection (an
``Agent`` subclass itself is such a callable)."""


GRACEFUL_TIMEOUT = 2.0
"""Seconds Hypercorn gives open sockets to close once the connections have ended."""
CUT_AFTER = SHUTDOWN_GRACE + GRACEFUL_TIMEOUT + 1.0
"""Seconds after the stop begins when client sockets still open are shut down."""


BACKLOG = 1024
"""Connections the kernel completes and holds until the server accepts them."""


class RemoteConfigError(ValueError):
    """The server cannot start as configured (the message says why)."""


@dataclass(frozen=True)
class Tls:
    """The server's certificate chain and private key (PEM files)."""

    cert: str
    key: str


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as ``(host, port)``."""
    host, sep, port_text = listen.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise RemoteConfigError(f"--listen {listen!r}: expected HOST:PORT, e.g. 127.0.0.1:8765")
    return host.removeprefix("[").removesuffix("]"), int(port_text)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, backlog=BACKLOG)
    except OSError as exc:
        raise RemoteConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _hypercorn_config(fd: int, limits: Limits, tls: Tls | None) -> Any:
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"fd://{fd}"]
    if tls is not None:
        config.certfile, config.keyfile = tls.cert, tls.key
        try:
            config.create_ssl_context()  # a bad file shows now, as one line
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            why = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or exc
            raise RemoteConfigError(
                f"cannot use --tls-cert {tls.cert} with --tls-key {tls.key}: {why}"
            ) from None
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    # Frames up to twice the cap reach the server, which answers those over the cap
    # with an error (as on stdio); larger ones close the socket (1009).
    config.websocket_max_message_size = 2 * limits.max_message
    config.graceful_timeout = GRACEFUL_TIMEOUT
    config.backlog = BACKLOG  # Hypercorn listens on the socket again, with its own (100)
    # Hypercorn's idle timer runs from accept (after the TLS handshake) until a request
    # head is complete, and between two requests on a kept-alive socket.
    config.keep_alive_timeout = limits.head_timeout
    config.ssl_handshake_timeout = limits.head_timeout
    return config


async def _run_hypercorn(
    app: RemoteApp, config: Any, trigger: Callable[[], Awaitable[None]]
) -> None:
    if running_asyncio_loop() is None:  # trio
        from hypercorn.trio import serve as trio_serve

        await trio_serve(app, config, shutdown_trigger=trigger)  # type: ignore[arg-type]
        return
    import asyncio

    from hypercorn.asyncio import serve as asyncio_serve

    # A client still connected when the graceful stop runs out has its task cancelled;
    # asyncio (before 3.12) then logs that cancellation as an error of its own.
    logging.getLogger("asyncio").addFilter(_quiet_cancelled)

    # Hypercorn stops through an asyncio.TaskGroup, which cancels its parent task: a
    # task of its own keeps that cancellation away from this task's anyio scopes.
    await asyncio.ensure_future(asyncio_serve(app, config, shutdown_trigger=trigger))  # type: ignore[arg-type]


def _quiet_cancelled(record: logging.LogRecord) -> bool:
    import asyncio

    exc = record.exc_info[1] if record.exc_info else None
    return not isinstance(exc, asyncio.CancelledError)


@contextlib.contextmanager
def _listening(
    listen: str, principals: Principals, tls: Tls | None, insecure_http: bool
) -> Iterator[socket.socket]:
    host, port = parse_listen(listen)
    if principals.open_access and not is_loopback(host):
        raise RemoteConfigError(
            f"refusing to listen on {host} without --token-file: anyone who reaches it "
            "could drive the agent; give a token file, or listen on 127.0.0.1"
        )
    if tls is None and not insecure_http and not is_loopback(host):
        raise RemoteConfigError(
            f"refusing to listen on {host} over plain HTTP: tokens would cross the network "
            "in clear; give --tls-cert and --tls-key, or --insecure-http if TLS ends in "
            "front of this server"
        )
    sock = _bind(host, port)
    try:
        yield sock
    finally:
        sock.close()


async def serve_http(
    agent: AgentSource,
    *,
    listen: str = "127.0.0.1:8765",
    principals: Principals | None = None,
    store: SessionStore | str | None = None,
    limits: Limits | None = None,
    lease_timeout: float | None = None,
    options: ServerOptions | None = None,
    ready: Callable[[str], None] | None = None,
    stop: anyio.Event | None = None,
    tls: Tls | None = None,
    insecure_http: bool = False,
) -> None:
    """Serve ``agent`` at ``http://LISTEN/acp`` (and ``ws://``; ``https://`` and
    ``wss://`` with ``tls``) until SIGTERM or SIGINT, or until ``stop`` is set; ``ready``
    is called with the URL once clients may connect. Beyond loopback it needs
    ``principals`` with tokens, and ``tls`` unless ``insecure_http``.

    ``store`` is a store, a SQLite path, ``"memory"``, a PostgreSQL URL (whose session
    leases last ``lease_timeout`` seconds) or None (the default SQLite file).
    """
    who = principals if principals is not None else Principals()
    bounds = limits if limits is not None else Limits()

    def make_agent() -> Agent:
        return agent if isinstance(agent, Agent) else agent()

    opened = store if store is not None and not isinstance(store, str) else None
    name = store if isinstance(store, str) else None
    # Opened and checked before anything listens (``StoreFailed`` if it cannot be used).
    shared: SessionStore = (
        opened if opened is not None else await open_store(name, lease_timeout=lease_timeout)
    )

    owners = SessionOwners()  # one live connection per session, across all of them
    # a message is bounded by the remote limits, whatever the options say
    server_options = dataclasses.replace(
        options if options is not None else ServerOptions(), max_line=bounds.max_message
    )

    def make_server(principal: str) -> AcpServer:
        return AcpServer(make_agent(), shared, server_options, owner=principal, owners=owners)

    registry = Registry(bounds, make_server)
    health = StoreHealth(shared)
    requests = RequestSockets()
    app = RemoteApp(registry, who, health, requests)
    stopping = stop if stop is not None else anyio.Event()
    # A long-running server builds the protocol models before it listens, once, rather
    # than on the first connection that goes quiet (stdio keeps that lazy start-up).
    await anyio.to_thread.run_sync(build_models)
    try:
        with _listening(listen, who, tls, insecure_http) as sock:
            host, port = sock.getsockname()[:2]
            config = _hypercorn_config(sock.fileno(), bounds, tls)
            sock.detach()

            async def shutdown_trigger() -> None:
                await stopping.wait()
                await registry.shutdown()

            async with anyio.create_task_group() as tg:
                await tg.start(registry.run)
                health.start(tg)
                await tg.start(_watch_signals, stopping)  # before clients are told
                tg.start_soon(_cut_stalled_sockets, stopping, port)
                tg.start_soon(bound_idle_sockets, port, requests, bounds.idle_sockets)
                if ready is not None:
                    shown = f"[{host}]" if ":" in host else host
                    ready(f"{'https' if tls else 'http'}://{shown}:{port}/acp")
                await _run_hypercorn(app, config, shutdown_trigger)
                tg.cancel_scope.cancel()
    finally:
        if opened is None:
            with anyio.CancelScope(shield=True):
                await shared.aclose()


async def _watch_signals(
    stopping: anyio.Event, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            log.info("received signal %s: shutting down", signum)
            stopping.set()
            return


async def _cut_stalled_sockets(stopping: anyio.Event, port: int) -> None:
    """Once the stop has run ``CUT_AFTER`` seconds, shut down every client socket still
    open: a client that does not read holds a write, and so the stop, forever."""
    await stopping.wait()
    await anyio.sleep(CUT_AFTER)
    cut = shut_down_accepted(port)
    if cut:
        log.warning("stopping: cut %d client socket(s) that did not close in time", cut)


def run_http(agent: AgentSource, *, backend: Backend = "auto", **options: Any) -> int:
    """Serve ``agent`` remotely in this process (see :func:`serve_http`), with as many
    file descriptors as the system lets it open; returns 0."""
    raise_fd_limit()
    run(lambda: serve_http(agent, **options), backend=backend)
    return 0


def raise_fd_limit() -> None:
    """Raise this process's soft limit on open files to its hard limit: each client
    socket is a descriptor, and at the limit the event loop accepts no one (libuv, under
    uvloop, then closes at once the connections waiting to be accepted, whoever they
    come from)."""
    try:
        import resource
    except ImportError:  # not on this platform
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):  # a hard limit the kernel refuses
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
