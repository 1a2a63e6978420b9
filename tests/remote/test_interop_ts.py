"""Interop: the official TypeScript SDK's Streamable HTTP and WebSocket clients drive the
reference agent through its command table (``tests/remote/ts/interop.mjs``, run by node),
in clear and over TLS (``https://``, ``wss://``) with a certificate made in the test.

The SDK is the pinned node project ``tests/ts`` (see ``tests/helpers/ts_sdk.py``): skipped
without node and npm, failed in CI then.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import ts_sdk

from ._support import running_server, url_for, workdir
from ._tls import make_certs

pytestmark = pytest.mark.anyio

SCRIPT = Path(__file__).with_name("ts") / "interop.mjs"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def node_project(ts_sdk_project: Path) -> Path:
    return ts_sdk.with_scripts(ts_sdk_project, SCRIPT)


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
