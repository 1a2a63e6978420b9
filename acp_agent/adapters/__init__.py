"""Serve agents written with other frameworks: the registry and the ``module:object`` loader.

An adapter turns a framework's agent object (a pydantic-ai ``Agent``, a LangGraph graph,
an OpenAI Agents SDK ``Agent``) into one of this library's :class:`~acp_agent.agent.Agent`
s, so that it runs on this server with all its guarantees. This package owns:

* :data:`FRAMEWORKS`, the registry: which top-level package's objects each adapter
  serves and where its ``adapt`` function lives (``"module:function"``, imported only
  when an object of that package is served). An adapter module adds itself with one
  :class:`Framework` line here;
* :func:`as_agent`: an object -> an ``Agent`` (ours as is, a framework's through its
  adapter, by the type of the object: the classes of its type's MRO are matched on their
  top-level package, so nothing of a framework is imported to find out);
* :func:`load`: ``"module:object"`` (the ``--agent`` option) -> an ``Agent``, or a
  :class:`LoadError` whose message is one line for the person who typed it, and
  :func:`check_spec`, what can be refused of it without importing anything;
* :func:`serve`: ``as_agent`` + :func:`acp_agent.runner.run_agent`.

What every adapter shares per turn (tool call handles, remembered approvals, saved
memory, model errors) is in :mod:`acp_agent.adapters.turns`; the client's editor as tools,
framework-neutral, in :mod:`acp_agent.adapters.editor`. One module per framework beside
them (:mod:`acp_agent.adapters.pydantic_ai`, ...). Importing this package imports no
framework.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from ..agent import Agent

__all__ = ["FRAMEWORKS", "Framework", "LoadError", "as_agent", "check_spec", "load", "serve"]


@dataclass(frozen=True, slots=True)
class Framework:
    """One adapter: it serves objects whose type comes from ``package``."""

    name: str
    #: the package the served objects' classes come from (``pydantic_ai``, ``google.adk``)
    package: str
    #: ``"module:function"``: the function taking the object and returning an Agent
    adapter: str
    #: the pip extra that installs the framework (``acp-agent-kit[<extra>]``)
    extra: str


FRAMEWORKS: Final[list[Framework]] = [
    Framework("pydantic-ai", "pydantic_ai", "acp_agent.adapters.pydantic_ai:adapt", "pydantic-ai"),
    Framework("LangGraph", "langgraph", "acp_agent.adapters.langgraph:adapt", "langgraph"),
    Framework(
        "OpenAI Agents SDK", "agents", "acp_agent.adapters.openai_agents:adapt", "openai-agents"
    ),
    Framework("Google ADK", "google.adk", "acp_agent.adapters.google_adk:adapt", "google-adk"),
    Framework(
        "LlamaIndex",
        "llama_index.core.agent.workflow",
        "acp_agent.adapters.llama_index:adapt",
        "llama-index",
    ),
    Framework("Strands Agents", "strands", "acp_agent.adapters.strands:adapt", "strands"),
]

EXPECTED: Final = (
    "an acp_agent Agent, a pydantic-ai Agent, a LangGraph graph, an OpenAI Agents SDK Agent,"
    " a Google ADK agent, a LlamaIndex agent workflow or a Strands agent"
)


class LoadError(Exception):
    """The ``module:object`` given cannot be served; the message is one line."""


def framework_of(obj: object) -> Framework | None:
    """The adapter for ``obj``, by the package of the classes of its type."""
    for cls in type(obj).__mro__:
        module = cls.__module__
        for framework in FRAMEWORKS:
            if module == framework.package or module.startswith(framework.package + "."):
                return framework
    return None


def _adapter(framework: Framework) -> Callable[[Any], Agent]:
    module, _, function = framework.adapter.partition(":")
    try:
        adapt: Callable[[Any], Agent] = getattr(importlib.import_module(module), function)
    except ModuleNotFoundError as exc:
        raise LoadError(
            f"serving a {framework.name} agent needs {exc.name!r}: "
            f"pip install 'acp-agent-kit[{framework.extra}]'"
        ) from None
    return adapt


def as_agent(obj: object) -> Agent:
    """``obj`` as an :class:`Agent`: ours as it is, a framework's through its adapter."""
    if isinstance(obj, Agent):
        return obj
    framework = framework_of(obj)
    if framework is None:
        raise LoadError(f"{type(obj).__qualname__} object is not an agent (expected {EXPECTED})")
    return _adapter(framework)(obj)


