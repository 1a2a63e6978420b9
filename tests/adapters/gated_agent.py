"""A module whose import the test holds: it reads the FIFO named by ``ACP_TEST_GATE``
(blocking until the test writes it), then fails if it was told ``fail``, else defines
``agent``, a plain agent that takes images, embedded resources and MCP servers over
HTTP and SSE (``plain_agent.Capable``)."""

from __future__ import annotations

import os

from tests.adapters.plain_agent import Capable

with open(os.environ["ACP_TEST_GATE"], encoding="utf-8") as gate:
    SAID = gate.read()
if SAID == "fail":
    raise RuntimeError("told to fail")

agent = Capable()
