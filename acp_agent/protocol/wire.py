"""The two conversions between ACP models and wire dicts: ``to_wire`` and ``from_wire``.

This module owns how a model becomes a JSON-ready dict (wire names, unset fields left out),
how a pydantic ``ValidationError`` becomes ``acp_agent.errors.InvalidParams`` with a short,
single-line message that names the failing fields and never echoes input values, and the one
shape of params it checks without the models: a prompt of plain text blocks (the hot path of
every agent). It does no I/O and knows nothing of JSON-RPC framing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, TypeVar

from acp_agent.errors import InvalidParams

if TYPE_CHECKING:
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")

MAX_ERRORS_IN_MESSAGE = 3
MAX_ERRORS_IN_DATA = 20
MAX_TEXT = 80


def to_wire(model: BaseModel) -> dict[str, Any]:
    """The model as a JSON-ready dict with wire names; fields never set are left out."""
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)


def from_wire(model_cls: type[M], data: Any) -> M:
    """Validate wire data as ``model_cls``; raise ``InvalidParams`` when it does not fit."""
    from pydantic import ValidationError

    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        raise invalid_params(exc) from None


#: how deep a prompt's JSON may nest (arrays and objects, the params object counted):
#: orjson encodes at most 254 levels, and the stored and replayed forms of a prompt
#: wrap it in a few more, so this leaves a wide margin; deeper prompts are refused
MAX_PROMPT_DEPTH: Final = 128


def nesting_within(value: Any, limit: int) -> bool:
    """Whether ``value`` nests arrays and objects no more than ``limit`` levels deep."""
    if type(value) is dict:
        return limit > 0 and all(nesting_within(v, limit - 1) for v in value.values())
    if type(value) is list:
        return limit > 0 and all(nesting_within(v, limit - 1) for v in value)
    return True


def plain_text_prompt(params: dict[str, Any]) -> bool:
    """Whether ``params`` is a valid ``PromptRequest`` made only of plain text blocks.

    The common prompt checked without pydantic: True only for input the generated model
    accepts (a property test holds the two together); False means "not decided here", and
    the model then validates it.
    """
    meta = params.get("_meta")
    if type(params.get("sessionId")) is not str or (meta is not None and not _flat_meta(meta)):
        return False
    blocks = params.get("prompt")
    if type(blocks) is not list:
        return False
    for block in blocks:
        if (
            type(block) is not dict
            or block.get("type") != "text"
            or type(block.get("text")) is not str
            or "annotations" in block
        ):
            return False
        meta = block.get("_meta")
        if meta is not None and not _flat_meta(meta):
            return False
    return True


def _flat_meta(meta: Any) -> bool:
    # A _meta nested deep is left to the full check (and refused there).
    return type(meta) is dict and nesting_within(meta, MAX_PROMPT_DEPTH - 4)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def _location(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(params)"


def invalid_params(exc: Any) -> InvalidParams:
    """``InvalidParams`` for a pydantic ``ValidationError``; no input values are included."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    items = [
        {"field": _short(_location(tuple(err.get("loc", ())))), "message": _short(err["msg"])}
        for err in errors
    ]
    shown = "; ".join(f"{i['field']}: {i['message']}" for i in items[:MAX_ERRORS_IN_MESSAGE])
    if len(items) > MAX_ERRORS_IN_MESSAGE:
        shown += f"; and {len(items) - MAX_ERRORS_IN_MESSAGE} more"
    return InvalidParams(f"invalid params: {shown}", data=items[:MAX_ERRORS_IN_DATA])
