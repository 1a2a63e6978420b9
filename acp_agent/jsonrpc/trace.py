"""Debug lines that tell an operator what crossed the wire, one line per message.

At ``DEBUG`` on the ``acp_agent.rpc`` logger: each request answered (method, id,
session, duration, outcome), each notification received, each invalid message, and
each call made to the peer with its outcome. What a message carries (prompts, file
contents) goes to the ``acp_agent.content`` logger, which is off unless enabled
explicitly (``acp-agent --log-content``): sessions hold people's code and words.

It owns the wording of those lines only; it neither reads nor writes messages.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final

import orjson

log = logging.getLogger("acp_agent.rpc")
content_log = logging.getLogger("acp_agent.content")
content_log.setLevel(logging.CRITICAL + 1)  # off until asked for (see enable_content)

CONTENT_LIMIT: Final = 4000  # characters of a message's params shown in a content line


def enable_content() -> None:
    """Log what messages carry (at DEBUG), not only that they went by."""
    content_log.setLevel(logging.DEBUG)


def _session(params: Any) -> str:
    sid = params.get("sessionId") if isinstance(params, dict) else None
    return f" session={sid[:80]}" if isinstance(sid, str) else ""


def _shown(value: Any) -> str:
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= CONTENT_LIMIT else text[:CONTENT_LIMIT] + "..."


def _outcome(ok: bool, value: Any) -> str:
    if ok:
        return "ok"
    if isinstance(value, dict):
        return f"error {value.get('code')} {str(value.get('message'))[:200]!r}"
    return "error"


class Trace:
    """The lines for one connection; made only when ``acp_agent.rpc`` logs DEBUG."""

    __slots__ = ()

    @staticmethod
    def enabled() -> bool:
        return log.isEnabledFor(logging.DEBUG)

    @staticmethod
    def now() -> float:
        return time.perf_counter()

    def request(self, method: str, request_id: Any, params: Any) -> None:
        if content_log.isEnabledFor(logging.DEBUG):
            content_log.debug("request %s id=%r params=%s", method, request_id, _shown(params))

    def answered(
        self, method: str, request_id: Any, params: Any, started: float, outcome: tuple[bool, Any]
    ) -> None:
        ok, value = outcome
        took = (time.perf_counter() - started) * 1000
        log.debug(
            "request %s id=%r%s: %s in %.1f ms",
            method[:100],
            request_id,
            _session(params),
            _outcome(ok, value),
            took,
        )
        if ok and content_log.isEnabledFor(logging.DEBUG):
            content_log.debug("result of %s id=%r: %s", method, request_id, _shown(value))

    def notification(self, method: str, params: Any) -> None:
        log.debug("notification %s%s", method[:100], _session(params))
        if content_log.isEnabledFor(logging.DEBUG):
            content_log.debug("notification %s params=%s", method, _shown(params))

    def invalid(self, request_id: Any, code: int, message: str, answered: bool) -> None:
        log.debug(
            "invalid message (id=%r): %s %s, %s",
            request_id,
            code,
            message,
            "answered" if answered else "ignored",
        )

    def called(
        self, method: str, request_id: int, params: Any, started: float, outcome: str
    ) -> None:
        took = (time.perf_counter() - started) * 1000
        log.debug(
            "call %s id=%d%s: %s in %.1f ms", method, request_id, _session(params), outcome, took
        )
        if content_log.isEnabledFor(logging.DEBUG):
            content_log.debug("call %s id=%d params=%s", method, request_id, _shown(params))
