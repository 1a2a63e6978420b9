"""The LLM coding agent: a tool loop between an OpenAI-compatible model and ACP.

:class:`LlmAgent` runs each prompt turn as a loop of model requests. Each request's
conversation is rebuilt from the session history (:mod:`acp_agent.llm.context`), the
answer streams to the client as it arrives (text as ``agent_message_chunk``,
reasoning as ``agent_thought_chunk``), and every tool call the model asks for runs as
a visible ACP tool call (:mod:`acp_agent.llm.tools`, MCP tools through
:mod:`acp_agent.llm.mcp_host`).

The turn has one authoritative end, decided here and nowhere else: the model stops
asking for tools (``end_turn``), runs out of tokens (``length`` -> ``max_tokens``),
refuses (``content_filter`` or a ``refusal`` -> ``refusal``), or the turn reaches
``max_turn_requests`` model requests. Endpoint failures end the turn with the
backend's :class:`~acp_agent.llm.backend.ModelError` (a ``-32603`` error); a
cancelled turn unwinds through the cancellation exception (nothing here shields the
HTTP stream or a running tool) and the library answers ``cancelled``.

Before a request that would outgrow the model's context window, the older turns are
compacted (:mod:`acp_agent.llm.compact`). The model is a session config option of
category ``model``, listing what the endpoint's ``GET /models`` offers (asked once,
when the first session is set up); a context window the endpoint lists there wins
over ``--context-window``. An endpoint that needs a key (one was configured, or it is
a known hosted one) makes the agent advertise the ``api-key`` auth method (the key in
``_meta["api-key"]``, or the configured one); it refuses sessions without a key, and
``logout`` forgets it.

Each turn owns one ``httpx.AsyncClient``: its connections close when the turn ends,
whichever way it ends; its TLS context is the agent's one, made at construction. MCP
server connections outlive turns: they are tasks of the connection's
:meth:`LlmAgent.lifespan`, started when a session is created or loaded and stopped when
it closes (at the latest when the lifespan ends).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar, Final
from urllib.parse import urlsplit

import anyio
import httpx
import orjson

from ..agent import Agent, AuthMethod, ConfigOption, PromptCapabilities, PromptTurn, StopReason
from ..client import ClientCapabilities, SessionClient, text_block, text_content
from ..errors import AuthRequired, ConnectionClosed
from ..session import Session
from .backend import ChatBackend, ModelError, ModelInfo, list_models
from .compact import compact, needs_compaction
from .config import KEYED_HOSTS, LlmConfig, Secret
from .context import FAILED_RESPONSE, META_KEY, build_messages, system_prompt
from .login import LOGIN_METHOD
from .mcp_host import McpHost, McpSessionLink, describe, mcp_available
from .stream import Delta, ModelResponse, TextDelta
from .tool_schemas import BUILTIN_SCHEMAS
from .tools import (
    BUILTINS,
    Invocation,
    ToolFailure,
    Workspace,
    clip,
    describe_error,
)

log = logging.getLogger("acp_agent.llm")

LINK_KEY: Final = "llm.mcp"
REPORTED_KEY: Final = "llm.mcp_reported"
CLOSE_GRACE: Final = 2.0
MODELS_TIMEOUT: Final = 5.0
API_KEY_METHOD: AuthMethod = {
    "id": "api-key",
    "name": "API key",
    "description": 'The model endpoint\'s API key, in _meta["api-key"] of authenticate '
    "(or the one set in ACP_AGENT_API_KEY / OPENAI_API_KEY / --api-key-file)",
}


def needs_key(base_url: str) -> bool:
    """Whether the endpoint is a hosted one known to refuse requests without a key."""
    return (urlsplit(base_url).hostname or "").lower() in KEYED_HOSTS


class LlmAgent(Agent):
    """An ACP agent backed by an OpenAI-compatible chat-completions endpoint."""

    name = "acp-agent-llm"
    title = "acp-agent (LLM)"
    version = "0.1.0"
    prompt_capabilities: ClassVar[PromptCapabilities] = {"embeddedContext": True}
    mcp_http = mcp_available()  # streamable HTTP, when the mcp package is there; no SSE

    def __init__(
        self, config: LlmConfig, *, http_transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.config = config
        self.mcp = McpHost(config.mcp_connect_timeout)
        self._http_transport = http_transport
        #: one TLS context for all requests: a new client's default loads the CA bundle
        self._tls: ssl.SSLContext = httpx.create_ssl_context()
        #: the key requests carry (None after ``logout``)
        self.api_key: Secret | None = config.api_key
        self.needs_key = config.api_key is not None or needs_key(config.base_url)
        #: what GET /models said (None: not asked yet)
        self.models: list[ModelInfo] | None = None

    def __repr__(self) -> str:
        return f"LlmAgent(model={self.config.model!r}, base_url={self.config.base_url!r})"

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Own the MCP server tasks for the life of the connection (they stop at its end)."""
        async with super().lifespan(), self.mcp.running():
            yield

    # ------------------------------------------------------------------ auth

    def auth_methods(self, capabilities: ClientCapabilities) -> Sequence[AuthMethod]:
        # The terminal login is offered to every client that can run it (the server
        # leaves it out for the others), so that an installer can set the agent up.
        return [API_KEY_METHOD, LOGIN_METHOD] if self.needs_key else [LOGIN_METHOD]

    def requires_auth(self) -> bool:
        return self.needs_key and self.api_key is None

    async def authenticate(self, method_id: str, meta: Mapping[str, Any] | None) -> None:
        given = meta.get("api-key") if isinstance(meta, Mapping) else None
        if isinstance(given, str) and given.strip():
            self.api_key = Secret(given.strip())
        elif self.config.api_key is not None:
            self.api_key = self.config.api_key
        else:
            raise AuthRequired(
                'No API key: send it in _meta["api-key"], run `acp-agent-kit login`, '
                "or set ACP_AGENT_API_KEY"
            )

    def supports_logout(self) -> bool:
        return self.needs_key

    async def logout(self) -> None:
        self.api_key = None

    # ------------------------------------------------------------------ models

    def _request_config(self, model: str | None = None) -> LlmConfig:
        return replace(self.config, model=model or self.config.model, api_key=self.api_key)

    async def _list_models(self) -> None:
        if self.models is not None:
            return
        self.models = []
        timeout = min(MODELS_TIMEOUT, self.config.connect_timeout, self.config.request_timeout)
        async with httpx.AsyncClient(
            timeout=timeout, verify=self._tls, transport=self._http_transport
        ) as http:
            self.models = await list_models(self._request_config(), http)

    def context_window(self, model: str) -> int | None:
        """The model's context window: as the endpoint lists it, else as configured."""
        listed = next((m.context_window for m in self.models or () if m.id == model), None)
        return listed or self.config.context_window

    def config_options(self, session: Session) -> Sequence[ConfigOption]:
        names = [self.config.model, *(m.id for m in self.models or () if m.id != self.config.model)]
        return [
            {
                "id": "model",
                "name": "Model",
                "description": f"the model answering in this session, at {self.config.base_url}",
                "type": "select",
                "category": "model",
                "default": self.config.model,
                "options": [{"value": name, "name": name} for name in names],
            }
        ]

    # ------------------------------------------------------------------ sessions

    async def new_session(self, session: Session) -> None:
        await self._list_models()
        await self._open_mcp(session)

    async def load_session(self, session: Session) -> None:
        await self._list_models()
        await self._open_mcp(session)

    async def _open_mcp(self, session: Session) -> None:
        # Connecting starts now, in tasks of the lifespan, while the client sets up;
        # the first prompt turn waits for it and reports failures (updates may not
        # precede the session/new response, so they cannot be reported here).
        if session.mcp_servers:
            session.state[LINK_KEY] = await self.mcp.open_session(
                list(session.mcp_servers), session.cwd
            )

    async def close_session(self, session: Session) -> None:
        link = session.state.pop(LINK_KEY, None)
        if isinstance(link, McpSessionLink):
            await self.mcp.close_session(link)

    async def aclose(self) -> None:
        """Stop every MCP server now (closing sessions and the lifespan's end do it too)."""
        await self.mcp.aclose()

    # ------------------------------------------------------------------ turns

    async def prompt(self, turn: PromptTurn) -> StopReason:
        session, client = turn.session, turn.client
        link = session.state.get(LINK_KEY)
        link = link if isinstance(link, McpSessionLink) else None
        notes: list[str] = []
        if link is not None:
            await self.mcp.wait_ready(link)
            if not session.state.get(REPORTED_KEY):
                session.state[REPORTED_KEY] = True
                for failure in link.failures:
                    await notice(client, failure)
            if link.failures:
                notes.append("Unavailable MCP servers: " + "; ".join(link.failures))
        tools = [*BUILTIN_SCHEMAS]
        if link is not None:
            tools.extend(t.openai_schema() for t in link.tools.values())
        http = httpx.AsyncClient(
            timeout=ChatBackend.timeout(self.config),
            verify=self._tls,
            transport=self._http_transport,
        )
        model = session.config.get("model")
        config = self._request_config(model if isinstance(model, str) else None)
        try:
            loop = _TurnLoop(self, turn, ChatBackend(config, http), tools, link, notes)
            return await loop.run()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_GRACE):
                await http.aclose()


