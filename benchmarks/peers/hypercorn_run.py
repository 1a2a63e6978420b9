"""Running a remote peer's ASGI app as ``benchmarks/remote.py`` expects: Hypercorn,
asyncio on uvloop, ``--listen HOST:PORT``, no access log, stopped by SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any


async def _serve(app: Any, listen: str) -> None:
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    config = Config()
    config.bind = [listen]
    config.accesslog = None
    config.graceful_timeout = 2.0
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"serving http://{listen}/acp", file=sys.stderr, flush=True)
    await serve(app, config, shutdown_trigger=stop.wait)


def run(app: Any) -> None:
    """Serve ``app`` at the address given by ``--listen`` until a signal stops it."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", default="127.0.0.1:8766")
    args = parser.parse_args()
    import uvloop

    uvloop.run(_serve(app, args.listen))
