"""The server's method table is the generated one: every agent method, nothing else."""

from __future__ import annotations

import pytest

from acp_agent.options import ServerOptions
from acp_agent.protocol.methods import AGENT_METHODS, METHODS
from acp_agent.reference import ReferenceAgent
from acp_agent.server import AcpServer
from acp_agent.server.unstable import UNSTABLE_METHODS


@pytest.mark.parametrize("unstable", [False, True])
def test_every_agent_method_of_the_generated_table_has_a_handler(unstable: bool) -> None:
    table = AcpServer(ReferenceAgent(), options=ServerOptions(unstable=unstable)).method_table()
    extra = set(UNSTABLE_METHODS) if unstable else set()
    assert set(table.requests) | set(table.notifications) == AGENT_METHODS | extra
    assert {m for m in table.notifications} == {
        m for m in AGENT_METHODS if METHODS[m].kind == "notification"
    }


def test_server_options_refuse_what_cannot_be_served() -> None:
    with pytest.raises(ValueError, match="busy_policy"):
        ServerOptions(busy_policy="later")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="turn_timeout"):
        ServerOptions(turn_timeout=0)
