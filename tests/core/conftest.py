"""Fixtures for the core tests.

The tests import their helpers as ``tests.helpers.memclient`` and ``tests.core._support``;
make the project root importable whether pytest runs as ``python -m pytest`` (which adds
the working directory) or as the ``pytest`` script (which does not).
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
