"""Inbound request dispatch through the ``jsonrpcserver`` package (opt-in).

The design card names jsonrpcserver for the step that turns an inbound request into
a response. This module adapts a :class:`~acp_agent.connection.MethodTable` to it:
the connection has already framed, decoded and classified the message (responses to
our own calls never get here), so jsonrpcserver receives the request object as is,
with its per-request jsonschema validation skipped, and calls our handler through
its ``Methods`` mapping. Handler exceptions are handed back to the connection's one
error boundary unchanged instead of being flattened by jsonrpcserver.

It is not the default: importing jsonrpcserver imports jsonschema (~0.2 s on the
reference machine), which alone exceeds the start-up budget; see README
"Dispatch". Select it with ``--dispatcher jsonrpcserver``.

Only ``jsonrpcserver.async_dispatcher.dispatch_request`` is used, not
``async_dispatch``: the latter gathers with ``asyncio.gather`` and so cannot run on
trio.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, cast

from .connection import MethodTable, NativeDispatcher, RequestContext
from .errors import RequestError


class _Methods(Mapping[str, Any]):
    """Every method name maps to one adapter that calls the native dispatch."""

    def __init__(self, native: NativeDispatcher) -> None:
        self._native = native

    def __getitem__(self, name: str) -> Any:
        native = self._native

        async def adapter(ctx: RequestContext, /, *args: Any, **kwargs: Any) -> Any:
            from jsonrpcserver import Error, Success

            params: Any = list(args) if args else kwargs
            try:
                return Success(await native.dispatch(name, params, ctx))
            except RequestError as exc:
                return Error(exc.code, exc.message, exc.data)
            except Exception as exc:  # handed back to the connection's error boundary
                ctx.state["failure"] = exc
                return Error(-32603, "Internal error")

        return adapter

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


class JsonRpcServerDispatcher:
    """A :class:`~acp_agent.connection.Dispatcher` backed by jsonrpcserver."""

    def __init__(self, table: MethodTable) -> None:
        from jsonrpcserver import async_dispatcher  # noqa: F401 - imported for its cost here

        self._methods = _Methods(NativeDispatcher(table))

    async def dispatch(self, method: str, params: Any, ctx: RequestContext) -> Any:
        from jsonrpcserver.async_dispatcher import dispatch_request
        from jsonrpcserver.request import Request as RpcRequest
        from oslash.either import Left

        request = RpcRequest(method, params if params is not None else [], ctx.id)
        _, result = await dispatch_request(cast(Any, self._methods), ctx, request)
        failure = ctx.state.pop("failure", None)
        if failure is not None:
            raise failure
        if isinstance(result, Left):
            err = result._error
            data = None if type(err.data).__name__ == "_NoData" else err.data
            raise RequestError(err.message, data, code=err.code)
        return result._value.result
