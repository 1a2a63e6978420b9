"""The client sockets of the listening port, as this process holds them.

This module owns what can only be seen at the socket level, below the HTTP server:

- which sockets carry a request (:class:`RequestSockets`: the endpoint counts each
  request's peer address while the request is open);
- the bound on sockets that carry none (a TLS handshake under way, a request head not
  complete yet, a kept-alive socket between requests), per peer address:
  :func:`bound_idle_sockets` looks at the accepted sockets every ``SWEEP_EVERY``
  seconds and shuts down, oldest first, those of a peer beyond ``Limits.idle_sockets``
  (Hypercorn gives no hook at accept, so the bound holds from the next look on);
- the stop's last step: :func:`shut_down_accepted` cuts every socket still open.

Sockets are found through ``/dev/fd`` (Linux and macOS; elsewhere nothing is found and
nothing is cut), or, at the limit on open files where that directory cannot be opened,
by trying every descriptor number: a socket accepted on the listening port is one whose
local port is that port and that has a peer. The look and the cut run in the event
loop's own thread, in one step, so a descriptor cannot change owner between them.

A cut socket's owner (Hypercorn) closes it at once if it had read part of a request
head or was in the TLS handshake; one it had read nothing from it closes only when its
own idle timer runs out (``Limits.head_timeout``).

It knows nothing of HTTP, ACP or principals: the time a socket may take to send its
request head is Hypercorn's own timer (set in :mod:`acp_agent.remote.serve`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat
import struct
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import anyio

if sys.platform != "win32":  # (nor is there a /dev/fd there)
    import resource  # imported now: at the limit on open files no module can be read

__all__ = ["SWEEP_EVERY", "RequestSockets", "bound_idle_sockets", "shut_down_accepted"]

log = logging.getLogger("acp_agent.remote")

SWEEP_EVERY = 0.5
"""Seconds between two looks at the accepted sockets."""

Peer = tuple[str, int]
"""A socket's remote end: host and port."""


class RequestSockets:
    """The peer addresses of the sockets that carry an open request (an HTTP/2 socket
    may carry several)."""

    def __init__(self) -> None:
        self._open: Counter[Peer] = Counter()

    @contextlib.contextmanager
    def carrying(self, client: Any) -> Iterator[None]:
        """Count ``client`` (an ASGI scope's ``client``) as carrying a request in the block."""
        if not (isinstance(client, (list, tuple)) and len(client) == 2):
            yield  # no socket address (a test transport, a Unix socket)
            return
        peer = (str(client[0]), int(client[1]))
        self._open[peer] += 1
        try:
            yield
        finally:
            self._open[peer] -= 1
            if not self._open[peer]:
                del self._open[peer]

    def __contains__(self, peer: object) -> bool:
        return peer in self._open

    def sockets(self) -> int:
        """How many sockets carry a request (each peer address is one socket)."""
        return len(self._open)


def _open_fds() -> list[int]:
    """This process's open descriptors (a few may have closed since), none where there
    is no /dev/fd; at the limit on open files, where the directory itself cannot be
    opened, every descriptor number below the limit."""
    try:
        return [int(name) for name in os.listdir("/dev/fd")]
    except OSError as exc:
        if exc.errno not in (errno.EMFILE, errno.ENFILE):
            return []
    return list(range(resource.getrlimit(resource.RLIMIT_NOFILE)[0]))


def _accepted(port: int, fds: list[int]) -> list[tuple[int, Peer]]:
    """Among the descriptors ``fds``, the TCP sockets accepted on ``port``, with their
    peers."""
    found = []
    for fd in fds:
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            sock = socket.socket(fileno=fd)
        except OSError:  # closed since
            continue
        try:
            inet = sock.family in (socket.AF_INET, socket.AF_INET6)
            if inet and sock.type == socket.SOCK_STREAM and sock.getsockname()[1] == port:
                peer = sock.getpeername()  # the listening socket has none
                found.append((fd, (str(peer[0]), int(peer[1]))))
        except OSError:
            pass
        finally:
            sock.detach()  # the fd stays its owner's
    return found


def _cut(fd: int) -> None:
    """Shut the socket ``fd`` down and have its close reset the connection: its owner's
    reads and writes end at once, and the owner closes it as a client that left."""
    sock = socket.socket(fileno=fd)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.detach()


def shut_down_accepted(port: int) -> int:
    """Cut every socket accepted on ``port``; returns how many there were."""
    found = _accepted(port, _open_fds())
    for fd, _ in found:
        _cut(fd)
    return len(found)


def cut_idle_beyond(
    port: int, requests: RequestSockets, limit: int, first_seen: dict[tuple[int, Peer], float]
) -> int:
    """One look: cut, oldest first, each peer host's sockets carrying no request beyond
    ``limit``. ``first_seen`` (kept from look to look) says since when each socket is
    known. Returns how many were cut."""
    fds = _open_fds()
    # Each socket carrying a request is a descriptor of its own: when the others are
    # within the bound, no peer can be beyond it, and the sockets need no closer look.
    if len(fds) - requests.sockets() <= limit:
        return 0
    now = anyio.current_time()
    found = _accepted(port, fds)
    for gone in first_seen.keys() - set(found):
        del first_seen[gone]
    idle: dict[str, list[tuple[float, int]]] = {}
    for fd, peer in found:
        since = first_seen.setdefault((fd, peer), now)
        if peer not in requests:
            idle.setdefault(peer[0], []).append((since, fd))
    cut = 0
    for host, sockets in idle.items():
        if len(sockets) > limit:
            sockets.sort()
            for _, fd in sockets[: len(sockets) - limit]:
                _cut(fd)
            cut += len(sockets) - limit
            log.info(
                "cut %d socket(s) from %s carrying no request (the bound is %d per address)",
                len(sockets) - limit,
                host,
                limit,
            )
    return cut


async def bound_idle_sockets(port: int, requests: RequestSockets, limit: int) -> None:
    """Hold each peer host to ``limit`` sockets carrying no request, until cancelled."""
    first_seen: dict[tuple[int, Peer], float] = {}
    while True:
        await anyio.sleep(SWEEP_EVERY)
        cut_idle_beyond(port, requests, limit, first_seen)
