"""The fake model server (:mod:`acp_agent.llm.fake_server`) in a process of its own, for
tests that drive the command line: it lists the models ``fake`` and ``fake-large``."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

from tests.helpers.wire_client import ROOT, child_env


@contextlib.contextmanager
def fake_model_url() -> Iterator[str]:
    """The server's base URL (``http://127.0.0.1:PORT/v1``) for the ``with`` block."""
    server = subprocess.Popen(
        [sys.executable, "-m", "acp_agent.llm.fake_server", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env=child_env(),
    )
    assert server.stdout is not None
    try:
        yield server.stdout.readline().strip()
    finally:
        server.kill()
        server.wait()
        server.stdout.close()
