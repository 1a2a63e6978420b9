"""`python -m acp_agent_conformance -- AGENT_COMMAND...`: see `cli.py`."""

import sys

from .cli import main

sys.exit(main())
