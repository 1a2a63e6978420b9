"""Configuration of the LLM agent: :class:`LlmConfig`, its command-line flags and env vars.

This module owns where every setting comes from (flag > environment variable >
default) and the API key's handling: read from ``ACP_AGENT_API_KEY``,
``OPENAI_API_KEY``, a key file or the one ``acp-agent-kit login`` stored, held in a
:class:`Secret` whose ``repr`` and ``str`` never show it, and never logged.

It does not talk HTTP and does not know ACP.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"

#: the file, in the config directory, where ``acp-agent-kit login`` keeps the API key
KEY_FILE_NAME: Final = "api-key"

#: every ``args`` attribute :func:`config_from_args` reads (all optional: a missing
#: attribute or ``None`` falls back to the environment, then to the default)
ARG_NAMES: Final = (
    "model",
    "base_url",
    "api_key_file",
    "max_turn_requests",
    "request_timeout",
    "retries",
    "context_window",
    "max_tokens",
    "temperature",
    "system_prompt",
    "command_timeout",
    "model_headers",
)


#: hosted endpoints that refuse every request without an API key; a local server (Ollama,
#: vLLM, llama.cpp, LM Studio) usually needs none, and other hosts are not guessed at
KEYED_HOSTS: Final = frozenset(
    {
        "api.openai.com",
        "openrouter.ai",
        "api.anthropic.com",
        "api.groq.com",
        "api.mistral.ai",
        "api.deepseek.com",
        "api.together.xyz",
        "api.fireworks.ai",
        "generativelanguage.googleapis.com",
    }
)


class ConfigError(ValueError):
    """The LLM agent's configuration is incomplete or invalid (a one-line message)."""


class Secret:
    """A string that does not show itself in reprs, logs or tracebacks."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class LlmConfig:
    """Everything the LLM agent needs to reach its model and run its tools."""

    model: str
    base_url: str = DEFAULT_BASE_URL
    api_key: Secret | None = field(default=None, repr=False)
    #: model requests allowed in one prompt turn (the turn ends ``max_turn_requests``)
    max_turn_requests: int = 50
    #: seconds without a byte from the endpoint before a request fails
    request_timeout: float = 120.0
    connect_timeout: float = 10.0
    #: retries of a request that got 429, 5xx, a timeout or no connection
    retries: int = 3
    retry_base_delay: float = 1.0
    max_retry_delay: float = 60.0
    #: the model's context window in tokens; ``usage_update`` is only sent when known
    context_window: int | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    system_prompt: str | None = None
    #: seconds a ``run_command`` may run before it is killed
    command_timeout: float = 120.0
    #: characters of one tool result given to the model
    max_tool_output: int = 50_000
    #: seconds an MCP server gets to start and list its tools
    mcp_connect_timeout: float = 30.0
    #: extra HTTP headers sent to the model endpoint (e.g. an organisation id)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def chat_url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"


class _Tolerant:
    """An argument group that skips flags whose option strings the parser already has."""

    def __init__(self, group: Any) -> None:
        self._group = group

    def add_argument(self, *flags: str, **kwargs: Any) -> None:
        with contextlib.suppress(argparse.ArgumentError):  # already defined by the caller
            self._group.add_argument(*flags, **kwargs)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the LLM agent's flags (see :data:`ARG_NAMES` for their ``dest`` names).

    A flag the parser already has (e.g. the CLI's own ``--model``) is left as it is.
    """
    real = parser.add_argument_group("model endpoint (OpenAI-compatible chat completions)")
    group = _Tolerant(real)
    group.add_argument("--model", default=None, help="model name (env ACP_AGENT_MODEL)")
    group.add_argument(
        "--base-url",
        default=None,
        help=f"endpoint base URL, up to /v1 (env ACP_AGENT_BASE_URL; default {DEFAULT_BASE_URL})",
    )
    group.add_argument(
        "--api-key-file",
        default=None,
        help="file holding the API key (env ACP_AGENT_API_KEY_FILE); or set "
        "ACP_AGENT_API_KEY / OPENAI_API_KEY",
    )
    group.add_argument(
        "--max-turn-requests",
        type=int,
        default=None,
        help="model requests per prompt turn (env ACP_AGENT_MAX_TURN_REQUESTS; default 50)",
    )
    group.add_argument(
        "--request-timeout",
        type=float,
        default=None,
        help="seconds of silence before a model request fails "
        "(env ACP_AGENT_REQUEST_TIMEOUT; default 120)",
    )
    group.add_argument(
        "--retries",
        type=int,
        default=None,
        help="retries on 429/5xx/network errors (env ACP_AGENT_RETRIES; default 3)",
    )
    group.add_argument(
        "--context-window",
        type=int,
        default=None,
        help="context window in tokens, enables usage_update (env ACP_AGENT_CONTEXT_WINDOW)",
    )
    group.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="max_tokens per model response (env ACP_AGENT_MAX_TOKENS)",
    )
    group.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="sampling temperature (env ACP_AGENT_TEMPERATURE)",
    )
    group.add_argument(
        "--system-prompt",
        default=None,
        help="replace the built-in system prompt (env ACP_AGENT_SYSTEM_PROMPT)",
    )
    group.add_argument(
        "--command-timeout",
        type=float,
        default=None,
        help="seconds a run_command tool may run (env ACP_AGENT_COMMAND_TIMEOUT; default 120)",
    )
    group.add_argument(
        "--model-header",
        dest="model_headers",
        action="append",
        default=None,
        metavar="NAME=VALUE",
        help="extra HTTP header for the model endpoint (repeatable)",
    )


