"""Fixtures for the core tests: the project root on sys.path, the connection tests' dispatcher.

The tests import their helpers as ``tests.helpers.memclient`` and ``tests.core._support``;
make the project root importable whether pytest runs as ``python -m pytest`` (which adds
the working directory) or as the ``pytest`` script (which does not).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.core._connection import DISPATCHERS  # noqa: E402 (needs the root on sys.path)


@pytest.fixture(params=list(DISPATCHERS))
def dispatcher(request: pytest.FixtureRequest) -> Any:
    """The connection tests run against both dispatchers (native and jsonrpcserver)."""
    return DISPATCHERS[request.param]
