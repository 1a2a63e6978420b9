"""Sockets that carry no request, over real sockets: each has ``head_timeout`` to send a
complete request head (the TLS handshake included), and each peer address holds at most
``idle_sockets`` of them; sockets carrying a request and other addresses' sockets are not
touched, and none of it is logged as an error."""

from __future__ import annotations

import contextlib
import logging
import shutil
import ssl
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import anyio.abc
import pytest

from acp_agent.remote.serve import BACKLOG
from tests.helpers.wire_client import child_env

from ._raw import raw_websocket
from ._support import Limits, RemoteClient, running_server, workdir
from ._tls import make_certs
from .test_process import serving
from .test_serve_cli import refused

pytestmark = pytest.mark.anyio


@pytest.fixture
def no_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """The test logs nothing at ERROR or above (a client that goes away is normal)."""
    with caplog.at_level(logging.INFO):
        yield
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []


@asynccontextmanager
async def tcp(
    url: str, *, source: str = "127.0.0.1", ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[anyio.abc.ByteStream]:
    """A TCP stream to ``url``'s port from the address ``source`` (any of 127.0.0.0/8)."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    stream: anyio.abc.ByteStream = await anyio.connect_tcp(
        parts.hostname, parts.port, local_host=source
    )
    if ssl_context is not None:
        from anyio.streams.tls import TLSStream

        stream = await TLSStream.wrap(stream, hostname=parts.hostname, ssl_context=ssl_context)
    try:
        yield stream
    finally:
        with (
            anyio.CancelScope(shield=True),
            contextlib.suppress(anyio.BrokenResourceError, OSError),
        ):
            await stream.aclose()  # (reset already: nothing to close)


async def wait_closed(stream: anyio.abc.ByteStream) -> None:
    """Return once the server has closed (or reset) ``stream``."""
    try:
        while await stream.receive():
            pass
    except (anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError, OSError):
        return


async def healthz_status(stream: anyio.abc.ByteStream) -> int:
    """Send ``GET /healthz`` on ``stream``; the response's status code."""
    await stream.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while b"\r\n" not in data:
        data += await stream.receive()
    return int(data.split(b" ", 2)[1])


@pytest.mark.usefixtures("no_errors")
async def test_sockets_carrying_no_request_are_bounded_per_peer_address(tmp_path: Path) -> None:
    limits = Limits(idle_sockets=3, head_timeout=60)
    async with running_server(limits=limits) as url, AsyncExitStack() as stack:
        ws = await stack.enter_async_context(raw_websocket(url))  # carries a request
        client = RemoteClient(ws)
        await client.initialize()
        session_id, _, _ = await client.new_session(workdir(tmp_path))
        others = [await stack.enter_async_context(tcp(url, source="127.0.0.2")) for _ in range(3)]
        idle = [await stack.enter_async_context(tcp(url)) for _ in range(5)]
        closed: list[anyio.abc.ByteStream] = []
        done = anyio.Event()

        async def watch(stream: anyio.abc.ByteStream) -> None:
            await wait_closed(stream)
            closed.append(stream)
            if len(closed) == 2:
                done.set()

        async with anyio.create_task_group() as tg:
            for stream in idle:
                tg.start_soon(watch, stream)
            with anyio.fail_after(10):
                await done.wait()
            tg.cancel_scope.cancel()
        assert len(closed) == 2  # 127.0.0.1 is back at its bound, so no more are cut
        for stream in [s for s in idle if s not in closed] + others:
            assert await healthz_status(stream) == 200
        assert (await client.prompt(session_id, "/echo still here")).texts() == ["still here"]


@pytest.mark.usefixtures("no_errors")
@pytest.mark.parametrize("sent", [b"", b"GET /acp HTTP/1.1\r\nHost: x\r\n"], ids=["none", "half"])
async def test_a_request_head_that_does_not_arrive_in_time_closes_the_socket(sent: bytes) -> None:
    async with running_server(limits=Limits(head_timeout=0.5)) as url, tcp(url) as stream:
        if sent:
            await stream.send(sent)
        with anyio.fail_after(3):  # well before Hypercorn's own default (5 s)
            await wait_closed(stream)


@pytest.mark.usefixtures("no_errors")
@pytest.mark.parametrize("handshake", [False, True], ids=["no-handshake", "no-head"])
async def test_the_head_timeout_covers_the_tls_handshake(handshake: bool, tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    context = certs.client_context() if handshake else None
    async with (
        running_server(tls=certs.tls, limits=Limits(head_timeout=0.5)) as url,
        tcp(url, ssl_context=context) as stream,
    ):
        with anyio.fail_after(3):  # Hypercorn's own handshake timeout is 60 s
            await wait_closed(stream)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the server's loop is its own
async def test_serve_takes_both_bounds_from_its_flags() -> None:
    assert "must be positive" in await refused("--head-timeout", "0")
    assert "must be positive" in await refused("--max-idle-sockets", "0")
    flags = ("--head-timeout", "30", "--max-idle-sockets", "1")
    async with serving(*flags) as (_, url, stderr), tcp(url) as first, tcp(url) as second:
        closed = anyio.Event()

        async def watch(stream: anyio.abc.ByteStream) -> None:
            await wait_closed(stream)
            closed.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch, first)
            tg.start_soon(watch, second)
            with anyio.fail_after(10):  # one of the two is cut, long before the head timeout
                await closed.wait()
            tg.cancel_scope.cancel()
    assert b"Traceback" not in stderr and b"ERROR" not in stderr, stderr.decode()


#: runs what follows with at most 256 open files (512 once raised)
LOW_FD_LIMIT = (
    "import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (256, 512)); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the server's loop is its own
async def test_serve_raises_its_open_files_limit_to_the_hard_one() -> None:
    python = (sys.executable, "-c", LOW_FD_LIMIT)
    async with serving(python=python) as (process, _, _):
        limits = await anyio.Path(f"/proc/{process.pid}/limits").read_text()
    [line] = [line for line in limits.splitlines() if line.startswith("Max open files")]
    assert line.split()[3:5] == ["512", "512"], line


#: a process at its limit on open files: sockets accepted on one port until no more
#: descriptor is left, then one look at them with a bound of 8 (prints how many it cut)
AT_THE_LIMIT = """
import socket
import anyio
from acp_agent.remote.sockets import RequestSockets, cut_idle_beyond

async def main():
    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
    listener = socket.create_server(("127.0.0.1", 0), backlog=256)
    port, held = listener.getsockname()[1], []
    try:
        while True:
            held.append(socket.create_connection(("127.0.0.1", port)))
            held.append(listener.accept()[0])
    except OSError:
        pass
    print(cut_idle_beyond(port, RequestSockets(), 8, {}))
    for sock in held:
        sock.close()

anyio.run(main)
"""


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_bound_holds_at_the_limit_on_open_files() -> None:
    """Where ``/dev/fd`` itself cannot be opened any more, the look still finds them."""
    done = await anyio.run_process([sys.executable, "-c", AT_THE_LIMIT], env=child_env())
    assert int(done.stdout) > 40  # some 60 accepted, all but 8 cut


async def test_the_listening_socket_keeps_its_backlog() -> None:
    """Hypercorn listens on the socket again with its own backlog; ours (1024) stays, so
    the connections waiting while the server is at its limit on open files are held."""
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is not installed")
    async with running_server() as url:
        port = urlsplit(url).port
        shown = await anyio.run_process(["ss", "-Hltn", f"sport = :{port}"])
    [line] = shown.stdout.decode().splitlines()
    assert line.split()[2] == str(BACKLOG), line  # a listening socket's Send-Q: its backlog
