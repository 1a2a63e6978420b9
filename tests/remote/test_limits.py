"""Bounds on what one principal holds open, over real sockets: stalled request bodies
time out and count against the principal's bound, as per-session streams and
connections do; other principals are not affected. And ``/healthz``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import httpx
import orjson
import pytest

from acp_agent.store import MemorySessionStore

from ._raw import open_socket, reset
from ._support import TOKENS, Limits, connect, principals, running_server

pytestmark = pytest.mark.anyio

INIT = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}'


@asynccontextmanager
async def stalled_post(url: str, token: str) -> AsyncIterator[anyio.abc.SocketStream]:
    """A POST whose body stops after its first bytes (the socket stays open)."""
    async with open_socket(url) as stream:
        head = (
            f"POST /acp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(INIT)}\r\n\r\n"
        )
        await stream.send(head.encode() + INIT[:10])
        yield stream


async def status_of(stream: anyio.abc.SocketStream) -> int:
    """The status line's code of the response on ``stream``."""
    data = b""
    while b"\r\n" not in data:
        data += await stream.receive()
    return int(data.split(b" ", 2)[1])


async def post_status(http: httpx.AsyncClient, url: str, token: str) -> int:
    head = {"Authorization": f"Bearer {token}"}
    return (await http.post(url, content=b"{}", headers=head | _JSON)).status_code


_JSON = {"Content-Type": "application/json"}


async def test_a_stalled_request_body_times_out() -> None:
    async with (
        running_server(principals=principals(), limits=Limits(body_timeout=0.5)) as url,
        stalled_post(url, TOKENS["alice"]) as stream,
    ):
        with anyio.fail_after(10):
            assert await status_of(stream) == 408


async def test_stalled_bodies_count_against_their_principal_only() -> None:
    limits = Limits(connections=2, body_timeout=60)
    async with (
        running_server(principals=principals(), limits=limits) as url,
        httpx.AsyncClient(timeout=10) as http,
        AsyncExitStack() as stack,
    ):
        for _ in range(2):
            await stack.enter_async_context(stalled_post(url, TOKENS["alice"]))
        # Each look is a whole request of its own (answered 400: no connection id), until
        # the server has taken in both stalled ones and refuses alice.
        with anyio.fail_after(10):
            while (status := await post_status(http, url, TOKENS["alice"])) != 429:
                assert status == 400
        async with connect(url, "websocket", token=TOKENS["bob"]) as bob:
            await bob.initialize()
        with pytest.raises(Exception, match="429"):
            async with connect(url, "websocket", token=TOKENS["alice"]):
                pass
        await stack.aclose()  # alice's stalled sockets go away, and so do their places
        with anyio.fail_after(10):
            while (status := await post_status(http, url, TOKENS["alice"])) == 429:
                pass
        assert status == 400


async def test_session_streams_count_against_the_principal(tmp_path: Path) -> None:
    async with (
        running_server(limits=Limits(connections=3)) as url,
        httpx.AsyncClient(timeout=10) as http,
        AsyncExitStack() as stack,
    ):
        opened = await http.post(url, content=INIT, headers=_JSON)
        head = {"Acp-Connection-Id": opened.headers["acp-connection-id"]}
        streams = []
        for n in range(3):
            stream = http.stream(
                "GET",
                url,
                headers={**head, "Accept": "text/event-stream", "Acp-Session-Id": f"s{n}"},
            )
            streams.append((await stack.enter_async_context(stream)).status_code)
        assert streams == [200, 200, 429]  # the connection holds one place, its streams two


async def test_healthz_says_whether_the_store_answers() -> None:
    class StalledStore(MemorySessionStore):
        def __init__(self) -> None:
            super().__init__()
            self.stalled = False
            self.release = anyio.Event()

        async def get(self, owner: str, session_id: str):  # type: ignore[no-untyped-def]
            if self.stalled:
                await self.release.wait()
            return await super().get(owner, session_id)

    store = StalledStore()
    async with (
        running_server(principals=principals(), store=store) as url,
        httpx.AsyncClient(timeout=10) as http,
    ):
        health = url.replace("/acp", "/healthz")
        answer = await http.get(health)  # no token needed
        assert (answer.status_code, answer.json()) == (200, {"status": "ok", "store": "ok"})
        assert (await http.head(health)).status_code == 200
        store.stalled = True
        with anyio.fail_after(8):  # the answer it had is reused for a second, then...
            while (answer := await http.get(health)).status_code == 200:
                pass
        assert answer.status_code == 503
        assert answer.json() == {"status": "unavailable", "store": "not answering"}
        assert TOKENS["alice"] not in answer.text
        store.stalled = False
        store.release.set()
        with anyio.fail_after(8):
            while (answer := await http.get(health)).status_code != 200:
                pass
        assert (await http.post(health)).status_code == 405


async def test_a_body_cut_short_reaches_no_connection() -> None:
    async with running_server() as url, httpx.AsyncClient(timeout=10) as http:
        opened = await http.post(url, content=INIT, headers=_JSON)
        conn = opened.headers["acp-connection-id"]
        head = {"Acp-Connection-Id": conn}
        async with http.stream("GET", url, headers={**head, "Accept": "text/event-stream"}) as sse:
            lines = sse.aiter_lines()
            async with open_socket(url) as stream:
                cut = (
                    f"POST /acp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    f"Acp-Connection-Id: {conn}\r\nContent-Length: 99\r\n\r\n"
                )
                await stream.send(cut.encode() + b'{"jsonrpc":"2.0","id":5,"met')
                reset(stream)
            for request_id in (7, 8):
                ask = {"jsonrpc": "2.0", "id": request_id, "method": "session/list", "params": {}}
                assert (await http.post(url, json=ask, headers=head)).status_code == 202
            seen = []
            with anyio.fail_after(10):
                async for line in lines:
                    if line.startswith("data:"):
                        seen.append(orjson.loads(line[5:]))
                        if seen[-1].get("id") == 8:
                            break
            assert [m.get("id") for m in seen] == [7, 8], seen  # no -32700 for a fragment
            assert (await http.delete(url, headers=head)).status_code == 202
            async for _ in lines:  # the stream ends with the connection
                pass
