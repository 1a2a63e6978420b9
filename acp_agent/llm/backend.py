"""The model endpoint: one streamed chat-completions request, with retries.

:class:`ChatBackend` POSTs to ``<base_url>/chat/completions`` with ``stream: true``
through an ``httpx.AsyncClient`` the caller owns (so its connections live exactly as
long as the caller wants), decodes the SSE stream incrementally, hands every text
and reasoning delta to a callback as it arrives and returns the whole
:class:`~acp_agent.llm.stream.ModelResponse`.

Failures cross this boundary once, as :class:`ModelError` (a ``-32603``
:class:`~acp_agent.errors.RequestError` with ``data: {"status", "reason"}`` and a
one-line message a person can act on). 429 (honouring ``Retry-After``), 5xx,
timeouts and unreachable endpoints are retried with exponential backoff before any
byte of the answer was shown; each retry is announced through a callback. A stream
that breaks after it started is never retried (its text was already shown).

Cancellation is never shielded: the response is closed in ``finally`` (the close
itself is shielded and time-bounded), so a cancelled turn drops its connection.

:func:`list_models` asks the endpoint which models it offers (``GET /models``) and,
where it says, their context windows; any failure there is an empty answer.

It does not know ACP sessions or tools.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Final, cast

import anyio
import httpx
import orjson

from ..errors import InternalError
from .config import LlmConfig
from .sse import SseDecoder, SseError
from .stream import ChunkAssembler, Delta, ModelResponse, StreamError

log = logging.getLogger("acp_agent.llm.backend")

ERROR_BODY_LIMIT: Final = 64 * 1024
CLOSE_GRACE: Final = 2.0

DeltaSink = Callable[[Delta], Awaitable[None]]
NoticeSink = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """One model the endpoint lists; ``context_window`` in tokens where it says."""

    id: str
    context_window: int | None = None


# the keys endpoints use for a model's context window in GET /models
_WINDOW_KEYS: Final = ("context_length", "context_window", "max_context_length")
MAX_LISTED: Final = 200


async def list_models(config: LlmConfig, http: httpx.AsyncClient) -> list[ModelInfo]:
    """The models ``GET <base_url>/models`` lists (at most ``MAX_LISTED``); [] on any failure."""
    headers = dict(config.headers)
    if config.api_key is not None:
        headers["Authorization"] = f"Bearer {config.api_key.reveal()}"
    try:
        response = await http.get(config.base_url.rstrip("/") + "/models", headers=headers)
        payload = orjson.loads(response.content) if response.status_code == 200 else None
    except (httpx.HTTPError, orjson.JSONDecodeError):
        return []
    data = payload.get("data") if isinstance(payload, dict) else None
    models: list[ModelInfo] = []
    for item in data if isinstance(data, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            continue
        window = next((item[k] for k in _WINDOW_KEYS if isinstance(item.get(k), int)), None)
        models.append(ModelInfo(item["id"], window if window and window > 0 else None))
        if len(models) >= MAX_LISTED:
            break
    return models


class ModelError(InternalError):
    """The model endpoint failed; ``data`` says ``status`` (HTTP or null) and ``reason``."""

    def __init__(self, message: str, *, status: int | None, reason: str, **extra: Any) -> None:
        super().__init__(message, data={"status": status, "reason": reason, **extra})
        self.status = status
        self.reason = reason


class _Retry(Exception):
    """A failure worth another attempt; ``error`` is what to raise when out of attempts."""

    def __init__(self, error: ModelError, retry_after: float | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.retry_after = retry_after


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if seconds == seconds else None  # NaN guard


def _generator(response: httpx.Response) -> AsyncGenerator[bytes, None]:
    """``aiter_bytes`` is an async generator; typed as one so it can be ``aclosing``-ed."""
    return cast("AsyncGenerator[bytes, None]", response.aiter_bytes())


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class ChatBackend:
    """Streams chat completions from one OpenAI-compatible endpoint."""

    def __init__(self, config: LlmConfig, http: httpx.AsyncClient) -> None:
        self.config = config
        self.http = http

    @staticmethod
    def timeout(config: LlmConfig) -> httpx.Timeout:
        return httpx.Timeout(
            config.request_timeout,
            connect=min(config.connect_timeout, config.request_timeout),
        )

    def request_body(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": list(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = list(tools)
        if self.config.max_tokens is not None:
            body["max_tokens"] = self.config.max_tokens
        if self.config.temperature is not None:
            body["temperature"] = self.config.temperature
        return body

    def _headers(self) -> dict[str, str]:
        headers = {
            "Accept": "text/event-stream",
            "Content-Type": "application/json",
            **self.config.headers,
        }
        if self.config.api_key is not None:
            headers["Authorization"] = f"Bearer {self.config.api_key.reveal()}"
        return headers

    def _scrub(self, text: str) -> str:
        key = self.config.api_key.reveal() if self.config.api_key is not None else ""
        return text.replace(key, "********") if key else text

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        on_delta: DeltaSink,
        on_retry: NoticeSink,
    ) -> ModelResponse:
        """One model response, retried while nothing of it was shown."""
        body = orjson.dumps(self.request_body(messages, tools))
        attempts = self.config.retries + 1
        for attempt in range(1, attempts + 1):
            try:
                return await self._attempt(body, on_delta)
            except _Retry as retry:
                if attempt >= attempts:
                    error = retry.error
                    if attempts > 1:
                        error.message = f"{error.message} (gave up after {attempts} attempts)"
                        error.args = (error.message,)
                    raise error from None
                backoff = self.config.retry_base_delay * 2 ** (attempt - 1)
                delay = backoff if retry.retry_after is None else retry.retry_after
                delay = min(delay, self.config.max_retry_delay)
                log.warning("model request failed (%s); retrying in %.1f s", retry, delay)
                await on_retry(
                    f"{retry.error.message}; retrying in {delay:.1f} s "
                    f"(attempt {attempt + 1} of {attempts})"
                )
                await anyio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _attempt(self, body: bytes, on_delta: DeltaSink) -> ModelResponse:
        url = self.config.chat_url
        request = self.http.build_request("POST", url, content=body, headers=self._headers())
        try:
            response = await self.http.send(request, stream=True)
        except httpx.TimeoutException:
            raise _Retry(
                ModelError(
                    f"The model endpoint {self.config.base_url} did not answer within "
                    f"{self.config.request_timeout:g} s",
                    status=None,
                    reason="timeout",
                )
            ) from None
        except httpx.TransportError as exc:
            raise _Retry(
                ModelError(
                    f"Cannot reach the model endpoint {self.config.base_url}: "
                    f"{_one_line(str(exc) or type(exc).__name__, 200)}",
                    status=None,
                    reason="unreachable",
                )
            ) from None
        try:
            if response.status_code != 200:
                await self._http_error(response)
            content_type = response.headers.get("content-type", "")
            if content_type.startswith("application/json"):
                return await self._json_answer(response, on_delta)
            return await self._read_stream(response, on_delta)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_GRACE):
                await response.aclose()

    async def _read_limited(self, response: httpx.Response) -> bytes:
        """The body's first bytes; the rest is drained (up to a bound), not kept."""
        data = bytearray()
        seen = 0
        try:
            async with aclosing(_generator(response)) as chunks:
                async for chunk in chunks:
                    seen += len(chunk)
                    if len(data) < ERROR_BODY_LIMIT:
                        data += chunk
                    if seen > 16 * ERROR_BODY_LIMIT:
                        break
        except httpx.HTTPError:
            pass  # the status line is what matters; the body is a courtesy
        return bytes(data[:ERROR_BODY_LIMIT])

    def _error_text(self, raw: bytes) -> str:
        try:
            payload = orjson.loads(raw)
        except orjson.JSONDecodeError:
            payload = None
        if isinstance(payload, dict):
            error = payload.get("error", payload)
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                return self._scrub(_one_line(error["message"]))
            if isinstance(error, str):
                return self._scrub(_one_line(error))
        return self._scrub(_one_line(raw.decode("utf-8", "replace"))) or "no details"

    async def _http_error(self, response: httpx.Response) -> None:
        status = response.status_code
        detail = self._error_text(await self._read_limited(response))
        if status == 429:
            raise _Retry(
                ModelError(
                    f"The model endpoint is rate limiting requests (HTTP 429): {detail}",
                    status=status,
                    reason="rate_limited",
                ),
                parse_retry_after(response.headers.get("retry-after")),
            )
        if status >= 500:
            raise _Retry(
                ModelError(
                    f"The model endpoint failed (HTTP {status}): {detail}",
                    status=status,
                    reason="server_error",
                ),
                parse_retry_after(response.headers.get("retry-after")),
            )
        if status in (401, 403):
            raise ModelError(
                f"The model endpoint refused the credentials (HTTP {status}): {detail}. "
                "Check ACP_AGENT_API_KEY / OPENAI_API_KEY or --api-key-file",
                status=status,
                reason="unauthorized",
            )
        raise ModelError(
            f"The model endpoint rejected the request (HTTP {status}): {detail}",
            status=status,
            reason="rejected",
        )

    async def _read_stream(self, response: httpx.Response, on_delta: DeltaSink) -> ModelResponse:
        decoder = SseDecoder()
        assembler = ChunkAssembler()
        trailing = 0
        try:
            async with aclosing(_generator(response)) as chunks:
                async for chunk in chunks:
                    if assembler.done:
                        # Drain the rest of the body (normally nothing) rather than
                        # abandon httpx's nested generators half-way.
                        trailing += len(chunk)
                        if trailing > ERROR_BODY_LIMIT:
                            break
                        continue
                    for event in decoder.feed(chunk):
                        for delta in assembler.feed_data(event.data):
                            await on_delta(delta)
                        if assembler.done:
                            break
        except (StreamError, SseError) as exc:
            reason = exc.reason if isinstance(exc, StreamError) else "malformed_stream"
            raise ModelError(str(exc), status=200, reason=reason) from None
        except httpx.TimeoutException:
            raise ModelError(
                f"The model endpoint stopped sending for {self.config.request_timeout:g} s "
                "in the middle of its answer",
                status=200,
                reason="timeout",
            ) from None
        except httpx.HTTPError as exc:
            raise ModelError(
                "The model stream broke off before it was complete: "
                f"{_one_line(str(exc) or type(exc).__name__, 200)}",
                status=200,
                reason="truncated_stream",
            ) from None
        try:
            return assembler.result()
        except StreamError as exc:
            raise ModelError(str(exc), status=200, reason=exc.reason) from None

    async def _json_answer(self, response: httpx.Response, on_delta: DeltaSink) -> ModelResponse:
        """An endpoint that ignored ``stream: true`` and answered one JSON document."""
        raw = await self._read_limited(response)
        assembler = ChunkAssembler()
        try:
            payload = orjson.loads(raw)
            if not isinstance(payload, dict):
                raise StreamError("The model endpoint answered JSON that is not an object", "x")
            chunk: dict[str, Any] = {"usage": payload.get("usage")}
            choices = []
            for choice in payload.get("choices") or []:
                if isinstance(choice, dict):
                    choices.append(
                        {
                            "index": choice.get("index", 0),
                            "delta": choice.get("message") or {},
                            "finish_reason": choice.get("finish_reason") or "stop",
                        }
                    )
            chunk["choices"] = choices
            for delta in assembler.feed(chunk):
                await on_delta(delta)
            return assembler.result()
        except (orjson.JSONDecodeError, StreamError):
            raise ModelError(
                "The model endpoint answered with JSON that is not a chat completion",
                status=200,
                reason="malformed_response",
            ) from None
