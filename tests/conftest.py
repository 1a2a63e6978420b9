"""Shared pytest configuration: every async test runs on asyncio and on trio."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# Property tests are deterministic: the same examples on every run.
from hypothesis import settings  # noqa: E402

settings.register_profile("deterministic", derandomize=True, deadline=None, database=None)
settings.load_profile("deterministic")
