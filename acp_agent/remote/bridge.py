"""A remote agent as a stdio command: ``python -m acp_agent.remote.bridge URL``.

This module owns the bridge that lets any stdio ACP client (an editor, the conformance
suite) reach an agent served at ``ws://`` or ``http://``: lines read on stdin go to the
remote connection, messages from it are written to stdout, one per line. End of input
ends the connection as a closed pipe ends a stdio agent (the server answers open turns
``cancelled``, and those answers are still written out); SIGTERM does the same; the
bridge exits 0 once the server has closed its end.

It knows nothing of ACP: it moves whole messages through
:func:`~acp_agent.transport.remote.open_remote`.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence

import anyio

from .._loop import run
from ..jsonrpc import LineBuffer
from ..transport import open_stdio, reserve_stdout
from ..transport.remote import open_remote, read_token, tls_context

__all__ = ["main"]

MAX_LINE = 64 * 1024 * 1024


async def bridge(url: str, token: str | None, out_fd: int, ca_file: str | None = None) -> None:
    stdio = open_stdio(0, out_fd)
    lines = LineBuffer(MAX_LINE)
    async with open_remote(url, token=token, max_message=MAX_LINE, ca_file=ca_file) as remote:

        async def upstream() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async with anyio.create_task_group() as tg:

                    async def on_signal() -> None:
                        async for _ in signals:
                            tg.cancel_scope.cancel()

                    tg.start_soon(on_signal)
                    while True:
                        try:
                            data = await stdio.receive()
                        except (anyio.EndOfStream, anyio.BrokenResourceError):
                            break
                        for line in lines.feed(data):
                            if isinstance(line, bytes):
                                await remote.send(line + b"\n")
                    tg.cancel_scope.cancel()
            # End of input ends the connection; over HTTP its last messages still come.
            send_eof = getattr(remote, "send_eof", None)
            await (send_eof() if send_eof is not None else remote.aclose())

        async def downstream() -> None:
            while True:
                try:
                    data = await remote.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return
                await stdio.send(data)

        async with anyio.create_task_group() as tg:
            tg.start_soon(upstream)
            await downstream()
            tg.cancel_scope.cancel()
    await stdio.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m acp_agent.remote.bridge",
        description="Reach an ACP agent served at URL (ws://, wss://, http:// or https://) "
        "over stdio.",
    )
    parser.add_argument("url")
    parser.add_argument("--token-file", metavar="PATH")
    parser.add_argument(
        "--ca-file", metavar="PATH", help="trust the server certificates this PEM file signs"
    )
    args = parser.parse_args(argv)
    try:
        token = read_token(args.token_file) if args.token_file else None
        if args.ca_file is not None:
            tls_context(args.ca_file)  # a bad file shows now, as one line
    except ValueError as exc:
        print(f"bridge: {exc}", file=sys.stderr)
        return 2
    reservation = reserve_stdout()
    try:
        run(lambda: bridge(args.url, token, reservation.fd, args.ca_file))
    finally:
        reservation.restore()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
