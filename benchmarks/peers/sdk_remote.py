"""The official Python SDK's remote server (``acp.http``), serving the SDK reference agent.

The comparison point for ``benchmarks/remote.py``: the SDK's ASGI app
(``acp.http.asgi.create_asgi_app``, Streamable HTTP and WebSocket at one path) with a fresh
:class:`benchmarks.peers.sdk_agent.ReferenceAgent` per connection, run by the same ASGI
server acp-agent uses (Hypercorn, asyncio on uvloop), so that only the ACP side differs.

    python benchmarks/peers/sdk_remote.py --listen 127.0.0.1:PORT
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from acp.http.asgi import create_asgi_app
from sdk_agent import ReferenceAgent


async def serve(listen: str) -> None:
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config

    config = Config()
    config.bind = [listen]
    config.accesslog = None
    config.graceful_timeout = 2.0
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    app = create_asgi_app(lambda conn: ReferenceAgent())
    print(f"serving http://{listen}/acp", file=sys.stderr, flush=True)
    await hypercorn_serve(app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", default="127.0.0.1:8766")
    args = parser.parse_args()
    import uvloop

    uvloop.run(serve(args.listen))


if __name__ == "__main__":
    main()
