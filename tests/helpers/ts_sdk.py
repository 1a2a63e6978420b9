"""The official TypeScript SDK for the interop tests that drive this project's agents with
it: the node project ``tests/ts`` (its ``package.json`` pins the SDK, its
``package-lock.json`` every package), installed with ``npm ci`` once per test run into
the run's temporary directory, outside the source tree; the xdist workers of a run share
that one install, made under a file lock by whichever asks first.

Where node or npm is missing the tests that use it are skipped, except in CI
(``CI=true``), where that fails; a failing ``npm ci`` always fails.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1] / "ts"
FILES = ("package.json", "package-lock.json")
INSTALL_TIMEOUT = 300.0  # seconds for npm ci (it reuses npm's own cache when it can)


def missing_tools() -> list[str]:
    return [tool for tool in ("node", "npm") if shutil.which(tool) is None]


def install(base: Path) -> Path:
    """``tests/ts`` installed with ``npm ci`` under ``base``; returns the project's
    directory (skips, or fails in CI, without node and npm)."""
    missing = missing_tools()
    if missing:
        why = f"{' and '.join(missing)} not found: the TypeScript SDK interop tests need node 20+"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    project = base / "ts-sdk"
    installed = project / ".installed"
    with open(base / "ts-sdk.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker of this run may be installing
        if installed.is_file():
            return project
        shutil.rmtree(project, ignore_errors=True)  # what a failed install left
        project.mkdir()
        for name in FILES:
            shutil.copy(PROJECT / name, project / name)
        command = ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"]
        done = subprocess.run(command, cwd=project, capture_output=True, timeout=INSTALL_TIMEOUT)
        if done.returncode != 0:
            pytest.fail(f"npm ci failed in {project}: {done.stderr.decode()[-2000:]}")
        installed.touch()
    return project


def with_scripts(project: Path, *scripts: Path) -> Path:
    """``project`` with ``scripts`` copied in (node finds the packages beside them); each
    lands whole by a rename, as another worker's node may be reading it."""
    for script in scripts:
        partial = project / f".{script.name}.{os.getpid()}"
        shutil.copy(script, partial)
        os.replace(partial, project / script.name)
    return project