def _pick(args: Any, name: str, env: Mapping[str, str], var: str) -> Any:
    value = getattr(args, name, None) if args is not None else None
    if value is not None:
        return value
    raw = env.get(var)
    return raw if raw not in (None, "") else None


def _number(value: Any, kind: type[int] | type[float], what: str, *, minimum: float) -> Any:
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be a number, got {str(value)[:40]!r}") from None
    if number < minimum:
        raise ConfigError(f"{what} must be at least {minimum:g}")
    return number


def read_api_key(path: str) -> Secret:
    """The first line of a key file, stripped."""
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as fh:
            key = fh.readline().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the API key file {path!r}: {exc.strerror}") from None
    if not key:
        raise ConfigError(f"the API key file {path!r} is empty")
    return Secret(key)


def key_path() -> Path:
    """Where ``acp-agent-kit login`` keeps the API key (the user's config directory)."""
    import platformdirs

    return Path(platformdirs.user_config_dir("acp-agent")) / KEY_FILE_NAME


def stored_key() -> Secret | None:
    """The key ``login`` stored, or None; refused (like ssh's keys) when others can read it."""
    path = key_path()
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if mode & 0o077:
        raise ConfigError(f"{path} is readable by others: `chmod 600 {path}` or log in again")
    return read_api_key(str(path))


def _headers(values: Any) -> dict[str, str]:
    headers: dict[str, str] = {}
    if values is None:
        return headers
    items = values.split(",") if isinstance(values, str) else list(values)
    for item in items:
        name, sep, value = str(item).partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"a header must look like NAME=VALUE, got {str(item)[:40]!r}")
        headers[name.strip()] = value.strip()
    return headers


def config_from_args(
    args: argparse.Namespace | None = None,
    env: Mapping[str, str] | None = None,
    *,
    require_key: bool = True,
) -> LlmConfig:
    """Build the configuration: flags first, then ``ACP_AGENT_*`` variables, then defaults.

    The API key comes from a key file, the environment, or the one ``login`` stored.
    A hosted endpoint without one is a :class:`ConfigError` when ``require_key`` (else the
    agent asks its client to log in)."""
    env = os.environ if env is None else env
    model = _pick(args, "model", env, "ACP_AGENT_MODEL")
    if not model:
        raise ConfigError("no model configured: pass --model or set ACP_AGENT_MODEL")
    base_url = (
        _pick(args, "base_url", env, "ACP_AGENT_BASE_URL")
        or env.get("OPENAI_BASE_URL")
        or DEFAULT_BASE_URL
    )
    if not str(base_url).startswith(("http://", "https://")):
        raise ConfigError(f"the base URL must start with http:// or https://, got {base_url!r}")
    key_file = _pick(args, "api_key_file", env, "ACP_AGENT_API_KEY_FILE")
    api_key: Secret | None
    if key_file:
        api_key = read_api_key(str(key_file))
    else:
        raw_key = env.get("ACP_AGENT_API_KEY") or env.get("OPENAI_API_KEY")
        api_key = Secret(raw_key.strip()) if raw_key and raw_key.strip() else stored_key()
    options: dict[str, Any] = {}
    numeric: list[tuple[str, str, type[int] | type[float], float]] = [
        ("max_turn_requests", "ACP_AGENT_MAX_TURN_REQUESTS", int, 1),
        ("request_timeout", "ACP_AGENT_REQUEST_TIMEOUT", float, 0.001),
        ("retries", "ACP_AGENT_RETRIES", int, 0),
        ("context_window", "ACP_AGENT_CONTEXT_WINDOW", int, 1),
        ("max_tokens", "ACP_AGENT_MAX_TOKENS", int, 1),
        ("temperature", "ACP_AGENT_TEMPERATURE", float, 0),
        ("command_timeout", "ACP_AGENT_COMMAND_TIMEOUT", float, 0.001),
    ]
    for name, var, kind, minimum in numeric:
        value = _pick(args, name, env, var)
        if value is not None:
            options[name] = _number(value, kind, name.replace("_", "-"), minimum=minimum)
    system_prompt = _pick(args, "system_prompt", env, "ACP_AGENT_SYSTEM_PROMPT")
    if system_prompt:
        options["system_prompt"] = str(system_prompt)
    headers = _headers(_pick(args, "model_headers", env, "ACP_AGENT_MODEL_HEADERS"))
    host = urllib.parse.urlsplit(str(base_url)).hostname or ""
    if require_key and api_key is None and host in KEYED_HOSTS:
        raise ConfigError(
            f"no API key for {host}: run `acp-agent-kit login`, set ACP_AGENT_API_KEY "
            "(or OPENAI_API_KEY) or pass --api-key-file"
        )
    return LlmConfig(
        model=str(model),
        base_url=str(base_url),
        api_key=api_key,
        headers=headers,
        **options,
    )
