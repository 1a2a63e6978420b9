"""The exception tree of acp-agent and every JSON-RPC / ACP error code.

This module owns the names of failures and the wire codes they map to. It knows
nothing else of the package (layer 0): no I/O, no pydantic, no anyio.

Errors have a direction. ``LocalProtocolError`` is *our* bug or misuse of the
library (raised in the caller's face, never sent as a peer's fault);
``RemoteProtocolError`` is bad input from the peer. ``RequestError`` is the one
exception that crosses the JSON-RPC boundary: whatever a handler raises is
translated into an error response in exactly one place (the connection), and a
``RequestError`` keeps its code, message and data there::

    AcpError
    ├── LocalProtocolError            our side broke a rule (a bug, or API misuse)
    │   ├── CapabilityError           the client did not advertise what a call needs
    │   ├── IllegalTransition         a state table refused an event
    │   └── PathOutsideRoots          a file path outside the session's root set
    ├── RemoteProtocolError           the peer sent something unreadable
    │   ├── OversizedLine             a line longer than the configured cap
    │   └── ParseError                bytes that are not JSON
    ├── RequestError                  a JSON-RPC error object (either direction)
    │   ├── InvalidParams     -32602
    │   ├── MethodNotFound    -32601
    │   ├── InternalError     -32603
    │   ├── RequestCancelled  -32800
    │   ├── AuthRequired      -32000
    │   ├── ResourceNotFound  -32002
    │   ├── PromptAlreadyActive  -32010 (acp-agent's own; ACP gives it no meaning)
    │   ├── TurnTimeout       -32011 (acp-agent's own)
    │   └── SessionLeased     -32030 (acp-agent's own: another host serves the session)
    ├── ConnectionClosed              the connection ended while a call was waiting
    └── CallTimeout                   an outbound call exceeded its time limit
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
REQUEST_CANCELLED: Final = -32800
AUTH_REQUIRED: Final = -32000
RESOURCE_NOT_FOUND: Final = -32002
# Codes of our own, in the implementation-defined server range (-32000..-32099),
# chosen away from the ones ACP already gives a meaning (-32000, -32002).
PROMPT_ALREADY_ACTIVE: Final = -32010
TURN_TIMEOUT: Final = -32011
LINE_TOO_LONG: Final = -32012
SESSION_LEASED: Final = -32030

DEFAULT_MESSAGES: Final[dict[int, str]] = {
    PARSE_ERROR: "Parse error",
    INVALID_REQUEST: "Invalid request",
    METHOD_NOT_FOUND: "Method not found",
    INVALID_PARAMS: "Invalid params",
    INTERNAL_ERROR: "Internal error",
    REQUEST_CANCELLED: "Request cancelled",
    AUTH_REQUIRED: "Authentication required",
    RESOURCE_NOT_FOUND: "Resource not found",
    PROMPT_ALREADY_ACTIVE: "A prompt is already active for this session",
    TURN_TIMEOUT: "The prompt turn exceeded its time limit",
    LINE_TOO_LONG: "Message exceeds the line length limit",
    SESSION_LEASED: "The session is served by another host",
}


class AcpError(Exception):
    """Root of every exception acp-agent raises on purpose."""


class LocalProtocolError(AcpError):
    """Our side broke a protocol rule: a bug, or a misuse of the library."""


class CapabilityError(LocalProtocolError):
    """An agent -> client call needs a capability the client did not advertise.

    Raised before anything is sent.
    """

    def __init__(self, method: str, capability: str) -> None:
        super().__init__(
            f"the client did not advertise {capability!r}, so {method!r} cannot be called"
        )
        self.method = method
        self.capability = capability


class IllegalTransition(LocalProtocolError):
    """A state table has no transition for (state, event)."""

    def __init__(self, table: str, state: str, event: str) -> None:
        super().__init__(f"{table}: no transition from {state!r} on {event!r}")
        self.table = table
        self.state = state
        self.event = event


class PathOutsideRoots(LocalProtocolError):
    """A file operation targets a path outside the session's root set."""

    def __init__(self, path: str, roots: tuple[str, ...]) -> None:
        super().__init__(f"path {path!r} is outside the session roots {list(roots)!r}")
        self.path = path
        self.roots = roots


class RemoteProtocolError(AcpError):
    """The peer sent bytes we cannot read as a protocol message."""


class ParseError(RemoteProtocolError):
    """A line that is not valid JSON (or not UTF-8)."""


class OversizedLine(RemoteProtocolError):
    """A line longer than the configured cap; its bytes were discarded.

    ``head`` keeps the line's first bytes (at most 1 KiB) so that the request's id can
    still be found and the request answered.
    """

    def __init__(self, size: int, limit: int, head: bytes = b"") -> None:
        super().__init__(f"line of at least {size} bytes exceeds the {limit}-byte limit")
        self.size = size
        self.limit = limit
        self.head = head


