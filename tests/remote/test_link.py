"""MessageLink: a burst of client messages reaches the server in one read, without a pass of
the event loop per message (a cancel behind many prompts is read before their turns run)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from acp_agent.remote.link import MessageLink

pytestmark = pytest.mark.anyio


@pytest.fixture
async def link() -> AsyncIterator[MessageLink]:
    made = MessageLink()
    yield made
    made.end_input()
    made.drop_output()
    await made.aclose()


async def test_a_burst_is_read_in_one_go(link: MessageLink) -> None:
    messages = [b'{"n":%d}' % n for n in range(5)]
    for message in messages:
        await link.deliver(message)
    assert await link.receive() == b"".join(m + b"\n" for m in messages)


async def test_delivering_with_room_left_lets_nothing_else_run_in_between(
    link: MessageLink,
) -> None:
    others_ran = False

    async def other() -> None:
        nonlocal others_ran
        others_ran = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(other)
        for n in range(3):
            await link.deliver(b'{"n":%d}' % n)
        assert not others_ran
    assert others_ran


async def test_the_end_of_input_comes_after_what_was_delivered(link: MessageLink) -> None:
    await link.deliver(b"{}")
    link.end_input()
    assert await link.receive() == b"{}\n"
    with pytest.raises(anyio.EndOfStream):
        await link.receive()
