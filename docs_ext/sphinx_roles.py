"""Sphinx roles in docstrings, rendered by the API reference (a griffe extension).

The docstrings cross-reference with Sphinx roles (``:meth:`prompt```,
``:class:`~acp_agent.errors.RequestError```); mkdocstrings does not read them. Before any
docstring is parsed, this extension rewrites each role as an optional autorefs reference:
at build time mkdocs-autorefs makes it a link where the target is an object rendered on
some page, and leaves plain inline code elsewhere.

Names resolve as Sphinx resolves them, in the docstring's scope: ``prompt`` in a class's
docstring is that class's method, ``Agent.prompt`` starts from whatever ``Agent`` names in
the module, ``.handshake`` is relative to the current package, a dotted name that starts
with a top-level package is taken as given. ``~`` shows only the last component, ``!``
never links, ``title <target>`` shows the title.

Owns only that rewrite; which objects are documented is the business of docs/api.md, the
rendering that of mkdocstrings and autorefs. Configured in mkdocs.yml (the python
handler's ``extensions``); tests/docs/test_sphinx_roles.py is its unit test.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLES = ("meth", "class", "func", "mod", "attr", "exc", "data", "obj")

#: ``:role:`text``` and ``:py:role:`text```
ROLE = re.compile(r":(?:py:)?(?P<role>" + "|".join(ROLES) + r"):`(?P<text>[^`]+)`")

#: ``title <target>`` inside a role
TITLED = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")


def resolve(scope: griffe.Object, name: str) -> str | None:
    """The full path that ``name`` means in a docstring of ``scope``, or None if none."""
    collection = scope.modules_collection
    if name.startswith("."):
        module = scope if isinstance(scope, griffe.Module) else scope.module
        base = module.path if module.is_package else module.path.rpartition(".")[0]
        candidates = [base + name, module.path + name]
    elif name.partition(".")[0] in collection.members:
        candidates = [name]
    else:
        first, dot, rest = name.partition(".")
        try:
            candidates = [scope.resolve(first) + dot + rest]
        except griffe.NameResolutionError:
            return None
    for path in candidates:
        try:
            collection.get_member(path)
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            # an imported name outside the loaded packages: a path all the same
            if path.partition(".")[0] not in collection.members:
                return path
            continue
        return path
    return None


def render(scope: griffe.Object, match: re.Match[str]) -> str:
    """The replacement for one role: an optional cross-reference, or plain code."""
    text = match["text"].strip()
    titled = TITLED.match(text)
    title, target = (titled["title"], titled["target"]) if titled else (None, text)
    no_link = target.startswith("!")
    target = target.lstrip("!")
    short = target.startswith("~")
    target = target.lstrip("~")
    shown = title or (target.rpartition(".")[2] if short else target)
    if match["role"] in ("meth", "func") and not title:
        shown += "()"
    code = f"<code>{html.escape(shown)}</code>"
    path = None if no_link else resolve(scope, target)
    if path is None:
        return code
    return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'


def rewrite(scope: griffe.Object, text: str) -> str:
    """``text`` (a docstring of ``scope``) with every role rendered."""
    return ROLE.sub(lambda match: render(scope, match), text)


def _walk(obj: griffe.Object) -> None:
    if obj.docstring is not None:
        obj.docstring.value = rewrite(obj, obj.docstring.value)
    for member in obj.members.values():
        if not isinstance(member, griffe.Alias):
            _walk(member)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring of each package griffe loads."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        _walk(pkg)
