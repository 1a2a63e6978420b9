"""Context compaction for the LLM agent: older turns summarised by the model.

Before a model request whose conversation would take more than :data:`COMPACT_AT` of
the model's context window (counted as :func:`estimate_tokens` does), :func:`compact`
asks the model to summarise every turn before the current one (the previous summary
included) and keeps the summary as a compaction in the session's history:
``compaction_update`` / ``compaction_summary_chunk`` updates, streamed to a client that
advertised ``session.compaction``, and only recorded for one that did not. Either way
the session's store keeps them, ``session/load`` replays them (to clients that may see
them) and :func:`acp_agent.llm.context.build_messages` starts the conversation from
there, with the summary, in this process or any later one.

A compaction that fails (the endpoint errs, or answers nothing) is ended ``failed``
and the turn goes on with the whole conversation; a cancelled one ends ``cancelled``.
It does not decide turns or talk HTTP itself (the backend does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import anyio
import orjson

from ..client import SessionClient
from ..compaction import Compaction
from ..history import TurnLog
from .backend import ChatBackend, ModelError, NoticeSink
from .context import SUMMARY_HEADING, compacted_from, turn_messages
from .stream import Delta, TextDelta

JSON = dict[str, Any]

#: compact when a request would fill more than this share of the context window
COMPACT_AT: Final = 0.75
#: characters per token of :func:`estimate_tokens`
CHARS_PER_TOKEN: Final = 4

SUMMARY_PROMPT: Final = (
    "Summarize the conversation below between a user and a coding agent, for the agent "
    "to continue from it later without the conversation itself. Keep the user's goals "
    "and requests, decisions made, files read or changed and what was learned about them, "
    "commands run and their outcome, and what is still to do. Be concise and factual."
)


def estimate_tokens(messages: Sequence[JSON], tools: Sequence[JSON]) -> int:
    """A request's size in tokens, roughly: its JSON characters over four."""
    return (len(orjson.dumps(list(messages))) + len(orjson.dumps(list(tools)))) // CHARS_PER_TOKEN


def needs_compaction(messages: Sequence[JSON], tools: Sequence[JSON], window: int | None) -> bool:
    return window is not None and estimate_tokens(messages, tools) > window * COMPACT_AT


def transcript(turns: Sequence[TurnLog]) -> str:
    """The turns as plain text for the summarising request."""
    lines: list[str] = []
    for turn in turns:
        for message in turn_messages(turn):
            role = message["role"]
            if message.get("content"):
                lines.append(f"{role}: {message['content']}")
            for call in message.get("tool_calls") or []:
                function = call["function"]
                lines.append(f"{role} called {function['name']}({function['arguments']})")
    return "\n".join(lines)


async def _open(client: SessionClient) -> Compaction:
    """A compaction streamed to the client, or only recorded when it cannot show one."""
    if client.capabilities.compaction:
        return await client.compaction()

    async def record(update: JSON) -> None:
        client.record(update)

    handle = Compaction(record, client.session.new_compaction_id())
    await handle.begin()
    return handle


async def compact(
    client: SessionClient, backend: ChatBackend, window: int, on_retry: NoticeSink
) -> bool:
    """Summarise the turns before the current one; True when a summary was kept."""
    turns = client.session.history.turns
    start, summary = compacted_from(turns)
    earlier = turns[start:-1]
    if not earlier:
        return False  # nothing since the last compaction (or no earlier turn at all)
    text = transcript(earlier)
    if summary:
        text = f"{SUMMARY_HEADING}\n{summary}\n\n{text}"
    budget = int(window * COMPACT_AT) * CHARS_PER_TOKEN - len(SUMMARY_PROMPT)
    if len(text) > budget:  # keep the most recent part of what does not fit
        text = "[...]\n" + text[-max(budget, 0) :]
    messages = [
        {"role": "system", "content": SUMMARY_PROMPT},
        {"role": "user", "content": text},
    ]
    handle = await _open(client)

    async def on_delta(delta: Delta) -> None:
        if isinstance(delta, TextDelta) and delta.text:
            await handle.chunk(delta.text)

    try:
        await backend.complete(messages, [], on_delta, on_retry)
    except ModelError as exc:
        await handle.fail(f"The summary could not be made: {exc.message}")
        return False
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await handle.cancel()
        raise
    if not handle.summary:
        await handle.fail("The model returned an empty summary.")
        return False
    await handle.complete()
    return True
