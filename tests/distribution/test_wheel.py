"""The wheel: its distribution name, its top-level packages and its console script.

``acp-agent`` on PyPI is an unrelated project whose wheel installs a command named
``acp-agent``; ours is ``acp-agent-kit``, and the suite in ``conformance/`` installs as
``acp_agent_conformance``, never as a package called plainly ``conformance``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.helpers.wire_client import ROOT

SOURCES = ("pyproject.toml", "setup.py", "README.md", "acp_agent", "conformance")


def test_wheel_packages_and_console_script(tmp_path: Path) -> None:
    source = tmp_path / "src"
    for name in SOURCES:  # a copy, so the build writes nothing into the checkout
        if (ROOT / name).is_dir():
            skip = shutil.ignore_patterns("__pycache__")
            shutil.copytree(ROOT / name, source / name, ignore=skip)
        else:
            source.mkdir(exist_ok=True)
            shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), "."],
        cwd=source,
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("*.whl")
    assert wheel.name.startswith("acp_agent_kit-")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = archive.read(entry_points).decode()
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top_level == {"acp_agent", "acp_agent_conformance"}
    assert "acp_agent_conformance/checks/rpc.py" in names
    assert "acp_agent_conformance/__main__.py" in names
    assert not any("/tests/" in n for n in names)
    assert "acp-agent-kit = acp_agent.cli:main" in scripts
    assert "acp-agent =" not in scripts
    # the testing kit's fixtures load in any project that installs the wheel
    assert "acp_agent/testing/pytest_plugin.py" in names
    assert "[pytest11]" in scripts
    assert "acp_agent.testing.pytest_plugin = acp_agent.testing.pytest_plugin" in scripts
