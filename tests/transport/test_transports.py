"""The Transport contract, run against every implementation: the memory pair and stdio on pipes."""

from __future__ import annotations

import fcntl
import os
import pathlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import pytest
from anyio import wait_all_tasks_blocked

from acp_agent.errors import OversizedLine
from acp_agent.jsonrpc import LineBuffer
from acp_agent.transport import StdioTransport, Transport, memory_pair, open_stdio, stdio

pytestmark = pytest.mark.anyio

Pair = tuple[Transport, Transport]


@asynccontextmanager
async def pipe_pair(
    opener: Callable[..., StdioTransport] = StdioTransport, **kwargs: int
) -> AsyncIterator[tuple[StdioTransport, StdioTransport]]:
    """Two StdioTransports joined by two os.pipe()s; each owns the fds it uses."""
    a_to_b_r, a_to_b_w = os.pipe()
    b_to_a_r, b_to_a_w = os.pipe()
    a = opener(b_to_a_r, a_to_b_w, closefd=True, **kwargs)
    b = opener(a_to_b_r, b_to_a_w, closefd=True, **kwargs)
    try:
        yield a, b
    finally:
        await a.aclose()
        await b.aclose()


@asynccontextmanager
async def open_pair(kind: str) -> AsyncIterator[Pair]:
    if kind == "memory":
        a, b = memory_pair()
        async with a, b:
            yield a, b
    else:
        # "pipe-loop": the running loop's stdio transport (a kept reader on asyncio)
        async with pipe_pair(open_stdio if kind == "pipe-loop" else StdioTransport) as (sa, sb):
            yield sa, sb


