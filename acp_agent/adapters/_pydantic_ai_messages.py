"""ACP's side of a pydantic-ai conversation as pydantic-ai messages: :func:`user_content`,
a prompt's content blocks as a run's user content, and :func:`unfinished_messages`, a turn
that ended with nothing saved (:mod:`acp_agent.adapters.unfinished`) as the messages the
turns save. It imports pydantic-ai only when called; the run itself is
:mod:`acp_agent.adapters.pydantic_ai`'s."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from .unfinished import INTERRUPTED, ToldCall, UnfinishedTurn

__all__ = ["unfinished_messages", "user_content"]


def unfinished_messages(turn: UnfinishedTurn) -> list[Any]:
    """``turn`` as pydantic-ai messages (``ModelMessagesTypeAdapter``'s JSON): the user's
    prompt, each response's text and calls, and the calls' returns."""
    from pydantic_ai import ModelMessagesTypeAdapter
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart(user_content(turn.prompt))])]
    for response in turn.responses:
        parts: list[Any] = [TextPart(response.text)] if response.text else []
        parts += [ToolCallPart(c.name, c.arguments, c.call_id) for c in response.calls]
        if not parts:
            continue
        messages.append(ModelResponse(parts=parts))
        if response.calls:
            returns = [
                ToolReturnPart(c.name, c.result, c.call_id, outcome=_outcome(c))
                for c in response.calls
            ]
            messages.append(ModelRequest(parts=returns))
    return list(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))


def _outcome(call: ToldCall) -> Any:
    if not call.failed:
        return "success"
    return "interrupted" if call.result == INTERRUPTED else "failed"


def user_content(blocks: Sequence[Mapping[str, Any]]) -> str | list[Any]:
    """ACP prompt blocks as pydantic-ai user content (text, images; links and embedded
    resources as text): one string, a line per block, when all are text."""
    from pydantic_ai.messages import BinaryContent

    out: list[Any] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            out.append(str(block.get("text", "")))
        elif kind == "image" and isinstance(block.get("data"), str):
            data = base64.b64decode(block["data"])
            out.append(BinaryContent(data, media_type=str(block.get("mimeType", "image/png"))))
        elif kind == "resource_link":
            out.append(f"[{block.get('name') or block.get('uri', '')}]({block.get('uri', '')})")
        elif kind == "resource":
            resource = block.get("resource")
            if isinstance(resource, Mapping) and isinstance(resource.get("text"), str):
                out.append(
                    f'<resource uri="{resource.get("uri", "")}">\n{resource["text"]}\n</resource>'
                )
    if all(isinstance(part, str) for part in out):
        # a plain string: the model client walks a list of parts item by item, every turn
        return "\n".join(out)
    return out
