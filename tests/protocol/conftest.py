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


@pytest.fixture(scope="session")
def official_schema() -> dict[str, Any]:
    path = schema_dir() / "schema.json"
    if not path.is_file():
        pytest.skip(f"the official ACP schema is not available at {path}")
    schema: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return schema


@pytest.fixture(scope="session")
def official_meta() -> dict[str, Any]:
    path = schema_dir() / "meta.json"
    if not path.is_file():
        pytest.skip(f"the official ACP meta.json is not available at {path}")
    meta: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return meta