class RequestError(AcpError):
    """A JSON-RPC error object. Raise it in a handler to answer with exactly this error.

    ``message`` must be one short line; ``data`` is any JSON value.
    """

    code: int
    default_code: ClassVar[int] = INTERNAL_ERROR

    def __init__(self, message: str | None = None, data: Any = None, *, code: int | None = None):
        self.code = self.default_code if code is None else code
        self.message = message or DEFAULT_MESSAGES.get(self.code, "Server error")
        self.data = data
        super().__init__(self.message)

    def to_wire(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` member for this error."""
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err

    @classmethod
    def from_wire(cls, error: Any) -> RequestError:
        """Build the most specific subclass for an error object received from the peer."""
        if not isinstance(error, dict):
            return InternalError("malformed error object", data=error)
        code = error.get("code")
        message = error.get("message")
        if not isinstance(code, int) or isinstance(code, bool):
            code = INTERNAL_ERROR
        if not isinstance(message, str):
            message = DEFAULT_MESSAGES.get(code, "Server error")
        sub = _BY_CODE.get(code, RequestError)
        return sub(message, error.get("data"), code=code)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code}, message={self.message!r})"


class InvalidParams(RequestError):
    default_code = INVALID_PARAMS


class MethodNotFound(RequestError):
    default_code = METHOD_NOT_FOUND


class InternalError(RequestError):
    default_code = INTERNAL_ERROR


class RequestCancelled(RequestError):
    default_code = REQUEST_CANCELLED


class AuthRequired(RequestError):
    default_code = AUTH_REQUIRED


class ResourceNotFound(RequestError):
    default_code = RESOURCE_NOT_FOUND


class PromptAlreadyActive(RequestError):
    default_code = PROMPT_ALREADY_ACTIVE


class TurnTimeout(RequestError):
    default_code = TURN_TIMEOUT


class SessionLeased(RequestError):
    """Another agent host serves the session (shared stores: PostgreSQL), or another
    connection of this process opened it at the same time.

    ``data`` says why (``reason``) and, for ``"leased"``, after how many milliseconds the
    other host's lease expires if it is not renewed (``retryAfterMs``).
    """

    default_code = SESSION_LEASED

    @classmethod
    def elsewhere(cls, session_id: str, seconds_left: float) -> SessionLeased:
        """Another host holds a live lease on the session."""
        millis = max(0, round(seconds_left * 1000))
        return cls(
            f"session {session_id[:100]!r} is served by another host; retry in "
            f"{millis / 1000:.1f} s, after its lease expires, or once that host closes it",
            data={"sessionId": session_id[:200], "reason": "leased", "retryAfterMs": millis},
        )

    @classmethod
    def in_process(cls, session_id: str, pid: int | None, seconds_left: float) -> SessionLeased:
        """Another process on this machine has the session open (the SQLite store)."""
        millis = max(0, round(seconds_left * 1000))
        holder = "another process" if pid is None else f"process {pid}"
        return cls(
            f"session {session_id[:100]!r} is served by {holder} on this host; retry in "
            f"{millis / 1000:.1f} s, or once that process closes it",
            data={"sessionId": session_id[:200], "reason": "leased", "retryAfterMs": millis},
        )

    @classmethod
    def taken_over(cls, session_id: str) -> SessionLeased:
        """Another connection of this process opened the session while this one did."""
        return cls(
            f"session {session_id[:100]!r} was opened on another connection meanwhile; "
            "load it again to take it over",
            data={"sessionId": session_id[:200], "reason": "takenOver"},
        )

    @classmethod
    def lost(cls, session_id: str) -> SessionLeased:
        """This host's lease on the session was taken over by another host."""
        return cls(
            f"this host lost session {session_id[:100]!r} to another host (its lease expired "
            "and was taken over); nothing more was written here: load the session again",
            data={"sessionId": session_id[:200], "reason": "leaseLost"},
        )


_BY_CODE: dict[int, type[RequestError]] = {
    INVALID_PARAMS: InvalidParams,
    METHOD_NOT_FOUND: MethodNotFound,
    INTERNAL_ERROR: InternalError,
    REQUEST_CANCELLED: RequestCancelled,
    AUTH_REQUIRED: AuthRequired,
    RESOURCE_NOT_FOUND: ResourceNotFound,
    PROMPT_ALREADY_ACTIVE: PromptAlreadyActive,
    TURN_TIMEOUT: TurnTimeout,
    SESSION_LEASED: SessionLeased,
}


class ConnectionClosed(AcpError):
    """The connection ended (EOF, close or shutdown) while a call was waiting on it."""


class CallTimeout(AcpError):
    """An outbound request got no response within its time limit."""

    def __init__(self, method: str, timeout: float) -> None:
        super().__init__(f"{method!r} got no response within {timeout:g} s")
        self.method = method
        self.timeout = timeout
