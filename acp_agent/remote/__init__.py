"""Layer 5: the same agents over Streamable HTTP and WebSocket, many clients per process.

``serve_http(agent, listen=..., principals=...)`` serves any :class:`~acp_agent.Agent`
at ``/acp`` (``acp-agent-kit serve`` is the command line for it); each connection gets a
server object of its own over a :class:`~acp_agent.remote.link.MessageLink`, all of
them sharing one session store, and each principal sees only its own sessions.

Modules: ``link`` (a connection as a byte transport), ``auth`` (the token file),
``registry`` (open connections and their limits), ``health`` (whether the store
answers), ``asgi`` (the ``/acp`` and ``/healthz`` endpoints), ``sockets`` (the client
sockets below HTTP: those carrying no request, bounded per peer address), ``serve`` (the
process: listening, TLS, Hypercorn, the stop), ``cli`` (the ``serve`` subcommand).
The operator's guide is ``docs/remote.md``.

It needs the ``remote`` extra (Hypercorn and wsproto): ``pip install 'acp-agent-kit[remote]'``.
"""

from __future__ import annotations

from .auth import LOCAL, Principals, TokenFileError
from .registry import Limits
from .serve import RemoteConfigError, Tls, run_http, serve_http

__all__ = [
    "LOCAL",
    "Limits",
    "Principals",
    "RemoteConfigError",
    "Tls",
    "TokenFileError",
    "run_http",
    "serve_http",
]
