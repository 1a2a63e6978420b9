from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest

from .harness import harness


@pytest.mark.anyio
async def test_cold_turn(tmp_path: Path) -> None:
    async with harness(str(tmp_path)) as h:
        sid = await h.session()
        assert await h.client.prompt(sid, "fake:cold") == "end_turn"
        assert h.client.text() == "Hello from the fake model."
        await h.idle()


@pytest.mark.anyio
async def test_turns_load_no_ca_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn's HTTP client reuses the agent's TLS context: loading the CA bundle costs
    about 30 ms of CPU, which each turn used to pay before its first chunk."""
    loads: list[object] = []
    original = ssl.SSLContext.load_verify_locations

    def counting(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args or kwargs)
        original(self, *args, **kwargs)

    async with harness(str(tmp_path)) as h:
        sid = await h.session()
        monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
        for _ in range(3):
            assert await h.client.prompt(sid, "fake:cold") == "end_turn"
        await h.idle()
    assert loads == []
