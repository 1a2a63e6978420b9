"""``python -m acp_agent``: the same as the ``acp-agent-kit`` command (see :mod:`.cli`)."""

from __future__ import annotations

from acp_agent.cli import main

raise SystemExit(main())
