"""The hostile campaign in CI: a fixed seed, a few seconds, with and without store failures.

``python -m tests.hostile.campaign --seconds 300`` runs the long version on demand.
"""

from __future__ import annotations

import pytest

from .campaign import Tally, run_campaign

pytestmark = pytest.mark.anyio

SECONDS = 6.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the agent is a subprocess; the client side needs one loop


@pytest.mark.parametrize("failure_rate", [0.0, 0.05], ids=["sound-store", "failing-store"])
async def test_interleaved_requests_across_sessions_break_nothing(failure_rate: float) -> None:
    tally = Tally()
    await run_campaign(SECONDS, seed=14, failure_rate=failure_rate, tally=tally)
    assert tally.messages > 100, tally  # the campaign ran
    assert tally.violations == [], tally.violations[:10]
