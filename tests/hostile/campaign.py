"""A hostile client's campaign: random interleavings of requests across sessions.

One real agent process (the reference agent on a SQLite file, optionally behind a
store that fails some turn writes) receives bursts of pipelined requests for several
sessions at once: new, load, resume, delete, close, prompt (valid, invalid, slow,
failing), cancel, ``$/cancel_request``, set_mode, set_config_option, list, unknown
methods and lines that are not JSON. The client answers the agent's own requests at
random. After each burst it reads until every request is answered, then checks:

* the process is alive (and, at the end, exits 0 on end of input);
* every request with a valid id got exactly one answer, and nothing else did;
* stdout carried only JSON-RPC messages;
* no state outlives its cause: deleted sessions stay deleted (``session/list``
  and ``session/load`` agree), and nothing is answered after the end of input.

``python -m tests.hostile.campaign --seconds 300`` runs a longer campaign and prints
how many messages were tried and how many violations were found.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import orjson

from tests.helpers.wire_client import FULL_CAPS, ProcessClient, spawn

#: the agent, on a SQLite store that fails a turn write now and then when asked to
AGENT = """
import random, sys
import anyio
from acp_agent.options import ServerOptions
from acp_agent.reference import ReferenceAgent
from acp_agent.runner import serve_stdio
from acp_agent.store import open_store
from acp_agent.transport import reserve_stdout

class FailingStore:
    def __init__(self, inner, rate, seed):
        self._inner, self._rate, self._random = inner, rate, random.Random(seed)

    def __getattr__(self, name):
        return getattr(self._inner, name)

    async def write_turn(self, write):
        if self._random.random() < self._rate:
            raise OSError("injected store failure")
        return await self._inner.write_turn(write)

async def main(fd):
    store = FailingStore(await open_store(db), rate, seed)
    try:
        options = ServerOptions(busy_policy=sys.argv[4])
        await serve_stdio(ReferenceAgent(), store=store, write_fd=fd, options=options)
    finally:
        await store.aclose()

