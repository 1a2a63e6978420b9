"""JSON-RPC 2.0 message types and the rules that sort a decoded frame into one.

This module owns the envelope: what makes a JSON value a request, a
notification, a response or an error response, and which frames are invalid
(and with which id and code they must be answered).

It deliberately knows nothing of bytes, JSON text, ACP methods or parameter
shapes: ``params``, ``result`` and ``error`` are kept as the raw JSON values the
peer sent, for a higher layer to validate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from acp_agent.errors import INVALID_REQUEST

__all__ = [
    "ErrorResponse",
    "Invalid",
    "Message",
    "Notification",
    "Request",
    "RequestId",
    "Response",
    "classify",
    "is_request_id",
]

RequestId = int | str | None
"""A JSON-RPC id: an integer, a string or null (never a bool, never a float)."""

Params = dict[str, Any] | list[Any] | None


@dataclass(frozen=True, slots=True)
class Request:
    """A call that expects exactly one response carrying ``id``."""

    id: RequestId
    method: str
    params: Params = None


@dataclass(frozen=True, slots=True)
class Notification:
    """A call with no ``id`` member: it is never answered, not even with an error."""

    method: str
    params: Params = None


@dataclass(frozen=True, slots=True)
class Response:
    """A successful answer to one of our requests."""

    id: RequestId
    result: Any


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """An error answer to one of our requests (``id`` is null when the peer could not read it).

    ``error`` is the raw ``error`` member, normally an object with ``code`` and
    ``message``; a malformed one is kept as sent
    (:meth:`acp_agent.errors.RequestError.from_wire` copes with it).
    """

    id: RequestId
    error: Any


@dataclass(frozen=True, slots=True)
class Invalid:
    """A frame that is not a valid JSON-RPC message.

    When ``answerable`` is true it must be answered with an error response
    carrying ``id`` (``None`` when no usable id was found), ``code`` and
    ``message``. ``answerable`` is false for a frame that is recognisably a
    notification (a string ``method`` and no ``id`` member) with bad ``params``:
    a notification is never answered, so the caller stays silent (and may log).
    """

    id: RequestId
    code: int
    message: str
    answerable: bool = True


Message = Request | Notification | Response | ErrorResponse


def is_request_id(value: object) -> bool:
    """True for a valid JSON-RPC id: ``int`` (not ``bool``), ``str`` or ``None``."""
    return (
        value is None
        or isinstance(value, str)
        or (isinstance(value, int) and not isinstance(value, bool))
    )


def _invalid(reason: str, id: RequestId = None, *, answerable: bool = True) -> Invalid:
    return Invalid(id, INVALID_REQUEST, f"Invalid request: {reason}", answerable)


def classify(obj: object) -> Message | Invalid:
    """Sort one decoded JSON value into a message, or say why it is invalid."""
    if not isinstance(obj, dict):
        return _invalid("a message must be a JSON object")
    has_id = "id" in obj
    raw_id = obj.get("id")
    # is_request_id, inlined (every message): int and str are the common ids
    id_ok = type(raw_id) is int or type(raw_id) is str or is_request_id(raw_id)
    id: RequestId = raw_id if id_ok else None
    if obj.get("jsonrpc") != "2.0":
        return _invalid('"jsonrpc" must be "2.0"', id)
    if "method" in obj:
        method = obj["method"]
        if not isinstance(method, str):
            return _invalid('"method" must be a string', id)
        if has_id and not id_ok:
            return _invalid('"id" must be an integer, a string or null')
        params = obj.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            return _invalid('"params" must be an object, an array or null', id, answerable=has_id)
        if has_id:
            return Request(id, method, params)
        return Notification(method, params)
    if has_id:
        has_result = "result" in obj
        has_error = "error" in obj
        if has_result != has_error:
            if not id_ok:
                return _invalid('"id" must be an integer, a string or null')
            if has_result:
                return Response(id, obj["result"])
            return ErrorResponse(id, obj["error"])
        return _invalid('a response needs exactly one of "result" and "error"', id)
    return _invalid('a message needs a "method" or an "id"')


_WS = b" \t\r\n"


def sniff_id(head: bytes) -> RequestId | None:
    """The top-level ``"id"`` of a JSON-RPC object from its first bytes, if it is there.

    Used to answer a request whose line was too long to read: the id is found by a
    small scan that tracks strings and nesting depth, so an ``"id"`` inside ``params``
    is never taken for the request's. Returns None when no complete top-level id
    (an int or a string) appears in ``head``.
    """
    depth = 0
    i = 0
    n = len(head)
    expect_key = False
    while i < n:
        c = head[i]
        if c == 0x22:  # a string: a key if we are at depth 1 and expect one
            end = i + 1
            while end < n and head[end] != 0x22:
                end += 2 if head[end] == 0x5C else 1
            if end >= n:
                return None
            token = head[i : end + 1]
            i = end + 1
            if depth == 1 and expect_key:
                expect_key = False
                j = i
                while j < n and head[j] in _WS:
                    j += 1
                if j >= n or head[j] != 0x3A:  # ':'
                    continue
                if token == b'"id"':
                    return _id_value(head[j + 1 :])
            continue
        if c in b"{[":
            depth += 1
            expect_key = c == 0x7B and depth == 1
        elif c in b"}]":
            depth -= 1
        elif c == 0x2C and depth == 1:  # ','
            expect_key = True
        i += 1
    return None


def _id_value(rest: bytes) -> RequestId | None:
    rest = rest.lstrip(_WS)
    if rest.startswith(b'"'):
        end = 1
        while end < len(rest) and rest[end] != 0x22:
            end += 2 if rest[end] == 0x5C else 1
        if end >= len(rest):
            return None
        token = rest[: end + 1]
    else:
        end = 0
        while end < len(rest) and rest[end] in b"-+.eE0123456789":
            end += 1
        if end == len(rest):  # the number may go on past the head
            return None
        token = rest[:end]
    try:
        value = orjson.loads(token)
    except orjson.JSONDecodeError:
        return None
    return value if is_request_id(value) and value is not None else None
