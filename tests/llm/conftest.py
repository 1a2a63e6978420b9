"""The LLM agent tests, on every backend (via the root ``anyio_backend`` fixture)."""

from __future__ import annotations

import pytest

# On trio, a cancelled or failed HTTP stream leaves httpx's nested async generators
# unexhausted; trio's finalizer warns about each although the response was closed
# (httpx does not wrap its inner generators in aclosing). Only those are ignored; the
# patterns also cover httpx2 / httpcore2, which the mcp package's HTTP client uses
# (its server-event stream is closed the same way when an MCP session ends).
_HTTPX_GENERATORS = [
    "ignore:Async generator 'httpx.:ResourceWarning",
    "ignore:Async generator 'httpcore.:ResourceWarning",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/llm/" in str(item.fspath).replace("\\", "/"):
            for spec in _HTTPX_GENERATORS:
                item.add_marker(pytest.mark.filterwarnings(spec))
