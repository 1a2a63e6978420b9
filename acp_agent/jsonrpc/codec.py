"""JSON text <-> JSON-RPC messages, with orjson.

This module owns turning one framed line into messages (:func:`decode`) and
messages into newline-terminated frames (the ``encode_*`` functions). It never
raises on peer input: unreadable bytes become ``Invalid`` values to answer.

It deliberately knows nothing of framing (see ``framing``), of which messages
are expected (see ``pending``) or of ACP. Values the caller passes are encoded
as they are; a ``default`` hook lets a higher layer encode its own types (for
example pydantic models) without this module importing them.

Batches: JSON-RPC 2.0 batches are accepted on input and each element is handled
and answered on its own line (no batch response array is ever written). ACP
peers do not send batches; this keeps one reply path for every message.

Non-finite floats: orjson writes ``NaN`` and ``Infinity`` as ``null`` (JSON has
no spelling for them) and rejects them on input.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

import orjson

from acp_agent.errors import INVALID_REQUEST, PARSE_ERROR

from .messages import Invalid, Message, RequestId, classify, sniff_id

__all__ = [
    "MISSING",
    "Default",
    "decode",
    "encode",
    "encode_error",
    "encode_notification",
    "encode_request",
    "encode_result",
    "notification_json_parts",
]

Default = Callable[[Any], Any]
"""A hook called for values orjson cannot encode natively; returns something it can."""

_OPTIONS: Final = orjson.OPT_APPEND_NEWLINE


class _Missing:
    """The type of :data:`MISSING`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
"""Marks an argument that was not given (``None`` would mean JSON ``null``)."""

_PARSE_ERROR: Final = Invalid(None, PARSE_ERROR, "Parse error")
_SNIFF: Final = 1024  # bytes of an unreadable line searched for its request id
_EMPTY_BATCH: Final = Invalid(None, INVALID_REQUEST, "Invalid request: empty batch")


def decode(line: bytes) -> list[Message | Invalid]:
    """Decode one line into the messages it holds (several only for a batch).

    Invalid JSON or UTF-8 gives ``[Invalid(None, -32700, "Parse error")]``; an
    empty batch or a value that is not an object gives a ``-32600`` ``Invalid``.
    """
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return [_parse_error(line)]
    if isinstance(obj, list):
        if not obj:
            return [_EMPTY_BATCH]
        return [classify(item) for item in obj]
    return [classify(obj)]


def _parse_error(line: bytes) -> Invalid:
    """A line orjson cannot read (bad JSON, or valid JSON past orjson's limits: ``1e999``,
    integers over 64 bits, lone surrogates, deep nesting). A request whose id can still
    be read in its head is answered with that id; anything else with id null."""
    head = line[:_SNIFF]
    if b'"method"' not in head:  # not a request: never answer a response of the peer's
        return _PARSE_ERROR
    try:
        json.loads(line)  # the slow parser, on this rare path: is it valid JSON at all?
    except RecursionError:
        pass  # valid as far as anyone can tell; nested too deep to read
    except ValueError:
        return _PARSE_ERROR  # not JSON: its id cannot be trusted
    request_id = sniff_id(head)
    return _PARSE_ERROR if request_id is None else Invalid(request_id, PARSE_ERROR, "Parse error")


def encode(obj: Any, *, default: Default | None = None) -> bytes:
    """Encode any JSON value as one frame (with its trailing ``b"\\n"``).

    Raises ``TypeError`` naming the problem when ``obj`` holds a value that
    neither orjson nor ``default`` can encode.
    """
    try:
        return orjson.dumps(obj, default=default, option=_OPTIONS)
    except orjson.JSONEncodeError as exc:
        raise TypeError(f"cannot encode a JSON-RPC frame: {exc}") from exc


def encode_request(
    id: int | str, method: str, params: Any = None, *, default: Default | None = None
) -> bytes:
    """A request frame; ``params`` is left out when ``None``."""
    if params is None:
        return encode({"jsonrpc": "2.0", "id": id, "method": method}, default=default)
    return encode({"jsonrpc": "2.0", "id": id, "method": method, "params": params}, default=default)


def encode_notification(
    method: str, params: Any = None, *, default: Default | None = None
) -> bytes:
    """A notification frame; ``params`` is left out when ``None``."""
    if params is None:
        return encode({"jsonrpc": "2.0", "method": method}, default=default)
    return encode({"jsonrpc": "2.0", "method": method, "params": params}, default=default)


def encode_notification_json(method: str, params_json: bytes) -> bytes:
    """A notification frame around ``params_json``, params already encoded as JSON.

    For params whose parts were encoded already for another purpose (a history entry):
    they are spliced in, not decoded and encoded again.
    """
    parts = _PARTS.get(method)
    if parts is None:
        parts = notification_json_parts(method)
    return b"".join((parts[0], params_json, parts[1]))


def notification_json_parts(method: str) -> tuple[bytes, bytes]:
    """What goes before and after the params in :func:`encode_notification_json`'s frame."""
    return b'{"jsonrpc":"2.0","method":' + orjson.dumps(method) + b',"params":', b"}\n"


#: the parts for the notification sent most (every streamed update), made once
_PARTS: Final = {"session/update": notification_json_parts("session/update")}


def encode_result(id: RequestId, result: Any, *, default: Default | None = None) -> bytes:
    """A success response frame (``result`` is always written, ``null`` included)."""
    return encode({"jsonrpc": "2.0", "id": id, "result": result}, default=default)


def encode_error(
    id: RequestId,
    code: int,
    message: str,
    data: Any = MISSING,
    *,
    default: Default | None = None,
) -> bytes:
    """An error response frame; ``data`` is written only when given (``None`` as ``null``)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not MISSING:
        error["data"] = data
    return encode({"jsonrpc": "2.0", "id": id, "error": error}, default=default)
