"""``python -m acp_agent.protocol.codegen``."""

from acp_agent.protocol.codegen import main

raise SystemExit(main())