@pytest.fixture(params=["memory", "pipe", "pipe-loop"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def receive_exactly(t: Transport, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        chunk = await t.receive()
        assert chunk
        got += chunk
    assert len(got) == size
    return bytes(got)


async def receive_until_eof(t: Transport) -> bytes:
    got = bytearray()
    while True:
        try:
            got += await t.receive()
        except anyio.EndOfStream:
            return bytes(got)


async def test_open_stdio_keeps_a_reader_registered_on_asyncio_only(
    anyio_backend_name: str,
) -> None:
    async with pipe_pair(open_stdio) as (a, b):
        registered = isinstance(a, stdio._AsyncioStdioTransport)
        assert registered == (anyio_backend_name == "asyncio")
        await b.send(b"early")  # readable while nobody waits: the reader lets go
        await anyio.wait_all_tasks_blocked()
        assert await a.receive() == b"early"
        await b.send(b"late")
        assert await a.receive() == b"late"


async def test_implementations_satisfy_the_protocol() -> None:
    a, b = memory_pair()
    async with a, b:
        assert isinstance(a, Transport)
    assert isinstance(StdioTransport(), Transport)


async def test_small_both_directions(kind: str) -> None:
    async with open_pair(kind) as (a, b):
        await a.send(b'{"x":1}\n')
        assert await receive_exactly(b, 8) == b'{"x":1}\n'
        await b.send(b"pong\n")
        assert await receive_exactly(a, 5) == b"pong\n"
        await a.send(b"")  # an empty send is a no-op
        await a.send(b"z\n")
        assert await receive_exactly(b, 2) == b"z\n"


async def test_several_frames_in_one_send(kind: str) -> None:
    async with open_pair(kind) as (a, b):
        await a.send(b"1\n2\n3\n")
        assert await receive_exactly(b, 6) == b"1\n2\n3\n"


async def test_large_payload(kind: str) -> None:
    payload = bytes(range(256)) * (8 * 1024 * 1024 // 256)
    async with open_pair(kind) as (a, b):
        received = b""

        async def reader() -> None:
            nonlocal received
            received = await receive_exactly(b, len(payload))

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await a.send(payload)
        assert received == payload


async def test_eof_after_peer_close(kind: str) -> None:
    async with open_pair(kind) as (a, b):
        await a.send(b"last words\n")
        await a.aclose()
        assert await receive_until_eof(b) == b"last words\n"
        with pytest.raises(anyio.EndOfStream):
            await b.receive()


async def test_use_after_own_close(kind: str) -> None:
    async with open_pair(kind) as (a, _b):
        await a.aclose()
        await a.aclose()  # idempotent
        with pytest.raises(anyio.ClosedResourceError):
            await a.send(b"x\n")
        with pytest.raises(anyio.ClosedResourceError):
            await a.receive()


async def test_send_to_closed_peer_is_broken(kind: str) -> None:
    async with open_pair(kind) as (a, b):
        await b.aclose()
        with pytest.raises(anyio.BrokenResourceError):
            await a.send(b"anyone there?\n")


async def test_receive_can_be_cancelled_and_resumed(kind: str) -> None:
    async with open_pair(kind) as (a, b):
        with anyio.move_on_after(0):
            await b.receive()
        async with anyio.create_task_group() as tg:
            tg.start_soon(b.receive)
            await wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
        await a.send(b"still here\n")
        assert await receive_exactly(b, 11) == b"still here\n"


@pytest.mark.parametrize("line_size", [100, 150_000])
async def test_concurrent_senders_never_interleave(kind: str, line_size: int) -> None:
    senders, per_sender = 6, 8
    async with open_pair(kind) as (a, b):
        lines: list[bytes] = []

        async def reader() -> None:
            buf = LineBuffer()
            while len(lines) < senders * per_sender:
                for line in buf.feed(await b.receive()):
                    assert not isinstance(line, OversizedLine)
                    lines.append(line)

        async def sender(tag: int) -> None:
            frame = bytes([ord("a") + tag]) * line_size + b"\n"
            for _ in range(per_sender):
                await a.send(frame)

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            async with anyio.create_task_group() as senders_group:
                for tag in range(senders):
                    senders_group.start_soon(sender, tag)

        assert len(lines) == senders * per_sender
        for line in lines:
            assert len(line) == line_size
            assert line == line[:1] * line_size, "two sends interleaved"
        assert sorted(set(lines)) == [bytes([ord("a") + t]) * line_size for t in range(senders)]


# --- memory-specific ------------------------------------------------------------------------


async def test_memory_send_eof_ends_one_direction_only() -> None:
    a, b = memory_pair()
    async with a, b:
        await a.send(b"bye\n")
        await a.send_eof()
        assert await b.receive() == b"bye\n"
        with pytest.raises(anyio.EndOfStream):
            await b.receive()
        await b.send(b"reply\n")
        assert await a.receive() == b"reply\n"


async def test_memory_bounded_buffer_waits() -> None:
    a, b = memory_pair(max_buffer=1)
    async with a, b:
        await a.send(b"1")
        with anyio.move_on_after(0) as scope:
            await a.send(b"2")
        assert scope.cancelled_caught
        assert await b.receive() == b"1"


# --- stdio-specific ---------------------------------------------------------------------------


async def test_stdio_restores_blocking_mode() -> None:
    r, w = os.pipe()
    try:
        assert os.get_blocking(r)
        assert os.get_blocking(w)
        t = StdioTransport(r, w)
        await t.send(b"x")
        assert await t.receive() == b"x"
        assert not os.get_blocking(r)
        assert not os.get_blocking(w)
        await t.aclose()
        assert os.get_blocking(r)
        assert os.get_blocking(w)
    finally:
        os.close(r)
        os.close(w)


async def test_stdio_chunk_size_bounds_receive() -> None:
    async with pipe_pair(chunk_size=3) as (a, b):
        await a.send(b"abcdefg")
        # kept until the end: each chunk is its own bytes, not a view of the read buffer
        chunks = [await b.receive() for _ in range(3)]
        assert chunks == [b"abc", b"def", b"g"]
        assert all(type(chunk) is bytes for chunk in chunks)
    with pytest.raises(ValueError):
        StdioTransport(chunk_size=0)


async def test_stdio_second_receiver_is_refused() -> None:
    async with pipe_pair() as (a, b), anyio.create_task_group() as tg:
        tg.start_soon(b.receive)
        await wait_all_tasks_blocked()
        with pytest.raises(anyio.BusyResourceError):
            await b.receive()
        await a.send(b"x")


async def test_stdio_close_wakes_a_waiting_receiver() -> None:
    async with pipe_pair() as (_a, b):
        outcome: list[BaseException] = []

        async def receiver() -> None:
            try:
                await b.receive()
            except anyio.ClosedResourceError as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(receiver)
            await wait_all_tasks_blocked()
            await b.aclose()
        assert len(outcome) == 1


async def test_stdio_cancelled_partial_send_tears_the_stream() -> None:
    async with pipe_pair() as (a, b):
        # far more than a pipe buffer holds, and nobody reads: the send blocks part-way
        with anyio.move_on_after(0.5) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(a.send, b"x" * (4 * 1024 * 1024) + b"\n")
                await wait_all_tasks_blocked()
                tg.cancel_scope.cancel()
        assert not scope.cancelled_caught
        with pytest.raises(anyio.BrokenResourceError, match="torn"):
            await a.send(b"next\n")
        assert await b.receive()  # the first part did go out


async def test_stdio_cancelled_send_before_any_byte_leaves_stream_intact() -> None:
    async with pipe_pair() as (a, b):
        with anyio.CancelScope() as scope:
            scope.cancel()
            await a.send(b"never\n")
        await a.send(b"ok\n")
        assert await receive_exactly(b, 3) == b"ok\n"


async def test_stdio_fast_reads_still_let_others_run() -> None:
    async with pipe_pair(chunk_size=1) as (a, b):
        await a.send(b"x" * 50)
        ticks = 0
        done = False

        async def ticker() -> None:
            nonlocal ticks
            while not done:
                ticks += 1
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            await receive_exactly(b, 50)
            done = True
        assert ticks > 1


@pytest.mark.parametrize("source", ["regular file", "/dev/null"])
async def test_stdio_reads_sources_epoll_cannot_watch(source: str, tmp_path: pathlib.Path) -> None:
    # A regular file and /dev/null never block; epoll refuses both (EPERM).
    if source == "regular file":
        path = tmp_path / "input.jsonl"
        path.write_bytes(b"line one\nline two\n")
        expected = b"line one\nline two\n"
    else:
        path = pathlib.Path(os.devnull)
        expected = b""
    read_fd = os.open(path, os.O_RDONLY)
    _, write_fd = os.pipe()
    t = StdioTransport(read_fd, write_fd, closefd=True)
    async with t:
        with anyio.fail_after(5):
            assert await receive_until_eof(t) == expected


@pytest.mark.skipif(not hasattr(fcntl, "F_GETPIPE_SZ"), reason="pipe sizes are Linux's")
async def test_stdio_asks_its_pipes_for_a_larger_buffer() -> None:
    async with pipe_pair() as (a, b):
        await a.send(b"ping\n")
        assert await b.receive() == b"ping\n"
        for fd in (a.write_fd, b.read_fd):
            assert fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) == stdio.PIPE_BYTES
