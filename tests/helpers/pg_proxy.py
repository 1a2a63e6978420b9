"""A TCP proxy on 127.0.0.1 in front of a PostgreSQL server that can cut one COMMIT.

It owns forwarding bytes both ways, one thread per direction and connection, and reading
the client's side as PostgreSQL protocol messages (a type byte and a length; the startup
messages have no type byte), so that it sees a ``COMMIT`` sent as a simple query or parsed
as a statement. Once armed, the next COMMIT of any connection is either forwarded and its
answer dropped (the transaction committed; the client sees its connection close), or not
forwarded at all (the server sees the connection close inside the transaction and aborts
it). Then the connection is closed on both sides. Every other byte passes untouched.

It does not know the store or the tests; it binds only to the loopback interface.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import urllib.parse
from typing import Literal

Cut = Literal["answer", "commit"]

_NEGOTIATION = {80877103, 80877104}  # SSLRequest, GSSENCRequest: a startup comes next


def _is_commit(kind: bytes, body: bytes) -> bool:
    if kind == b"Q":
        text = body
    elif kind == b"P":  # Parse: statement name, NUL, query text, NUL, ...
        parts = body.split(b"\0", 2)
        text = parts[1] if len(parts) > 1 else b""
    else:
        return False
    return text.strip().rstrip(b"\0").strip().upper().startswith(b"COMMIT")


class CommitCutter:
    """``with CommitCutter(port) as proxy``: ``proxy.url(url)`` goes through it."""

    def __init__(self, server_port: int) -> None:
        self.server_port = server_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._armed: Cut | None = None
        self._lock = threading.Lock()
        self.cut = threading.Event()  # set when the armed COMMIT was cut
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []

    def url(self, url: str) -> str:
        """``url`` (one of this server's) through the proxy, without SSL or GSS."""
        parts = urllib.parse.urlsplit(url)
        netloc = parts.netloc.replace(f":{self.server_port}", f":{self.port}")
        query = "&".join(q for q in (parts.query, "sslmode=disable&gssencmode=disable") if q)
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))

    def arm(self, cut: Cut) -> None:
        """Cut the next COMMIT: drop its ``answer`` or the ``commit`` itself."""
        with self._lock:
            self._armed = cut
            self.cut.clear()

    def __enter__(self) -> CommitCutter:
        self._start(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            self._close(sock)
        for thread in self._threads:
            thread.join(timeout=10)

    def _start(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    @staticmethod
    def _close(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.server_port))
            with self._lock:
                self._sockets += [client, server]
            state = {"cutting": False}
            self._start(self._from_client, client, server, state)
            self._start(self._from_server, server, client, state)

    def _from_server(
        self, server: socket.socket, client: socket.socket, state: dict[str, bool]
    ) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                if state["cutting"]:  # the COMMIT's answer: dropped, and the connection cut
                    self.cut.set()
                    break
                client.sendall(data)
        self._close(client)
        self._close(server)

    def _from_client(
        self, client: socket.socket, server: socket.socket, state: dict[str, bool]
    ) -> None:
        buffer = b""
        startup = True
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                buffer += data
                out = b""
                while True:
                    if startup:
                        if len(buffer) < 8:
                            break
                        (length,) = struct.unpack("!I", buffer[:4])
                        if len(buffer) < length:
                            break
                        code = struct.unpack("!I", buffer[4:8])[0]
                        startup = code in _NEGOTIATION
                        out, buffer = out + buffer[:length], buffer[length:]
                        continue
                    if len(buffer) < 5:
                        break
                    (length,) = struct.unpack("!I", buffer[1:5])
                    if len(buffer) < 1 + length:
                        break
                    message, buffer = buffer[: 1 + length], buffer[1 + length :]
                    cut = self._take() if _is_commit(message[:1], message[5:]) else None
                    if cut is not None:
                        if cut == "commit":  # never reaches the server: it aborts
                            self.cut.set()
                            raise OSError("cut")
                        state["cutting"] = True
                        server.sendall(out + message + buffer)  # its Sync follows it
                        out = buffer = b""
                        continue
                    out += message
                if out:
                    server.sendall(out)
        if not state["cutting"]:
            self._close(server)
            self._close(client)

    def _take(self) -> Cut | None:
        with self._lock:
            cut, self._armed = self._armed, None
            return cut
