from __future__ import annotations

from pathlib import Path

import pytest

from .harness import harness


@pytest.mark.anyio
async def test_cold_turn(tmp_path: Path) -> None:
    async with harness(str(tmp_path)) as h:
        sid = await h.session()
        assert await h.client.prompt(sid, "fake:cold") == "end_turn"
        assert h.client.text() == "Hello from the fake model."
        await h.idle()
