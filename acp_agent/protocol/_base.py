"""Hand-written bases of the generated ACP models (``_generated.py`` imports them).

Owns how every model is configured (wire names as aliases, unknown fields ignored,
built lazily) and how partly tagged unions pick a variant. Generated code only
subclasses these; behaviour never lives in the generated file.
"""

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


def _wire_name(name: str) -> str:
    return "_meta" if name == "field_meta" else to_camel(name)


class AcpModel(BaseModel):
    """Base of every ACP model: wire names as aliases, unknown fields ignored, built lazily.

    Aliases come from ``alias_generator`` (camelCase, and ``field_meta`` <-> ``_meta``); a
    field whose wire name differs from that has an explicit alias.
    """

    model_config = ConfigDict(
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="ignore",
        defer_build=True,
        alias_generator=_wire_name,
    )


class _Tagged(AcpModel):
    """Base of union variants: the tag field is serialized even when left at its default."""

    __acp_tag__: ClassVar[str]

    def model_post_init(self, context: Any, /) -> None:
        self.__pydantic_fields_set__.add(self.__acp_tag__)


_NO_TAG: Any = object()


class _TagDispatch:
    """Callable discriminator of a union whose variants are not all tagged.

    A known tag value selects its variant; a missing tag selects the untagged variant; an
    unknown tag selects the schema's fallback (``"other"``) variant when there is one.
    """

    def __init__(
        self,
        wire: str,
        py: str,
        tags: dict[str, str],
        missing: str | None,
        unknown: str | None,
    ) -> None:
        self.wire, self.py, self.tags = wire, py, tags
        self.missing, self.unknown = missing, unknown
        self.__name__ = f"{wire}_tag"  # pydantic-core names the discriminator in errors

    def __call__(self, value: Any) -> str | None:
        if isinstance(value, dict):
            tag = value.get(self.wire, _NO_TAG)
        else:
            tag = getattr(value, self.py, _NO_TAG)
        if tag is _NO_TAG:
            return self.missing
        return self.tags.get(tag, self.unknown) if isinstance(tag, str) else self.unknown
