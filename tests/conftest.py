"""Shared pytest configuration: every async test runs on asyncio, on uvloop (the server's
default loop, where it is installed) and on trio."""

from __future__ import annotations

from typing import Any

import pytest

from acp_agent._loop import uvloop_installed

#: backend name -> what anyio's pytest plugin takes
ANYIO_BACKENDS: dict[str, Any] = {
    "asyncio": "asyncio",
    "uvloop": ("asyncio", {"use_uvloop": True}),
    "trio": "trio",
}


@pytest.fixture(params=[name for name in ANYIO_BACKENDS if name != "uvloop" or uvloop_installed()])
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def anyio_backend(backend_name: str) -> Any:
    return ANYIO_BACKENDS[backend_name]


# Property tests are deterministic: the same examples on every run.
from hypothesis import settings  # noqa: E402

settings.register_profile("deterministic", derandomize=True, deadline=None, database=None)
settings.load_profile("deterministic")
