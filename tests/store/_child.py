"""A second agent process for test_sqlite.py: drives a SqliteSessionStore on a shared file.

Run as ``python _child.py MODE DB N``. Modes:

- ``share``: create session ``child``, print ``ready``, write N updates (while the parent
  writes too), end the turn, print ``written``, wait for a line on stdin, then print the
  parent's history as JSON.
- ``crash``: create session ``crash``, begin a turn, write N updates, print ``ready`` and
  wait to be killed.
- ``hold``: acquire session ``held`` (N is unused), print ``ready`` and wait for a line on
  stdin or to be killed; on the line, release it, print ``released`` and wait again.
"""

from __future__ import annotations

import sys

import anyio
import anyio.to_thread
import orjson

from acp_agent.store import DEFAULT_OWNER, SessionRecord, SqliteSessionStore, TurnWrite


def item(**fields: object) -> str:
    return orjson.dumps(fields).decode()


async def share(db: str, n: int) -> None:
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("child", cwd="/child"))
        await store.write_turn(TurnWrite("child", "t0", begin=[item(who="child", prompt=True)]))
        print("ready", flush=True)
        for i in range(n):  # while the parent writes too
            await store.write_turn(TurnWrite("child", "t0", updates=[item(who="child", i=i)]))
        await store.write_turn(TurnWrite("child", "t0", end="end_turn"))
        print("written", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        history = await store.load_history(DEFAULT_OWNER, "parent")
        records, _ = await store.list(DEFAULT_OWNER, limit=10)
        result = {
            "sessions": sorted(r.session_id for r in records),
            "turns": [[t.updates, t.stop_reason] for t in history],
        }
        print(orjson.dumps(result).decode(), flush=True)


async def crash(db: str, n: int) -> None:
    store = await SqliteSessionStore.open(db)
    await store.create(SessionRecord("crash", cwd="/crash", title="dies mid-turn"))
    await store.write_turn(
        TurnWrite("crash", "t0", begin=[item(sessionUpdate="user_message_chunk")])
    )
    for i in range(0, n, 10):
        await store.write_turn(
            TurnWrite("crash", "t0", updates=[item(i=j) for j in range(i, i + 10)])
        )
    print("ready", flush=True)
    await anyio.sleep_forever()


async def hold(db: str, n: int) -> None:
    store = await SqliteSessionStore.open(db)
    await store.acquire("held")
    print("ready", flush=True)
    await anyio.to_thread.run_sync(sys.stdin.readline)
    await store.release("held")
    print("released", flush=True)
    await anyio.sleep_forever()


if __name__ == "__main__":
    mode, db, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    modes = {"share": share, "crash": crash, "hold": hold}
    anyio.run(modes[mode], db, count)
