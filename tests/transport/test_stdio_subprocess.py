"""A real child process: StdioTransport on stdin and a reserved stdout.

The child echoes every line it reads and makes noise every way it can (print,
logging to a handler on sys.stdout, a grandchild process writing to fd 1, a raw
os.write to fd 1). The parent must find only the echoed frames on the child's
stdout, and the noise on its stderr.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import logging, os, sys
import anyio
from acp_agent.jsonrpc import LineBuffer
from acp_agent.transport import StdioTransport, reserve_stdout

logging.basicConfig(stream=sys.stdout, format="log-noise %(message)s")

async def main() -> None:
    with reserve_stdout() as fd:
        print("print-noise")
        logging.warning("warning")
        os.system("echo child-noise")
        os.write(1, b"raw-fd1-noise\n")
        async with StdioTransport(0, fd) as transport:
            buf = LineBuffer()
            while True:
                try:
                    lines = buf.feed(await transport.receive())
                except anyio.EndOfStream:
                    lines = buf.close()
                    if not lines:
                        break
                for line in lines:
                    print("print-noise", len(line))
                    await transport.send(line + b"\n")
    print("restored")

from acp_agent._loop import run
run(main, backend=sys.argv[1])
"""


async def test_only_frames_reach_stdout(backend_name: str) -> None:
    frames = [b'{"jsonrpc":"2.0","id":%d,"method":"echo"}\n' % i for i in range(50)]
    frames.append(b'{"big":"' + b"x" * 300_000 + b'"}\n')  # bigger than a pipe buffer
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    stdout = bytearray()
    stderr = bytearray()
    async with await anyio.open_process(
        [sys.executable, "-c", CHILD, backend_name], env=env, cwd=str(ROOT)
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        stdin, out, err = proc.stdin, proc.stdout, proc.stderr

        async def writer() -> None:
            for frame in frames:
                await stdin.send(frame)
            await stdin.aclose()

        async def drain(stream: anyio.abc.ByteReceiveStream, into: bytearray) -> None:
            async for chunk in stream:
                into += chunk

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(writer)
                tg.start_soon(drain, out, stdout)
                tg.start_soon(drain, err, stderr)
            returncode = await proc.wait()

    assert returncode == 0, stderr.decode(errors="replace")
    assert bytes(stdout) == b"".join(frames) + b"restored\n"
    for noise in (b"print-noise", b"log-noise warning", b"child-noise", b"raw-fd1-noise"):
        assert noise in stderr, noise
    assert stderr.count(b"print-noise") == 1 + len(frames)
