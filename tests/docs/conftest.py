"""The docs tests need the ``docs`` extra (mkdocs, mkdocstrings, griffe), which the test
extra includes: they skip where it is missing, except in CI (``CI=true``), where that
fails."""

from __future__ import annotations

import importlib.util
import os

import pytest


def need_docs_extra() -> None:
    """Skip (fail in CI) unless the docs extra is installed."""
    missing = [name for name in ("mkdocs", "griffe") if importlib.util.find_spec(name) is None]
    if not missing:
        return
    reason = f"{', '.join(missing)} not installed: pip install -e '.[docs]'"
    if os.environ.get("CI") == "true":
        pytest.fail(f"docs tests cannot run in CI: {reason}", pytrace=False)
    pytest.skip(reason)
