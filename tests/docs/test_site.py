"""The documentation site: ``mkdocs build --strict`` succeeds, no built page shows a raw
Sphinx role, and roles that name a documented object are links (docs_ext/sphinx_roles.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.conftest import need_docs_extra

ROOT = Path(__file__).resolve().parents[2]

#: a role as mkdocstrings leaves it when nothing renders it: ``:meth:<code>x</code>``
RAW_ROLE = re.compile(r":(?:py:)?(?:meth|class|func|mod|attr|exc|data|obj):(?:<code>|`)")


@pytest.mark.timeout(600)
def test_site_builds_strictly_with_roles_rendered_as_links(tmp_path: Path) -> None:
    need_docs_extra()
    site = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 10, pages
    raw = {
        str(page.relative_to(site)): RAW_ROLE.findall(page.read_text(encoding="utf-8"))
        for page in pages
    }
    assert {page: found for page, found in raw.items() if found} == {}
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    # Agent's docstring: "Override :meth:`prompt` at least."
    assert re.search(
        r'Override <a class="autorefs autorefs-internal"[^>]* '
        r'href="#acp_agent\.agent\.Agent\.prompt"><code>prompt\(\)</code></a> at least',
        api,
    ), "the :meth: role in Agent's docstring is not a link"
    # PromptTurn's "What :meth:`Agent.prompt` receives" links to the same method
    assert re.search(r'href="#acp_agent\.agent\.Agent\.prompt"><code>Agent\.prompt\(\)</code>', api)
