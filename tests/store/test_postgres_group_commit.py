"""``GroupCommit``: writes waiting at the same moment are committed as one batch.

The commit function is a fake that records each batch and waits on an event the test sets,
so a batch is in flight exactly as long as the test says.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import anyio.lowlevel
import pytest

from acp_agent.store.group_commit import GroupCommit

pytestmark = pytest.mark.anyio


class Fake:
    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.release = anyio.Event()
        self.fail: Exception | None = None

    async def commit(self, batch: Sequence[int]) -> list[int]:
        self.batches.append(list(batch))
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return [value * 10 for value in batch]


async def test_writes_arriving_during_a_commit_form_the_next_batch() -> None:
    fake = Fake()
    commits: GroupCommit[int, int] = GroupCommit(fake.commit)
    outcomes: dict[int, int] = {}

    async def write(value: int) -> None:
        outcomes[value] = await commits.write(value)

    async with anyio.create_task_group() as tg:
        tg.start_soon(write, 1)
        await anyio.wait_all_tasks_blocked()
        assert fake.batches == [[1]]  # the first write leads at once
        for value in (2, 3, 4):
            tg.start_soon(write, value)
        await anyio.wait_all_tasks_blocked()
        fake.release.set()
    assert fake.batches[0] == [1]
    assert sorted(fake.batches[1]) == [2, 3, 4] and len(fake.batches) == 2  # one commit
    assert outcomes == {1: 10, 2: 20, 3: 30, 4: 40}


async def test_a_failed_commit_fails_every_write_of_its_batch_only() -> None:
    fake = Fake()
    commits: GroupCommit[int, int] = GroupCommit(fake.commit)
    errors: dict[int, str] = {}

    async def write(value: int) -> None:
        try:
            await commits.write(value)
        except RuntimeError as exc:
            errors[value] = str(exc)

    fake.fail = RuntimeError("disk on fire")
    async with anyio.create_task_group() as tg:
        for value in (1, 2):
            tg.start_soon(write, value)
        await anyio.wait_all_tasks_blocked()
        fake.release.set()
    assert errors == {1: "disk on fire", 2: "disk on fire"}
    fake.fail = None
    assert await commits.write(3) == 30


async def test_a_write_cancelled_before_any_batch_took_it_is_not_committed() -> None:
    fake = Fake()
    commits: GroupCommit[int, int] = GroupCommit(fake.commit)
    async with anyio.create_task_group() as tg:
        tg.start_soon(commits.write, 1)
        await anyio.wait_all_tasks_blocked()
        with anyio.move_on_after(0) as scope:
            await commits.write(2)  # waits behind batch [1]; cancelled there
        assert scope.cancelled_caught
        fake.release.set()
    assert fake.batches == [[1]]
    assert await commits.write(3) == 30
    assert fake.batches == [[1], [3]]


async def test_a_cancelled_leader_still_delivers_its_batch() -> None:
    fake = Fake()
    commits: GroupCommit[int, int] = GroupCommit(fake.commit)
    outcomes: list[int] = []

    async def follower() -> None:
        outcomes.append(await commits.write(2))

    leader = anyio.CancelScope()

    async def lead() -> None:
        with leader:
            await commits.write(1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(lead)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(follower)
        await anyio.wait_all_tasks_blocked()
        leader.cancel()  # the commit in flight is shielded
        await anyio.wait_all_tasks_blocked()
        fake.release.set()
    assert fake.batches == [[1], [2]]
    assert outcomes == [20]


async def test_a_write_cancelled_while_its_batch_commits_returns_its_outcome() -> None:
    # Its caller must know it was written: else it would write it again.
    fake = Fake()
    commits: GroupCommit[int, int] = GroupCommit(fake.commit)
    outcomes: list[int] = []
    follower = anyio.CancelScope()

    async def follow() -> None:
        with follower:
            outcomes.append(await commits.write(3))
            await anyio.lowlevel.checkpoint()
            outcomes.append(-1)  # never: the cancel is raised at the next checkpoint

    async with anyio.create_task_group() as tg:
        tg.start_soon(commits.write, 1)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(commits.write, 2)
        tg.start_soon(follow)
        await anyio.wait_all_tasks_blocked()
        first, fake.release = fake.release, anyio.Event()
        first.set()  # batch [1] ends; [2, 3] starts, led by one of its writers
        await anyio.wait_all_tasks_blocked()
        follower.cancel()
        await anyio.wait_all_tasks_blocked()
        waited = outcomes == []  # it waits for its batch
        fake.release.set()
    assert waited
    assert outcomes == [30]
    assert follower.cancelled_caught
    assert [sorted(batch) for batch in fake.batches] == [[1], [2, 3]]  # written once
