"""The generator's intermediate representation: names, classes, aliases, type expressions.

It owns how schema names become Python names (the rules are in the package docstring) and
the specs that ``translate`` makes and ``render`` writes out; it reads no schema itself.
"""

from __future__ import annotations

import keyword
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any

Schema = dict[str, Any]


# --------------------------------------------------------------------------- naming


def pascal(text: str) -> str:
    """``agent_message_chunk`` / ``date-time`` / ``value id`` -> ``AgentMessageChunk``."""
    parts = re.split(r"[^0-9A-Za-z]+", text)
    return "".join(p[:1].upper() + p[1:] for p in parts if p)


def snake(wire: str) -> str:
    """The Python field name for a wire property name."""
    if wire == "_meta":
        return "field_meta"
    name = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", wire).lower()
    name = re.sub(r"[^0-9a-z_]", "_", name).strip("_")
    if keyword.iskeyword(name):
        name += "_"
    return name


def first_paragraph(description: str | None) -> str:
    if not description:
        return ""
    para = description.strip().split("\n\n")[0]
    return " ".join(para.split())


def docstring(text: str, indent: str) -> list[str]:
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if not text:
        return []
    lines = textwrap.wrap(text, width=96 - len(indent)) or [text]
    if len(lines) == 1 and len(lines[0]) + len(indent) + 6 <= 100:
        return [f'{indent}"""{lines[0]}"""']
    return [f'{indent}"""{lines[0]}', *(f"{indent}{ln}" for ln in lines[1:]), f'{indent}"""']


def ref_name(ref: str) -> str:
    assert ref.startswith("#/$defs/"), ref
    return ref[len("#/$defs/") :]


# --------------------------------------------------------------------------- model IR


@dataclass
class FieldSpec:
    py: str
    wire: str
    annotation: str
    default: str | None  # Python source of the default; None = required
    factory: str | None = None
    deps: set[str] = field(default_factory=set)


@dataclass
class ClassSpec:
    name: str
    bases: list[str]
    doc: str
    fields: list[FieldSpec]
    deps: set[str]
    extra_allow: bool = False
    tag: str | None = None  # python name of the tag field that must always be serialized


@dataclass
class AliasSpec:
    name: str
    expr: str
    deps: set[str]
    doc: str = ""


@dataclass
class TypeExpr:
    expr: str
    deps: set[str] = field(default_factory=set)
    nullable: bool = False


def union_expr(members: list[str]) -> str:
    uniq = list(dict.fromkeys(members))
    if not uniq:
        return "Any"
    if len(uniq) == 1:
        return uniq[0]
    return f"Union[{', '.join(uniq)}]"


def merge_exprs(exprs: list[str]) -> str:
    uniq = list(dict.fromkeys(exprs))
    literals = [e for e in uniq if e.startswith("Literal[")]
    if "str" in uniq and literals and all(isinstance(eval_literal(e), str) for e in literals):
        uniq = [e for e in uniq if not e.startswith("Literal[")]
    elif len(literals) > 1:
        merged = "Literal[" + ", ".join(e[len("Literal[") : -1] for e in literals) + "]"
        uniq = [merged if e == literals[0] else e for e in uniq if e not in literals[1:]]
    return union_expr(uniq)


def eval_literal(expr: str) -> Any:
    return eval(expr[len("Literal[") : -1], {})  # our own repr() output
