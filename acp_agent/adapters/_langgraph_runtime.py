"""The LangGraph side of the LangGraph adapter: the parts that import the framework.

Owns :class:`SessionCheckpointer`, a LangGraph checkpointer that keeps each thread's
latest checkpoint (per namespace) and its pending writes in memory and exports them as
plain JSON, so that the adapter can store a session's graph state beside its ACP
transcript and restore it in another process; :class:`ToolStarts`, the callback
handler that tells the adapter when a tool really starts running; the few message
constructors the adapter needs; and :func:`editor_tools`, the client's editor as LangChain
tools (asking with ``interrupt()`` before writing or running).

Only :mod:`acp_agent.adapters.langgraph` imports this module, and only when a graph is
first served, so that importing the adapter does not import LangGraph.

One thread is one ACP session. Only the latest checkpoint of each namespace is kept
(no time travel): a graph whose state uses LangGraph's beta ``DeltaChannel`` (Deep Agents)
is served with those channels made whole (:func:`whole_channels`). A checkpoint is kept
without its channel values; each channel's latest value is kept beside it, serialized when
its version changes (``new_versions``), so that a step that leaves the conversation alone
does not serialize it again. A list value is serialized entry by entry, so that what a turn
appended to it can be told apart and saved alone
(:mod:`acp_agent.adapters._langgraph_memory`).
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Annotated, Any, Final

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, InjectedToolCallId, ToolException, tool
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from .turns import ModelFailed, unfinished_answer

JSON = dict[str, Any]
Typed = tuple[str, bytes]
#: a channel value as kept: serialized whole, or a list serialized entry by entry
Stored = Typed | list[Typed]

__all__ = [
    "AnswerFailed",
    "SessionCheckpointer",
    "ToolStarts",
    "answer_failure",
    "cancelled_result",
    "editor_tools",
    "stream_failure",
    "user_message",
    "whole_channels",
]


def _pack(typed: Typed) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode("ascii")]


def _unpack(packed: Any) -> Typed:
    return str(packed[0]), base64.b64decode(packed[1])


def _pack_value(stored: Stored) -> Any:
    """A kept value as JSON: ``[type, base64]``, or ``{"entries": [[type, base64], ...]}``."""
    if isinstance(stored, list):
        return {"entries": [_pack(entry) for entry in stored]}
    return _pack(stored)


def _unpack_value(packed: Any) -> Stored:
    if isinstance(packed, Mapping):
        return [_unpack(entry) for entry in packed["entries"]]
    return _unpack(packed)


def _dump(serde: SerializerProtocol, value: Any) -> Stored:
    if type(value) is list:
        return [serde.dumps_typed(entry) for entry in value]
    return serde.dumps_typed(value)


def _load(serde: SerializerProtocol, stored: Stored) -> Any:
    if isinstance(stored, list):
        return [serde.loads_typed(entry) for entry in stored]
    return serde.loads_typed(stored)


class _Latest:
    """One namespace of one thread: its latest checkpoint (without its channel values),
    each channel's latest value and that checkpoint's writes."""

    __slots__ = ("checkpoint", "checkpoint_id", "metadata", "parent_id", "values", "writes")

    def __init__(
        self,
        checkpoint_id: str,
        checkpoint: Typed,
        metadata: Typed,
        parent_id: str | None,
        values: dict[str, Stored],
    ) -> None:
        self.checkpoint_id = checkpoint_id
        self.checkpoint = checkpoint
        self.metadata = metadata
        self.parent_id = parent_id
        #: channel -> its value (the checkpoint's ``channel_values``, each serialized)
        self.values = values
        #: (task id, index) -> (task id, channel, value, task path)
        self.writes: dict[tuple[str, int], tuple[str, str, Typed, str]] = {}

    def export(self) -> JSON:
        return {
            "id": self.checkpoint_id,
            "checkpoint": _pack(self.checkpoint),
            "metadata": _pack(self.metadata),
            "parent": self.parent_id,
            "values": [[channel, _pack_value(value)] for channel, value in self.values.items()],
            "writes": [
                [task, idx, channel, _pack(value), path]
                for (task, idx), (_, channel, value, path) in self.writes.items()
            ],
        }

    @classmethod
    def restore(cls, data: JSON, serde: SerializerProtocol) -> _Latest:
        """The namespace from its export; one saved before channel values were kept apart
        (``checkpoint`` holding them, no ``values``) has them split off here."""
        checkpoint = _unpack(data["checkpoint"])
        values = {str(ch): _unpack_value(value) for ch, value in data.get("values", ())}
        if "values" not in data:
            checkpoint, values = _split(serde, serde.loads_typed(checkpoint))
        latest = cls(
            str(data["id"]), checkpoint, _unpack(data["metadata"]), data.get("parent"), values
        )
        for task, idx, channel, value, path in data.get("writes", ()):
            latest.writes[(str(task), int(idx))] = (str(task), str(channel), _unpack(value), path)
        return latest


def _split(
    serde: SerializerProtocol,
    checkpoint: Checkpoint,
    new_versions: ChannelVersions | None = None,
    previous: Mapping[str, Stored] | None = None,
) -> tuple[Typed, dict[str, Stored]]:
    """``checkpoint`` serialized without its channel values, and each of its channel
    values serialized beside it: taken from ``previous`` where the channel's version did
    not change (``new_versions`` does not list it), else serialized (all without
    ``new_versions``)."""
    values: dict[str, Stored] = {}
    for channel, value in checkpoint["channel_values"].items():
        kept = None
        if new_versions is not None and previous is not None and channel not in new_versions:
            kept = previous.get(channel)
        values[channel] = kept if kept is not None else _dump(serde, value)
    bare = serde.dumps_typed({**checkpoint, "channel_values": {}})
    return bare, values


def whole_channels(channels: Mapping[str, Any]) -> dict[str, Any] | None:
    """``channels`` (a compiled graph's) with each beta ``DeltaChannel`` (Deep Agents'
    ``messages`` and ``files``) made a channel that checkpoints its whole value, folding
    each write with the same reducer (``DeltaChannel`` reducers fold a batch as its
    writes one by one); None when there is none. A ``DeltaChannel`` rebuilds its value
    from every ancestor checkpoint's writes, which a checkpointer keeping only the latest
    checkpoint does not have."""
    from langgraph.channels.binop import BinaryOperatorAggregate
    from langgraph.channels.delta import DeltaChannel

    def folding(reducer: Callable[[Any, Sequence[Any]], Any]) -> Callable[[Any, Any], Any]:
        return lambda value, write: reducer(value, [write])

    if not any(isinstance(c, DeltaChannel) for c in channels.values()):
        return None
    made = dict(channels)
    for name, channel in channels.items():
        if isinstance(channel, DeltaChannel):
            whole: Any = BinaryOperatorAggregate(channel.typ, folding(channel.reducer))
            whole.key = channel.key
            made[name] = whole
    return made


class SessionCheckpointer(BaseCheckpointSaver[str]):
    """A checkpointer whose threads are exported to and restored from plain JSON.

    The adapter restores a session's thread when a turn starts, exports it when the turn
    ends and then forgets it; nothing here touches a disk.
    """

    def __init__(self) -> None:
        super().__init__()
        self._threads: dict[str, dict[str, _Latest]] = {}

    # -- what the adapter calls -------------------------------------------------------

    def export_thread(self, thread_id: str) -> JSON:
        return {ns: latest.export() for ns, latest in self._threads.get(thread_id, {}).items()}

    def restore_thread(self, thread_id: str, data: JSON | None) -> None:
        self._threads[thread_id] = {
            str(ns): _Latest.restore(value, self.serde) for ns, value in (data or {}).items()
        }

    def forget_thread(self, thread_id: str) -> None:
        self._threads.pop(thread_id, None)

    # -- BaseCheckpointSaver ----------------------------------------------------------

    def _tuple(self, thread_id: str, ns: str, latest: _Latest) -> CheckpointTuple:
        def config(checkpoint_id: str) -> RunnableConfig:
            return {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            }

        writes = sorted(latest.writes.items(), key=lambda item: (item[1][3], item[0]))
        checkpoint: Checkpoint = self.serde.loads_typed(latest.checkpoint)
        checkpoint["channel_values"] = {
            channel: _load(self.serde, value) for channel, value in latest.values.items()
        }
        return CheckpointTuple(
            config=config(latest.checkpoint_id),
            checkpoint=checkpoint,
            metadata=self.serde.loads_typed(latest.metadata),
            parent_config=config(latest.parent_id) if latest.parent_id else None,
            pending_writes=[
                (task, channel, self.serde.loads_typed(value))
                for _, (task, channel, value, _path) in writes
            ],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config.get("configurable", {})
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        latest = self._threads.get(thread_id, {}).get(ns)
        if latest is None:
            return None
        wanted = get_checkpoint_id(config)
        if wanted is not None and wanted != latest.checkpoint_id:
            return None
        return self._tuple(thread_id, ns, latest)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if config is None or (limit is not None and limit <= 0):
            return
        configurable = config.get("configurable", {})
        thread_id = str(configurable["thread_id"])
        wanted_ns = configurable.get("checkpoint_ns")
        for ns, latest in self._threads.get(thread_id, {}).items():
            if wanted_ns is not None and ns != wanted_ns:
                continue
            found = self._tuple(thread_id, ns, latest)
            if filter and any(found.metadata.get(k) != v for k, v in filter.items()):
                continue
            yield found

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        thread = self._threads.setdefault(thread_id, {})
        previous = thread.get(ns)
        bare, values = _split(
            self.serde, checkpoint, new_versions, previous.values if previous else None
        )
        thread[ns] = _Latest(
            checkpoint["id"],
            bare,
            self.serde.dumps_typed(get_checkpoint_metadata(config, metadata)),
            configurable.get("checkpoint_id"),
            values,
        )
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        latest = self._threads.get(thread_id, {}).get(ns)
        if latest is None or latest.checkpoint_id != configurable.get("checkpoint_id"):
            return  # writes of a checkpoint already superseded
        for idx, (channel, value) in enumerate(writes):
            key = (task_id, WRITES_IDX_MAP.get(channel, idx))
            if key[1] >= 0 and key in latest.writes:
                continue
            latest.writes[key] = (task_id, channel, self.serde.dumps_typed(value), task_path)

    def delete_thread(self, thread_id: str) -> None:
        self._threads.pop(thread_id, None)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for found in self.list(config, filter=filter, before=before, limit=limit):
            yield found

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)

    def get_next_version(self, current: str | None, channel: None) -> str:
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:032}"


class ToolStarts(AsyncCallbackHandler):
    """Calls ``started(tool_call_id)`` when a tool begins to run (not when it is asked for:
    an approval comes between the two)."""

    def __init__(self, started: Callable[[str], Awaitable[None]]) -> None:
        self._started = started

    async def on_tool_start(
        self, serialized: dict[str, Any], input_str: str, **kwargs: Any
    ) -> None:
        tool_call_id = kwargs.get("tool_call_id")
        if isinstance(tool_call_id, str):
            await self._started(tool_call_id)


def user_message(content: str) -> HumanMessage:
    return HumanMessage(content=content)


def cancelled_result(call: JSON) -> ToolMessage:
    """The result a tool call left without one (its turn was cancelled) gets, so that the
    model's history stays valid."""
    return ToolMessage(
        content="The user cancelled this tool call; it did not run.",
        tool_call_id=str(call.get("id")),
        name=call.get("name"),
        status="error",
    )


