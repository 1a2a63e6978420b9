"""Layer 1: sans-IO JSON-RPC 2.0 over newline-delimited JSON.

This package owns the protocol core with no I/O: line framing with a length cap
(``framing``), the message types and classification rules (``messages``),
orjson encode/decode (``codec``), id allocation with pending bookkeeping
(``pending``) and, on top of those, one end of a connection as plain state
(``peer``). Feed it bytes, get events; ask it to send, get bytes.

It deliberately imports no anyio, no pydantic and nothing of ACP: reading and
writing, waiting for responses and method semantics live in higher layers.
"""

from __future__ import annotations

from .codec import (
    MISSING,
    Default,
    decode,
    encode,
    encode_error,
    encode_notification,
    encode_notification_json,
    encode_request,
    encode_result,
    notification_json_parts,
)
from .framing import DEFAULT_MAX_LINE, LineBuffer
from .messages import (
    ErrorResponse,
    Invalid,
    Message,
    Notification,
    Request,
    RequestId,
    Response,
    classify,
    is_request_id,
    sniff_id,
)
from .peer import CANCEL_REQUEST, CancelRequested, Event, Incoming, Outcome, Peer, Waiter
from .pending import PendingCalls

__all__ = [
    "CANCEL_REQUEST",
    "DEFAULT_MAX_LINE",
    "MISSING",
    "CancelRequested",
    "Default",
    "ErrorResponse",
    "Event",
    "Incoming",
    "Invalid",
    "LineBuffer",
    "Message",
    "Notification",
    "Outcome",
    "Peer",
    "PendingCalls",
    "Request",
    "RequestId",
    "Response",
    "Waiter",
    "classify",
    "decode",
    "encode",
    "encode_error",
    "encode_notification",
    "encode_notification_json",
    "encode_request",
    "encode_result",
    "is_request_id",
    "notification_json_parts",
    "sniff_id",
]
