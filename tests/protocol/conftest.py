"""Shared fixtures of the protocol tests: the official schema, from the vendored copy."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from acp_agent.protocol import vendor

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "wire"


def schema_dir() -> Path:
    env = os.environ.get("ACP_SCHEMA_DIR")
    return Path(env) if env else vendor.official_schema().parent


def _load(name: str, what: str) -> dict[str, Any]:
    """The official file ``name``; the test is skipped when it is not there."""
    path = schema_dir() / name
    if not path.is_file():
        pytest.skip(f"the official ACP {what} is not available at {path}")
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="session")
def official_schema() -> dict[str, Any]:
    return _load("schema.json", "schema")


@pytest.fixture(scope="session")
def official_meta() -> dict[str, Any]:
    return _load("meta.json", "meta.json")
