"""docs_ext/sphinx_roles.py: each Sphinx role becomes an optional cross-reference to the
object its name means in the docstring's scope, or plain code when it names nothing."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.docs.conftest import need_docs_extra


def ref(path: str, shown: str) -> str:
    return f'<autoref identifier="{path}" optional><code>{shown}</code></autoref>'


@pytest.fixture
def loaded(tmp_path: Path) -> Any:
    """A small package, loaded by griffe with the extension."""
    need_docs_extra()
    import griffe

    from docs_ext.sphinx_roles import SphinxRoles

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""The package: see :mod:`.sub` and :mod:`pkg.sub`."""\n')
    (pkg / "sub.py").write_text(
        textwrap.dedent('''
            """Home of :class:`Thing`; not :func:`missing` nor :class:`!Thing`."""

            from pkg import other


            class Thing:
                """Call :meth:`go`, :meth:`Thing.go`, :meth:`~pkg.sub.Thing.go`, :attr:`size`.

                Or :py:func:`the other one <other.helper>`; raises :exc:`~pkg.other.Oops`.
                """

                size: int = 0
                """How big, unlike :data:`other.LIMIT`."""

                def go(self) -> None:
                    """Unlike :meth:`stop` (no such method) and like :obj:`size`."""
            ''')
    )
    (pkg / "other.py").write_text(
        '"""Helpers."""\nLIMIT = 1\nclass Oops(Exception): ...\ndef helper() -> None: ...\n'
    )
    return griffe.load(
        "pkg", search_paths=[tmp_path], extensions=griffe.load_extensions(SphinxRoles)
    )


def test_names_resolve_in_the_docstrings_scope(loaded: Any) -> None:
    assert loaded.docstring.value == (
        f"The package: see {ref('pkg.sub', '.sub')} and {ref('pkg.sub', 'pkg.sub')}."
    )
    thing = loaded["sub.Thing"].docstring.value
    go = ref("pkg.sub.Thing.go", "go()")
    assert thing.splitlines()[0] == (
        f"Call {go}, {ref('pkg.sub.Thing.go', 'Thing.go()')}, {go}, "
        f"{ref('pkg.sub.Thing.size', 'size')}."
    )
    assert thing.splitlines()[2] == (
        f"Or {ref('pkg.other.helper', 'the other one')}; raises {ref('pkg.other.Oops', 'Oops')}."
    )
    assert loaded["sub.Thing.size"].docstring.value == (
        f"How big, unlike {ref('pkg.other.LIMIT', 'other.LIMIT')}."
    )


def test_a_name_that_means_nothing_or_is_marked_not_to_link_is_plain_code(loaded: Any) -> None:
    assert loaded["sub"].docstring.value == (
        f"Home of {ref('pkg.sub.Thing', 'Thing')}; not <code>missing()</code> nor "
        "<code>Thing</code>."
    )
    assert loaded["sub.Thing.go"].docstring.value == (
        f"Unlike <code>stop()</code> (no such method) and like {ref('pkg.sub.Thing.size', 'size')}."
    )
