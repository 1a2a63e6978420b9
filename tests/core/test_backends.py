"""Which event loop ``acp_agent._loop.run`` starts for each backend name."""

from __future__ import annotations

import asyncio

import pytest

from acp_agent import _loop


async def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_asyncio_is_the_standard_library_loop() -> None:
    assert _loop.run(loop_module, backend="asyncio").startswith("asyncio")


@pytest.mark.skipif(not _loop.uvloop_installed(), reason="uvloop is not installed")
def test_auto_and_uvloop_run_on_uvloop_where_it_is_installed() -> None:
    assert _loop.run(loop_module, backend="auto").startswith("uvloop")
    assert _loop.run(loop_module, backend="uvloop").startswith("uvloop")


def test_auto_falls_back_to_asyncio_and_uvloop_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_loop, "uvloop_installed", lambda: False)
    assert _loop.run(loop_module, backend="auto").startswith("asyncio")
    with pytest.raises(RuntimeError, match="needs the uvloop package"):
        _loop.run(loop_module, backend="uvloop")


def test_trio() -> None:
    import trio

    async def trio_running() -> bool:
        await trio.lowlevel.checkpoint()
        return True

    assert _loop.run(trio_running, backend="trio")
