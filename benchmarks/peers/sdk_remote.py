"""The official Python SDK's remote server (``acp.http``), serving the SDK reference agent.

The comparison point for ``benchmarks/remote.py``: the SDK's ASGI app
(``acp.http.asgi.create_asgi_app``, Streamable HTTP and WebSocket at one path) with a fresh
:class:`benchmarks.peers.sdk_agent.ReferenceAgent` per connection, run by the same ASGI
server acp-agent uses (Hypercorn, asyncio on uvloop), so that only the ACP side differs.

    python benchmarks/peers/sdk_remote.py --listen 127.0.0.1:PORT
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from acp.http.asgi import create_asgi_app
from hypercorn_run import run
from sdk_agent import ReferenceAgent

if __name__ == "__main__":
    run(create_asgi_app(lambda conn: ReferenceAgent()))