db, rate, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
anyio.run(main, reserve_stdout().fd)
"""

PROMPTS = [
    "/echo hello",
    "/stream 3 x",
    "/sleep 30",
    "/sleep 400",
    "/think hmm",
    "/plan",
    "/fail -32000 on purpose",
    "/fail 18446744073709551616 x",
    "/read notes.txt",
    "/write out.txt words",
    "/sleep " + "9" * 40,
    "/nonsense",
    "plain words",
]
ANSWER_TIMEOUT = 20.0


@dataclass
class Tally:
    """What one campaign tried and found."""

    messages: int = 0
    bursts: int = 0
    violations: list[str] = field(default_factory=list)

    def violation(self, text: str) -> None:
        self.violations.append(text)


class Campaign:
    def __init__(self, client: ProcessClient, rng: random.Random, cwd: Path, tally: Tally) -> None:
        self.client = client
        self.rng = rng
        self.cwd = str(cwd)
        self.tally = tally
        self.sessions: list[str] = []  # created, not deleted
        self.deleted: set[str] = set()
        self.next_id = 1000
        self.sent: dict[int, tuple[str, Any]] = {}  # id -> (method, params), unanswered
        self.answers: Counter[Any] = Counter()

    # -- sending ------------------------------------------------------------------

    async def raw(self, data: bytes) -> None:
        assert self.client.process.stdin is not None
        await self.client.process.stdin.send(data)
        self.tally.messages += 1

    async def request(self, method: str, params: Any) -> int:
        self.next_id += 1
        self.sent[self.next_id] = (method, params)
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        await self.raw(orjson.dumps(message) + b"\n")
        return self.next_id

    async def notify(self, method: str, params: Any) -> None:
        await self.raw(orjson.dumps({"jsonrpc": "2.0", "method": method, "params": params}) + b"\n")

    def some_session(self) -> str:
        pool = self.sessions + sorted(self.deleted) + ["sess_unknown"]
        return self.rng.choice(pool) if pool else "sess_unknown"

    async def one_step(self) -> None:
        rng = self.rng
        sid = self.some_session()
        where = {"sessionId": sid, "cwd": self.cwd, "mcpServers": []}
        kind = rng.choices(
            [
                "new",
                "load",
                "resume",
                "delete",
                "close",
                "prompt",
                "bad_prompt",
                "cancel",
                "cancel_request",
                "set_mode",
                "set_config",
                "list",
                "unknown",
                "garbage",
            ],
            weights=[3, 3, 2, 2, 2, 8, 2, 3, 2, 2, 2, 1, 1, 1],
        )[0]
        if kind == "new":
            await self.request("session/new", {"cwd": self.cwd, "mcpServers": []})
        elif kind in ("load", "resume"):
            await self.request(f"session/{kind}", where)
        elif kind in ("delete", "close"):
            await self.request(f"session/{kind}", {"sessionId": sid})
        elif kind == "prompt":
            text = rng.choice(PROMPTS)
            params = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
            await self.request("session/prompt", params)
        elif kind == "bad_prompt":
            await self.request("session/prompt", {"sessionId": sid, "prompt": rng.choice([1, "x"])})
        elif kind == "cancel":
            await self.notify("session/cancel", {"sessionId": sid})
        elif kind == "cancel_request":
            target = rng.choice(list(self.sent) or [1])
            await self.notify("$/cancel_request", {"requestId": target})
        elif kind == "set_mode":
            mode = rng.choice(["ask", "auto", "nope"])
            await self.request("session/set_mode", {"sessionId": sid, "modeId": mode})
        elif kind == "set_config":
            value = rng.choice(["ask", "auto", 3])
            params = {"sessionId": sid, "configId": "mode", "value": value}
            await self.request("session/set_config_option", params)
        elif kind == "list":
            await self.request("session/list", {})
        elif kind == "unknown":
            await self.request(rng.choice(["nope", "session/nope", "_x/y"]), {})
        else:
            await self.raw(rng.choice([b"{\n", b"[]\n", b"\xff\xfe\n", b'{"jsonrpc":"2.0"}\n']))

    # -- reading ------------------------------------------------------------------

    async def answer_agent(self, message: dict[str, Any]) -> None:
        method = message["method"]
        rng = self.rng
        if method == "session/request_permission":
            outcome = rng.choice(
                [
                    {"outcome": "selected", "optionId": "allow_once"},
                    {"outcome": "cancelled"},
                ]
            )
            result: Any = {"outcome": outcome}
        elif method == "fs/read_text_file":
            result = {"content": "some notes\n"}
        elif method == "fs/write_text_file":
            result = {}
        else:
            result = None
        if result is None or rng.random() < 0.05:
            reply = {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {"code": -32603, "message": "no"},
            }
        else:
            reply = {"jsonrpc": "2.0", "id": message["id"], "result": result}
        assert self.client.process.stdin is not None
        await self.client.process.stdin.send(orjson.dumps(reply) + b"\n")

    def check_frame(self, message: Any) -> None:
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            self.tally.violation(f"not a JSON-RPC message on stdout: {str(message)[:200]}")

    async def settle(self) -> None:
        """Read until every request sent so far is answered."""
        with anyio.fail_after(ANSWER_TIMEOUT):
            while self.sent:
                message = await self.client.receive(ANSWER_TIMEOUT)
                self.take(message)
                if "method" in message and "id" in message:
                    await self.answer_agent(message)

    def take(self, message: dict[str, Any]) -> None:
        self.check_frame(message)
        if "method" in message:
            return
        request_id = message.get("id")
        self.answers[request_id] += 1
        if request_id is None:
            return  # an answer to a line without a readable id
        if self.answers[request_id] > 1:
            self.tally.violation(f"request {request_id} answered twice: {message}")
        sent = self.sent.pop(request_id, None)
        if sent is None:
            self.tally.violation(f"an answer for no request: {message}")
            return
        method, params = sent
        result = message.get("result")
        if method == "session/new" and isinstance(result, dict):
            self.sessions.append(result["sessionId"])
        elif method == "session/delete" and "result" in message:
            sid = params["sessionId"]
            self.deleted.add(sid)
            if sid in self.sessions:
                self.sessions.remove(sid)

    # -- the checks after each burst ----------------------------------------------------

    async def burst(self) -> None:
        """A few requests back to back, then every answer."""
        for _ in range(self.rng.randint(1, 8)):
            await self.one_step()
        await self.settle()
        self.tally.bursts += 1

    async def check_state(self) -> None:
        """Deleted sessions are gone for good; the live ones are listed."""
        ids: set[str] = set()
        params: dict[str, Any] = {}
        while True:  # every page
            listed = await self.call("session/list", params)
            if not isinstance(listed, dict) or "sessions" not in listed:
                self.tally.violation(f"session/list failed: {listed}")
                return
            ids.update(s["sessionId"] for s in listed["sessions"])
            if not listed.get("nextCursor"):
                break
            params = {"cursor": listed["nextCursor"]}
        revived = ids & self.deleted
        if revived:
            self.tally.violation(f"deleted sessions came back: {sorted(revived)}")
        for sid in sorted(self.deleted)[-3:]:
            answer = await self.call(
                "session/load", {"sessionId": sid, "cwd": self.cwd, "mcpServers": []}
            )
            code = answer.get("code") if isinstance(answer, dict) else None
            if code != -32002:
                self.tally.violation(f"a deleted session {sid} loads: {answer}")

    async def call(self, method: str, params: Any) -> Any:
        request_id = await self.request(method, params)
        with anyio.fail_after(ANSWER_TIMEOUT):
            while True:
                message = await self.client.receive(ANSWER_TIMEOUT)
                self.take(message)
                if "method" in message and "id" in message:
                    await self.answer_agent(message)
                elif "method" not in message and message.get("id") == request_id:
                    return message.get("result", message.get("error"))


async def run_campaign(seconds: float, seed: int, failure_rate: float, tally: Tally) -> None:
    """One agent process, bursts until ``seconds`` have passed, then end of input."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        (work / "notes.txt").write_text("some notes\n")
        policy = random.Random(seed).choice(["reject", "queue"])
        command = [sys.executable, "-c", AGENT, str(Path(tmp) / "s.sqlite3")]
        command += [str(failure_rate), str(seed), policy]
        async with spawn(command) as client:
            campaign = Campaign(client, random.Random(seed), work, tally)
            await client.initialize(FULL_CAPS)
            deadline = anyio.current_time() + seconds
            try:
                while anyio.current_time() < deadline:
                    await campaign.burst()
                    if tally.bursts % 5 == 0:
                        await campaign.check_state()
                    if client.process.returncode is not None:
                        tally.violation(f"the agent died: exit {client.process.returncode}")
                        return
                await campaign.check_state()
            except TimeoutError:
                tally.violation(f"requests left unanswered: {sorted(campaign.sent.items())[:5]}")
                return
            assert client.process.stdin is not None
            await client.process.stdin.aclose()
            try:
                while True:  # nothing may be answered twice or out of nowhere at the end
                    campaign.take(await client.receive(ANSWER_TIMEOUT))
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass
            with anyio.fail_after(ANSWER_TIMEOUT):
                await client.process.wait()
        if client.process.returncode != 0:
            tally.violation(f"exit {client.process.returncode} after end of input")
        stderr = bytes(client.stderr).decode(errors="replace")
        if "Traceback" in stderr and failure_rate == 0:
            tally.violation(f"a traceback on stderr: {stderr[-1500:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.hostile.campaign")
    parser.add_argument("--seconds", type=float, default=120.0, help="per run (default 120)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=2, help="runs, alternating store failures")
    args = parser.parse_args(argv)
    tally = Tally()
    for run in range(args.runs):
        rate = 0.0 if run % 2 == 0 else 0.05
        anyio.run(run_campaign, args.seconds, args.seed + run, rate, tally)
    print(f"messages tried: {tally.messages}")
    print(f"bursts: {tally.bursts}")
    print(f"violations found: {len(tally.violations)}")
    for text in tally.violations[:20]:
        print(f"  - {text}")
    return 1 if tally.violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
