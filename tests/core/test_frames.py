"""The one write path (``acp_agent.connection._Writer``): the sender writes, others queue
behind the write in progress and leave joined with it; room, cancellation, close."""

from __future__ import annotations

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from acp_agent.connection import _Writer

pytestmark = pytest.mark.anyio


class GatedTransport:
    """Records each send; while ``gate`` is set, a send waits for it."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.gate: anyio.Event | None = None
        self.broken = False

    async def send(self, data: bytes) -> None:
        if self.broken:
            raise anyio.BrokenResourceError
        if self.gate is not None:
            await self.gate.wait()
        self.sent.append(data)

    async def receive(self) -> bytes:
        raise anyio.EndOfStream

    async def aclose(self) -> None:
        pass


def gated(limit: int) -> tuple[GatedTransport, anyio.Event, _Writer]:
    """A writer whose sends wait until the returned event is set."""
    transport = GatedTransport()
    transport.gate = gate = anyio.Event()
    return transport, gate, _Writer(transport, limit)


async def test_with_no_write_in_progress_the_sender_writes_its_frame_at_once() -> None:
    transport = GatedTransport()
    writer = _Writer(transport, 8)
    await writer.write(b"a")
    assert transport.sent == [b"a"]
    await writer.write(b"b")
    assert transport.sent == [b"a", b"b"]


async def test_frames_queued_during_a_write_leave_in_order_in_one_write() -> None:
    transport, gate, writer = gated(8)
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.write, b"first ")
        await wait_all_tasks_blocked()
        for frame in (b"ab", b"cd", b"ef"):
            await writer.write(frame)  # queued: returns without waiting
        assert transport.sent == []
        gate.set()
    assert transport.sent == [b"first ", b"abcdef"]


async def test_a_full_queue_makes_senders_wait_for_room_and_keeps_their_order() -> None:
    transport, gate, writer = gated(1)
    done: list[bytes] = []

    async def send(frame: bytes) -> None:
        await writer.write(frame)
        done.append(frame)

    async with anyio.create_task_group() as tg:
        tg.start_soon(send, b"a")
        await wait_all_tasks_blocked()
        await send(b"b")  # queued
        tg.start_soon(send, b"c")  # waits for room
        await wait_all_tasks_blocked()
        assert done == [b"b"]
        gate.set()
    assert b"".join(transport.sent) == b"abc"
    assert sorted(done) == [b"a", b"b", b"c"]


async def test_a_cancelled_sender_still_writes_its_whole_frame_then_sees_the_cancel() -> None:
    transport, gate, writer = gated(8)
    outcome: list[str] = []

    async def send() -> None:
        try:
            await writer.write(b"whole")
            await anyio.lowlevel.checkpoint_if_cancelled()
        except anyio.get_cancelled_exc_class():
            outcome.append("cancelled")
            raise

    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def cancellable() -> None:
            with scope:
                await send()

        tg.start_soon(cancellable)
        await wait_all_tasks_blocked()
        scope.cancel()
        await wait_all_tasks_blocked()
        assert transport.sent == []  # still waiting, shielded
        gate.set()
    assert transport.sent == [b"whole"]
    assert outcome == ["cancelled"]


async def test_aclose_writes_what_is_queued_and_gives_up_a_stuck_write_after_the_grace() -> None:
    transport = GatedTransport()
    transport.gate = anyio.Event()  # never set: the client stopped reading
    writer = _Writer(transport, 8)
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.write, b"stuck")
        await wait_all_tasks_blocked()
        await writer.write(b"queued")
        await writer.aclose(0.01)
    assert transport.sent == []
    with pytest.raises(anyio.ClosedResourceError):
        await writer.write(b"late")


async def test_aclose_waits_for_the_write_in_progress() -> None:
    transport, gate, writer = gated(8)
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.write, b"a")
        await wait_all_tasks_blocked()
        await writer.write(b"b")
        tg.start_soon(writer.aclose, 10.0)
        await wait_all_tasks_blocked()
        gate.set()
    assert transport.sent == [b"a", b"b"]


async def test_a_client_gone_drops_output_without_raising(caplog: pytest.LogCaptureFixture) -> None:
    transport = GatedTransport()
    transport.broken = True
    writer = _Writer(transport, 8)
    await writer.write(b"a")
    await writer.write(b"b")
    assert transport.sent == []
    assert [r.levelname for r in caplog.records] == ["WARNING"]