async def notice(client: SessionClient, text: str, *, thought: bool = False) -> None:
    """A message to the person that is not model output (left out of the model's context)."""
    await client.update(
        {
            "sessionUpdate": "agent_thought_chunk" if thought else "agent_message_chunk",
            "content": text_block(text + "\n"),  # each notice a line of its own
            "messageId": f"notice_{secrets.token_hex(6)}",
            "_meta": {META_KEY: {"notice": True}},
        }
    )


class _TurnLoop:
    """One prompt turn's model/tool loop."""

    def __init__(
        self,
        agent: LlmAgent,
        turn: PromptTurn,
        backend: ChatBackend,
        tools: list[dict[str, Any]],
        link: McpSessionLink | None,
        notes: list[str],
    ) -> None:
        self.agent = agent
        self.config = backend.config
        self.window = agent.context_window(backend.config.model)
        self.turn = turn
        self.session = turn.session
        self.client = turn.client
        self.backend = backend
        self.tools = tools
        self.link = link
        self.system = system_prompt(
            self.config.system_prompt, self.session.cwd, self.session.roots, notes
        )
        self.workspace = Workspace(self.session, self.client, self.config)
        self.message_id = ""

    async def run(self) -> StopReason:
        for step in range(1, self.config.max_turn_requests + 1):
            self.message_id = f"{self.turn.turn_id}_m{step}"
            messages = build_messages(self.system, self.session.history.turns)
            if needs_compaction(messages, self.tools, self.window) and await compact(
                self.client, self.backend, self.window or 0, self._on_retry
            ):
                messages = build_messages(self.system, self.session.history.turns)
            try:
                response = await self.backend.complete(
                    messages, self.tools, self._on_delta, self._on_retry
                )
            except ModelError:
                # what streamed of a failed response is not the model's reply
                self.turn.save_state({FAILED_RESPONSE: self.message_id})
                raise
            await self._report_usage(response)
            self._count_usage(response)
            if response.refusal is not None or response.finish_reason == "content_filter":
                if response.refusal:
                    await self.client.message(response.refusal, message_id=self.message_id)
                return "refusal"
            if response.finish_reason == "length":
                return "max_tokens"
            if response.empty:
                raise ModelError(
                    "The model returned an empty response", status=None, reason="empty_response"
                )
            if not response.tool_calls:
                return "end_turn"
            for call in response.tool_calls:
                await self._run_tool(call.name, call.arguments, call.call_id)
        await notice(
            self.client,
            f"Stopped: this turn reached its limit of {self.config.max_turn_requests} "
            "model requests.",
        )
        return "max_turn_requests"

    async def _on_delta(self, delta: Delta) -> None:
        if isinstance(delta, TextDelta):
            await self.client.message(delta.text, message_id=self.message_id)
        else:
            await self.client.thought(delta.text, message_id=self.message_id + "_r")

    async def _on_retry(self, text: str) -> None:
        if self.client.capabilities.notices:  # a retry or a rate limit is not a thought
            await self.client.notice("warning", text)
        else:
            await notice(self.client, text, thought=True)

    def _count_usage(self, response: ModelResponse) -> None:
        """Add the response's tokens to the turn's usage (the prompt result's ``usage``)."""
        if response.usage is None:
            return
        usage = self.turn.usage or {"totalTokens": 0, "inputTokens": 0, "outputTokens": 0}
        usage["inputTokens"] += response.usage.prompt_tokens
        usage["outputTokens"] += response.usage.completion_tokens
        usage["totalTokens"] += response.usage.total_tokens
        self.turn.usage = usage

    async def _report_usage(self, response: ModelResponse) -> None:
        # R-USAGE-2: without a known context window there is no meaningful size.
        if response.usage is not None and self.window:
            await self.client.usage(response.usage.total_tokens, self.window)

    async def _run_tool(self, name: str, arguments: str, call_id: str) -> None:
        args: Any
        problem: str | None = None
        try:
            args = orjson.loads(arguments) if arguments.strip() else {}
        except orjson.JSONDecodeError:
            args, problem = {}, f"the arguments for {name!r} are not valid JSON"
        if not isinstance(args, dict):
            args, problem = {}, f"the arguments for {name!r} must be a JSON object"
        inv = Invocation(
            self.client,
            name=name,
            arguments=arguments,
            args=args,
            message_id=self.message_id,
            call_id=call_id,
        )
        try:
            if problem is not None:
                raise ToolFailure(problem)
            builtin = BUILTINS.get(name)
            if builtin is not None:
                await builtin(inv, self.workspace)
            elif self.link is not None and name in self.link.tools:
                await self._run_mcp(inv, self.link)
            else:
                raise ToolFailure(f"there is no tool named {name!r}")
        except Exception as exc:
            message = describe_error(exc)
            if not isinstance(exc, ToolFailure):
                log.warning("tool %s failed: %s", name, message)
            if inv.handle is None:
                await inv.announce(f"{name or 'unknown tool'}", "other")
            if not inv.finished:
                await inv.fail(f"Error: {message}")
        except BaseException:
            # Cancelled: end the visible tool call (v1 has no "cancelled" status).
            # On EOF the connection may be gone already: nothing left to tell.
            if inv.handle is not None and not inv.finished:
                with (
                    anyio.CancelScope(shield=True),
                    anyio.move_on_after(CLOSE_GRACE),
                    contextlib.suppress(ConnectionClosed),
                ):
                    await inv.fail("The tool call was cancelled.")
            raise

    async def _run_mcp(self, inv: Invocation, link: McpSessionLink) -> None:
        tool = link.tools[inv.name]
        await inv.announce(f"{tool.server}: {tool.tool}", "other")
        if not await inv.permit():
            return
        await inv.start()
        try:
            text, is_error = await self.agent.mcp.call(link, inv.name, inv.args)
        except Exception as exc:
            raise ToolFailure(f"MCP server {tool.server!r} failed: {describe(exc)}") from None
        text = clip(text, self.config.max_tool_output)
        if is_error:
            await inv.fail(text)
        else:
            await inv.succeed(text, content=[text_content(text)])
