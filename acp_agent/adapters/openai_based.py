"""What the two adapters whose frameworks run on asyncio and the ``openai`` client share.

The LangGraph adapter (through ``langchain-openai``) and the OpenAI Agents SDK adapter
both reach the model with the ``openai`` package and both need an asyncio loop. Owns
:func:`serve_turn`, the way both run a turn (tool calls a cancelled turn leaves open end
``failed``, a failed model request becomes the adapters' one model error
:class:`~acp_agent.adapters.turns.ModelFailed`, the framework's memory is saved on every
way out, and every client terminal its tools opened is released at its end),
:func:`prompt_text` (the prompt as the text both give their model),
:func:`locations`, :func:`model_failure` and :func:`require_asyncio`. It never imports
``openai``: an exception of it can only exist once a framework has imported it.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import anyio

from .._loop import running_asyncio_loop
from ..agent import StopReason
from ..errors import InternalError
from ..session import Session
from .turns import AdapterTurn, ModelFailed, unwinding

__all__ = [
    "CANCELLED",
    "locations",
    "model_failure",
    "prompt_text",
    "require_asyncio",
    "serve_turn",
]

#: the content of a tool call a cancelled turn ends (v1 has no ``cancelled`` status)
CANCELLED: Final = "Cancelled."


async def serve_turn(
    adapter: AdapterTurn,
    run: Callable[[], Awaitable[StopReason]],
    memory: Callable[[], Any],
) -> StopReason:
    """Run one turn's ``run`` and save ``memory()`` with the turn, however it ends."""
    try:
        with adapter.active():
            stop = await run()
        if stop == "cancelled":
            await adapter.calls.fail_open(CANCELLED)
        return stop
    except anyio.get_cancelled_exc_class():
        with unwinding():
            await adapter.calls.fail_open(CANCELLED)
        raise
    except Exception as exc:
        failure = model_failure(exc)
        if failure is not None:
            raise failure from None
        raise
    finally:
        with unwinding():
            await adapter.release_terminals()
        adapter.save(memory())


def model_failure(exc: BaseException) -> ModelFailed | None:
    """``exc`` as a :class:`ModelFailed` if the ``openai`` client raised it, else None."""
    openai = sys.modules.get("openai")
    if openai is None or not isinstance(exc, openai.APIError):
        return None
    status = getattr(exc, "status_code", None)
    reason = str(getattr(exc, "message", None) or exc).splitlines()[0][:500]
    return ModelFailed(reason, status=status if isinstance(status, int) else None)


def require_asyncio(framework: str) -> None:
    """Refuse to run ``framework`` on another loop than asyncio (trio)."""
    if running_asyncio_loop() is None:
        raise InternalError(
            f"{framework} runs on asyncio only: serve it with --backend asyncio or uvloop"
        )


def prompt_text(blocks: Sequence[Mapping[str, Any]]) -> str:
    """The prompt's text blocks, resource links (their URI) and embedded text resources
    (URI and text), one per line: the adapted agents advertise no other content."""
    lines: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            lines.append(str(block.get("text", "")))
        elif kind == "resource_link":
            lines.append(str(block.get("uri", "")))
        elif kind == "resource":
            resource = block.get("resource")
            if isinstance(resource, Mapping) and "text" in resource:
                lines.append(f"{resource.get('uri')}\n{resource['text']}")
    return "\n".join(lines)


def locations(session: Session, args: Any, argument: str | None) -> list[dict[str, str]] | None:
    """The call's ``locations``: the path in its ``argument`` (the tool's ``acp_path``),
    made absolute against the session's cwd; None without one or outside the roots."""
    path = args.get(argument) if argument and isinstance(args, Mapping) else None
    if not isinstance(path, str) or "\0" in path:
        return None
    resolved = session.resolve_path(path)
    # a path outside the session's roots is not shown (the editor's tools refuse it)
    return [{"path": resolved}] if session.within_roots(resolved) else None
