"""Interop: the official TypeScript SDK's Streamable HTTP and WebSocket clients drive the
reference agent through its command table (``tests/remote/ts/interop.mjs``, run by node),
in clear and over TLS (``https://``, ``wss://``) with a certificate made in the test.

Not part of the default run (it installs the SDK from npm): set ``ACP_AGENT_TS_INTEROP=1``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from ._support import running_server, url_for, workdir
from ._tls import make_certs

pytestmark = pytest.mark.anyio

SDK = "@agentclientprotocol/sdk@2.4.0"
WS = "ws@8"  # node 20 has no WebSocket of its own; the SDK takes this one
SCRIPT = Path(__file__).with_name("ts") / "interop.mjs"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def node_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
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
    shutil.copy(SCRIPT, project / "interop.mjs")
    return project


@pytest.mark.parametrize("kind", ["http", "websocket", "https", "wss"])
async def test_the_typescript_clients_drive_the_reference_agent(
    kind: str, node_project: Path, tmp_path: Path
) -> None:
    cwd = Path(workdir(tmp_path))
    (cwd / "in.txt").write_text("twelve chars")
    options: dict[str, Any] = {}
    env = dict(os.environ)
    if kind in ("https", "wss"):
        (tmp_path / "tls").mkdir()
        certs = make_certs(tmp_path / "tls")
        options["tls"] = certs.tls
        env["NODE_EXTRA_CA_CERTS"] = certs.ca_file
    async with running_server(**options) as url:
        assert url.startswith("https://" if options else "http://")
        done = await anyio.run_process(
            ["node", "interop.mjs", url_for(url, kind), str(cwd)],
            cwd=node_project,
            check=False,
            env=env,
        )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    results = json.loads(done.stdout.decode().strip().splitlines()[-1])
    echo = results["/echo hello ts"]  # the session's commands may arrive with it
    assert (echo["stop"], echo["texts"]) == ("end_turn", ["hello ts"])
    assert [len(t) for t in results["/stream 5 3"]["texts"]] == [3] * 5
    assert results["/think deeply"]["kinds"] == ["agent_thought_chunk"]
    assert results["/plan 2"]["kinds"] == ["plan"] * 3
    assert results["/tools 2"]["kinds"] == ["tool_call", "tool_call_update", "tool_call_update"] * 2
    assert results["/read in.txt"]["texts"] == ["read 12 chars"]
    assert (cwd / "out.txt").read_text() == "written by ts"
    assert "exit 0" in results["/run echo hi"]["texts"]
    assert "/echo" in results["/help"]["texts"][0]
    assert "plain words" in results["plain words"]["texts"][0]
    assert results["/fail -32042 on purpose"]["error"]["code"] == -32042
    assert results["listed"] is True
