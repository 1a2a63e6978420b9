"""The writer's frame queue (``acp_agent.connection._Frames``): order, joining, room, close."""

from __future__ import annotations

import anyio
import pytest
from anyio import wait_all_tasks_blocked
from anyio.lowlevel import checkpoint

from acp_agent.connection import _Frames

pytestmark = pytest.mark.anyio


async def test_take_joins_waiting_frames_in_order_up_to_the_limit() -> None:
    frames = _Frames(8)
    for frame in (b"ab", b"cd", b"efg", b"h"):
        assert frames.put_nowait(frame)
    assert await frames.take(6) == b"abcd"  # b"efg" would pass 6 bytes
    assert await frames.take(1) == b"efg"  # a frame above the limit goes alone
    assert await frames.take(6) == b"h"


async def test_a_full_queue_makes_putters_wait_for_room() -> None:
    frames = _Frames(1)
    assert frames.put_nowait(b"a")
    assert not frames.put_nowait(b"b")
    done: list[bytes] = []

    async def putter() -> None:
        await frames.put(b"b")
        done.append(b"b")

    async with anyio.create_task_group() as tg:
        tg.start_soon(putter)
        await wait_all_tasks_blocked()
        assert done == []
        assert await frames.take(100) == b"a"
    assert done == [b"b"]
    assert await frames.take(100) == b"b"


async def test_close_drains_then_ends_and_wakes_the_waiting() -> None:
    frames = _Frames(1)
    assert frames.put_nowait(b"a")
    outcome: list[object] = []

    async def putter() -> None:
        try:
            await frames.put(b"b")
        except anyio.ClosedResourceError as exc:
            outcome.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(putter)
        await wait_all_tasks_blocked()
        frames.close()
    assert len(outcome) == 1
    assert await frames.take(100) == b"a"
    assert await frames.take(100) is None
    with pytest.raises(anyio.ClosedResourceError):
        frames.put_nowait(b"c")


async def test_a_waiting_taker_wakes_on_put_and_on_close() -> None:
    frames = _Frames(4)
    got: list[bytes | None] = []

    async def taker() -> None:
        got.append(await frames.take(100))
        got.append(await frames.take(100))

    async with anyio.create_task_group() as tg:
        tg.start_soon(taker)
        await wait_all_tasks_blocked()
        assert frames.put_nowait(b"x")
        await wait_all_tasks_blocked()
        frames.close()
        await checkpoint()
    assert got == [b"x", None]
