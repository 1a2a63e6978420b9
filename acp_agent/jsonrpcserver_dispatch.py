"""Inbound request dispatch through the ``jsonrpcserver`` package (opt-in extra).

The design card names jsonrpcserver for the step that turns an inbound request into
a response. This module adapts a :class:`~acp_agent.connection.MethodTable` to it:
the connection has already framed, decoded and classified the message (responses to
our own calls never get here), so jsonrpcserver receives the request object as is,
with its jsonschema validation skipped, and routes it through its ``Methods``
mapping. It owns only that adaptation, not the handlers and not the error boundary.

Only jsonrpcserver's public API is used: the synchronous ``dispatch_to_serializable``
with a deserializer that hands over the already decoded request. Its asynchronous
twin gathers with ``asyncio.gather`` and so cannot run on trio; instead the routed
method records which call to make and the handler is awaited here, so handler
exceptions reach the connection's one error boundary unchanged rather than being
flattened by jsonrpcserver.

It is not the default: importing jsonrpcserver imports jsonschema, which alone
exceeds the start-up budget; see README "Dispatch". Install the ``jsonrpcserver``
extra and select it with ``--dispatcher jsonrpcserver``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .connection import MethodTable, NativeDispatcher, RequestContext
from .errors import RequestError


class _Methods(Mapping[str, Any]):
    """Every method name maps to one routing step that records the name to call."""

    def __init__(self) -> None:
        self.routed: list[str] = []

    def __getitem__(self, name: str) -> Any:
        from jsonrpcserver import Success

        def routed(ctx: RequestContext, /, *args: Any, **kwargs: Any) -> Any:
            self.routed.append(name)
            return Success(None)

        return routed

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


class JsonRpcServerDispatcher:
    """A :class:`~acp_agent.connection.Dispatcher` backed by jsonrpcserver."""

    def __init__(self, table: MethodTable) -> None:
        import jsonrpcserver  # noqa: F401 - imported here for its cost, not per request

        self._native = NativeDispatcher(table)

    async def dispatch(self, method: str, params: Any, ctx: RequestContext) -> Any:
        from jsonrpcserver import dispatch_to_serializable

        request: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": ctx.id}
        if params is not None:
            request["params"] = params
        methods = _Methods()  # one per request: requests run concurrently
        response = dispatch_to_serializable(
            "",
            methods=methods,
            context=ctx,
            deserializer=lambda _text: request,
            validator=lambda deserialized: deserialized,
        )
        routed = methods.routed[0] if methods.routed else None
        if isinstance(response, dict) and "error" in response:
            err = response["error"]
            raise RequestError(err["message"], err.get("data"), code=err["code"])
        if routed is None:  # jsonrpcserver neither routed it nor answered an error
            raise RuntimeError(f"jsonrpcserver did not route {method!r}")
        return await self._native.dispatch(routed, params, ctx)