def _import(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module == missing or module.startswith(missing + "."):
            raise LoadError(f"cannot find module {module!r}") from None
        raise LoadError(f"module {module!r} cannot be imported: {exc}") from None
    except Exception as exc:
        raise LoadError(
            f"module {module!r} failed while being imported: {type(exc).__name__}: {exc}"
        ) from None


def load(spec: str) -> Agent:
    """The agent named by ``spec``, ``"module:object"`` (``object`` may be dotted), as an
    :class:`Agent`; a :class:`LoadError` (one line, naming ``spec``) when it cannot be.
    The working directory is importable, as it is for ``python -m``."""
    try:
        return as_agent(_find(spec))
    except LoadError as exc:
        raise LoadError(f"--agent {spec}: {exc}") from None


def check_spec(spec: str) -> None:
    """Refuse, in one :class:`LoadError` naming ``spec``, what can be seen without
    importing the module: not ``module:object``, or a module that cannot be found (its
    parent packages are looked into, not imported)."""
    try:
        module, _ = _parts(spec)
        _importable_here()
        if not _findable(module):
            raise LoadError(f"cannot find module {module!r}")
    except LoadError as exc:
        raise LoadError(f"--agent {spec}: {exc}") from None


def _parts(spec: str) -> tuple[str, str]:
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise LoadError("expected module:object, e.g. myagent:agent")
    return module, name


def _importable_here() -> None:
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())


def _findable(module: str) -> bool:
    """Whether ``module`` can be found, importing none of its parent packages."""
    parts = module.split(".")
    try:
        top = importlib.util.find_spec(parts[0])
        if top is None:
            return False
        where: list[str] | None = list(top.submodule_search_locations or ())
        for i in range(1, len(parts)):
            name = ".".join(parts[: i + 1])
            if ".".join(parts[:i]) in sys.modules:  # imported already: ask it
                spec = importlib.util.find_spec(name)
                if spec is None:
                    return False
                where = list(spec.submodule_search_locations or ())
            else:
                where = _portions(name, where or [])
                if where is None:
                    return False
    except (ImportError, ValueError):  # ValueError: hidden (None in sys.modules)
        return False
    return True


def _portions(name: str, where: list[str]) -> list[str] | None:
    """Where the submodules of ``name`` would be looked for ([] for a plain module), or
    None if no entry of ``where`` holds it."""
    import pkgutil

    found: list[str] | None = None
    for entry in where:
        finder = pkgutil.get_importer(entry)
        spec = finder.find_spec(name) if finder is not None else None
        if spec is None:
            continue
        locations = list(spec.submodule_search_locations or ())
        if spec.loader is not None:  # a module or a regular package: that is the one
            return locations
        found = [*(found or []), *locations]  # a namespace package's portion
    return found


def _find(spec: str) -> object:
    module, name = _parts(spec)
    _importable_here()
    obj: Any = _import(module)
    for part in name.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise LoadError(f"module {module!r} has no attribute {name!r}") from None
    if isinstance(obj, type) and issubclass(obj, Agent):
        return obj()
    return obj


def serve(obj: object, **options: Any) -> int:
    """Serve ``obj`` (any agent :func:`as_agent` takes) over stdio; ``options`` go to
    :func:`acp_agent.runner.run_agent`. Returns the exit code."""
    from ..runner import run_agent

    return run_agent(as_agent(obj), **options)
