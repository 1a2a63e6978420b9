"""Before serving: does the model endpoint answer, take the key, and list the model?

:func:`endpoint_problem` asks ``GET <base_url>/models`` once, with a short timeout, and
turns what a person can fix into one line: an endpoint that cannot be reached, a key it
refuses, a model it does not list. An endpoint without ``/models`` (404, or an answer
that is not a model list) is given the benefit of the doubt.

It owns this check only; serving requests is :mod:`.backend`'s.
"""

from __future__ import annotations

from typing import Any, Final

import httpx

from .config import LlmConfig

#: seconds the check waits for the endpoint, in all
CHECK_TIMEOUT: Final = 5.0
#: model names quoted when the one asked for is not listed
SHOWN: Final = 8


def endpoint_problem(config: LlmConfig, *, timeout: float = CHECK_TIMEOUT) -> str | None:
    """Why the endpoint cannot serve ``config.model``, in one line, or None."""
    url = config.base_url.rstrip("/") + "/models"
    headers = dict(config.headers)
    if config.api_key is not None:
        headers["Authorization"] = f"Bearer {config.api_key.reveal()}"
    try:
        response = httpx.get(url, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        return f"the model endpoint {config.base_url} does not answer: {_reason(exc)}"
    if response.status_code in (401, 403):
        given = "the API key" if config.api_key is not None else "requests without an API key"
        return f"the model endpoint {config.base_url} refused {given} (HTTP {response.status_code})"
    if response.status_code != 200:
        return None  # no model list here: nothing more to check
    listed = _model_ids(response)
    if listed and config.model not in listed:
        shown = ", ".join(listed[:SHOWN]) + (", ..." if len(listed) > SHOWN else "")
        return f"the model endpoint {config.base_url} has no model {config.model!r} ({shown})"
    return None


def _model_ids(response: httpx.Response) -> list[str]:
    try:
        body: Any = response.json()
    except ValueError:
        return []
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return []
    return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]


def _reason(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "no answer in time"
    cause: BaseException = exc
    while cause.__cause__ is not None or cause.__context__ is not None:
        cause = cause.__cause__ or cause.__context__  # type: ignore[assignment]
    text = str(cause) or str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]
