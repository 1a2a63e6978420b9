"""The official TypeScript SDK, installed from npm into a temporary node project, for the
interop tests that drive this project's agents with it (they run its scripts with node).

Not part of the default run: without ``ACP_AGENT_TS_INTEROP=1`` (or without node and npm)
the tests that use it are skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SDK = "@agentclientprotocol/sdk@2.4.0"
WS = "ws@8"  # node 20 has no WebSocket of its own; the SDK takes this one


def node_project(tmp_path_factory: pytest.TempPathFactory, *scripts: Path) -> Path:
    """A node project with the SDK installed and ``scripts`` copied in (or a skip)."""
    if os.environ.get("ACP_AGENT_TS_INTEROP") != "1":
        pytest.skip("set ACP_AGENT_TS_INTEROP=1 to install the TypeScript SDK from npm and run it")
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed")
    project = tmp_path_factory.mktemp("ts-interop")
    (project / "package.json").write_text('{"type": "module", "private": true}')
    install = ["npm", "install", "--silent", "--no-audit", "--no-fund", SDK, "zod", WS]
    done = subprocess.run(install, cwd=project, capture_output=True, timeout=300)
    if done.returncode != 0:
        pytest.fail(f"npm install failed: {done.stderr.decode()[-2000:]}")
    for script in scripts:
        shutil.copy(script, project / script.name)
    return project