def editor_tools(*, approve_writes: bool, approve_commands: bool) -> list[BaseTool]:
    """The client's editor (:mod:`acp_agent.adapters.editor`) as LangChain tools."""
    from langgraph.types import interrupt

    from . import editor
    from .turns import KIND_KEY, PATH_KEY, current_turn

    def approved(description: str) -> None:
        answer = interrupt({"description": description})
        if not isinstance(answer, dict) or answer.get("type") != "approve":
            raise ToolException("The user rejected this tool call; it did not run.")

    async def read_file(path: str, line: int | None = None, limit: int | None = None) -> str:
        """Read a text file of the project (as the editor has it, unsaved changes included):
        path absolute or relative to the project folder, from 1-based line, at most limit
        lines."""
        try:
            return await editor.read_file(current_turn(), path, line, limit)
        except editor.EditorError as exc:
            raise ToolException(str(exc)) from None

    async def write_file(path: str, content: str) -> str:
        """Write the whole content of a text file of the project (created if missing)."""
        if approve_writes:
            approved(f"Write {path}")
        try:
            return await editor.write_file(current_turn(), path, content)
        except editor.EditorError as exc:
            raise ToolException(str(exc)) from None

    async def run_command(command: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Run a shell command (sh -c) in the project folder; its exit status and output."""
        if approve_commands:
            approved(f"Run {command}")
        try:
            return await editor.run_command(current_turn(), command, tool_call_id=tool_call_id)
        except editor.EditorError as exc:
            raise ToolException(str(exc)) from None

    tools: list[BaseTool] = []
    for function, kind, path in (
        (read_file, "read", "path"),
        (write_file, "edit", "path"),
        (run_command, "execute", None),
    ):
        made = tool(function)
        made.handle_tool_error = True
        made.metadata = {KIND_KEY: kind, PATH_KEY: path} if path else {KIND_KEY: kind}
        tools.append(made)
    return tools


#: what langchain-core raises for a model stream that gave no chunk at all
NO_CHUNKS: Final = ("No generation chunks were returned", "No generations found in stream")


class AnswerFailed(Exception):
    """A model message that is no answer (:func:`answer_failure`), by its id."""

    def __init__(self, error: ModelFailed, message_id: str) -> None:
        super().__init__(error.message)
        self.error = error
        self.message_id = message_id


def answer_failure(message: Any) -> ModelFailed | None:
    """The error for a model's complete message that is no answer: its provider package
    saw no finish reason (the stream was cut), or it holds no text, reasoning or call."""
    metadata = getattr(message, "response_metadata", None) or {}
    made_by_provider = isinstance(metadata, Mapping) and "model_provider" in metadata
    blocks = getattr(message, "content_blocks", None) or ()
    said = any(
        b.get("type") in ("text", "reasoning") and (b.get("text") or b.get("reasoning"))
        for b in blocks
    )
    return unfinished_answer(
        finished=not made_by_provider or bool(metadata.get("finish_reason")),
        empty=not said and not getattr(message, "tool_calls", None),
    )


def stream_failure(exc: BaseException) -> ModelFailed | None:
    """``exc`` as the model error it stands for, if langchain-core raised it for a model
    stream that gave nothing readable (a body that is not a stream, no choices)."""
    if isinstance(exc, ValueError) and str(exc).startswith(NO_CHUNKS):
        return ModelFailed("the model's answer held no readable chunk (is its body a stream?)")
    return None
