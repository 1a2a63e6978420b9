"""Adapter tests: the real framework packages, in a real subprocess, on the fake endpoint.

They run on one backend (asyncio): the agent process picks its own loop, and what is
tested is the subprocess's behaviour on the wire.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from acp_agent.llm.fake_server import FakeModelServer


@pytest.fixture(scope="module")  # module-wide: a module may share one agent process
def anyio_backend() -> Any:
    return "asyncio"


@pytest.fixture
async def fake() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer.running() as server:
        yield server


@pytest.fixture(scope="module")
async def shared_fake() -> AsyncIterator[FakeModelServer]:
    """One fake endpoint for a module's shared agent processes."""
    async with FakeModelServer.running() as server:
        yield server
