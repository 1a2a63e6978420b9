"""Adapter tests: the real framework packages, in a real subprocess, on the fake endpoint.

They run on one backend (asyncio): the agent process picks its own loop, and what is
tested is the subprocess's behaviour on the wire.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def anyio_backend() -> Any:
    return "asyncio"
