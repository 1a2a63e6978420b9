"""pytest fixtures for testing an ACP agent with :mod:`acp_agent.testing`.

Installed with acp-agent-kit as a ``pytest11`` plugin, so the fixtures are there in any
project that depends on it (or add ``pytest_plugins = ["acp_agent.testing.pytest_plugin"]``
to a ``conftest.py``). Tests are async: mark them ``@pytest.mark.anyio`` (anyio's own
pytest plugin runs them; its ``anyio_backend`` fixture picks the event loop).

``acp_client`` is a function: ``client = await acp_client(agent_or_command, **options)``
connects (options as :func:`acp_agent.testing.connect`) and the connection is closed
when the test ends::

    import pytest

    @pytest.mark.anyio
    async def test_shouty(acp_client):
        client = await acp_client(Shouty())
        session = await client.new_session()
        turn = await session.prompt("/shout hello")
        assert turn.text == "HELLO"

It imports nothing of acp_agent until a fixture is used.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from acp_agent.agent import Agent
    from acp_agent.testing.client import AgentClient

#: what the ``acp_client`` fixture is: connect to an agent, get its client
Connect = Callable[..., Awaitable["AgentClient"]]


@pytest.fixture
async def acp_client() -> AsyncIterator[Connect]:
    """Connect to agents for this test: ``await acp_client(Shouty(), files={...})``.

    Each call opens one connection (see :func:`acp_agent.testing.connect` for the
    options); all are closed, and their agents shut down, when the test ends.
    """
    from acp_agent.testing import connect

    async with AsyncExitStack() as stack:

        async def open_client(agent: Agent | Sequence[str], **options: Any) -> AgentClient:
            return await stack.enter_async_context(connect(agent, **options))

        yield open_client
