"""The ACP v1 method table: name -> direction, kind and params / result model names.

The rows are generated (``_method_rows.py``, from the schema's ``meta.json`` and its
``x-method`` markers); this module gives them types and the lookups built on them.
Importing it does not import pydantic: ``params_model`` / ``result_model`` import the
models on first use.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

from ._method_rows import METHOD_ROWS

if TYPE_CHECKING:
    from pydantic import BaseModel

Direction = Literal["client->agent", "agent->client", "both"]
Kind = Literal["request", "notification"]


@dataclass(frozen=True)
class MethodSpec:
    """One ACP method. ``params`` / ``result`` are model class names in ``_generated``."""

    name: str
    direction: Direction
    kind: Kind
    params: str
    result: str | None


METHODS: dict[str, MethodSpec] = {
    name: MethodSpec(name, cast("Direction", direction), cast("Kind", kind), params, result)
    for name, direction, kind, params, result in METHOD_ROWS
}

AGENT_METHODS: frozenset[str] = frozenset(
    name for name, spec in METHODS.items() if spec.direction == "client->agent"
)
"""Methods the agent handles (the client sends them)."""

CLIENT_METHODS: frozenset[str] = frozenset(
    name for name, spec in METHODS.items() if spec.direction == "agent->client"
)
"""Methods the client handles (the agent sends them)."""

PROTOCOL_METHODS: frozenset[str] = frozenset(
    name for name, spec in METHODS.items() if spec.direction == "both"
)
"""Protocol-level methods either side may send."""


def _model(name: str) -> type[BaseModel]:
    module = importlib.import_module("acp_agent.protocol._generated")
    model: type[BaseModel] = getattr(module, name)
    return model


def params_model(spec: MethodSpec) -> type[BaseModel]:
    """The pydantic model of the method's params (imports the models on first use)."""
    return _model(spec.params)


def result_model(spec: MethodSpec) -> type[BaseModel] | None:
    """The pydantic model of the method's result; ``None`` for a notification."""
    return None if spec.result is None else _model(spec.result)
