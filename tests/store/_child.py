"""A second agent process for test_sqlite.py: drives a SqliteSessionStore on a shared file.

Run as ``python _child.py MODE DB N``. Modes:

- ``share``: create session ``child``, print ``ready``, write N updates (while the parent
  writes too; at once when the store can, else awaited), end the turn, print ``written``,
  wait for a line on stdin, then print the parent's history as JSON.
- ``crash``: create session ``crash``, begin a turn, write N updates (half of them at once),
  print ``ready`` and wait to be killed.
- ``journal-crash``: on a ``JournaledStore``, create session ``crash``, make N whole turns
  durable through the journal, print ``ready`` and wait to be killed.
"""

from __future__ import annotations

import sys

import anyio
import anyio.to_thread
import orjson

from acp_agent.store import DEFAULT_OWNER, SessionRecord, SqliteSessionStore
from acp_agent.store.journal import JournaledStore


def item(**fields: object) -> str:
    return orjson.dumps(fields).decode()


async def share(db: str, n: int) -> None:
    async with await SqliteSessionStore.open(db) as store:
        await store.create(SessionRecord("child", cwd="/child"))
        await store.write_turn("child", "t0", begin=[item(who="child", prompt=True)])
        print("ready", flush=True)
        for i in range(n):  # at once when it can, else awaited (the parent writes too)
            update = [item(who="child", i=i)]
            if not store.write_turn_now("child", "t0", updates=update):
                await store.write_turn("child", "t0", updates=update)
        await store.write_turn("child", "t0", end="end_turn")
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
    await store.write_turn("crash", "t0", begin=[item(sessionUpdate="user_message_chunk")])
    for i in range(0, n, 10):  # half of them written at once
        updates = [item(i=j) for j in range(i, i + 10)]
        if i % 20 or not store.write_turn_now("crash", "t0", updates=updates):
            await store.write_turn("crash", "t0", updates=updates)
    print("ready", flush=True)
    await anyio.sleep_forever()


async def journal_crash(db: str, n: int) -> None:
    store = await JournaledStore.open(db)
    await store.create(SessionRecord("crash", cwd="/crash"))
    for i in range(n):
        assert store.write_turn_now(
            "crash", f"t{i}", begin=[item(prompt=i)], updates=[item(i=i)], end="end_turn"
        )
    print("ready", flush=True)
    await anyio.sleep_forever()


if __name__ == "__main__":
    mode, db, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    modes = {"share": share, "crash": crash, "journal-crash": journal_crash}
    anyio.run(modes[mode], db, count)
