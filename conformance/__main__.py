"""`python -m conformance -- AGENT_COMMAND...`: see `cli.py`."""

import sys

from .cli import main

sys.exit(main())
