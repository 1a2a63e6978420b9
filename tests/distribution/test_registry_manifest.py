"""agent.json, the language-model agent's entry for the ACP registry, keeps the
registry's rules (its documented format and validation) and the package's version."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import acp_agent

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def manifest() -> dict[str, Any]:
    data = json.loads((ROOT / "agent.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def project_version() -> str:
    found = re.search(r'^version = "([^"]+)"$', PYPROJECT, re.M)
    assert found is not None
    return found.group(1)


def test_the_manifest_pins_the_package_version() -> None:
    data = manifest()
    assert data["version"] == project_version() == acp_agent.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", data["version"])
    assert data["distribution"]["uvx"]["package"] == f"acp-agent-kit=={data['version']}"


def test_the_manifest_has_the_registry_fields_and_nothing_else() -> None:
    data = manifest()
    required = {"id", "name", "version", "description", "distribution"}
    optional = {"repository", "website", "authors", "license", "license_url", "icon"}
    assert required <= set(data) <= required | optional
    assert re.fullmatch(r"[a-z][a-z0-9-]*", data["id"])
    assert data["name"] and data["description"]
    assert set(data["distribution"]) == {"uvx"}
    uvx = data["distribution"]["uvx"]
    assert set(uvx) <= {"package", "args", "env"}
    assert "latest" not in uvx["package"]
    assert all(isinstance(arg, str) for arg in uvx.get("args", []))


def test_uvx_runs_our_command_with_the_language_model_agent() -> None:
    # uvx runs the command named as the package (no "cmd" given)
    assert re.search(r'^acp-agent-kit = "acp_agent.cli:main"$', PYPROJECT, re.M)
    args = manifest()["distribution"]["uvx"]["args"]
    assert args[0] == "--model" and args[1]


def test_the_icon_is_a_16_pixel_square_in_the_current_colour() -> None:
    svg = ET.parse(ROOT / "icon.svg").getroot()
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    assert (svg.get("width"), svg.get("height"), svg.get("viewBox")) == ("16", "16", "0 0 16 16")
    for element in svg.iter():
        for attribute in ("fill", "stroke"):
            assert element.get(attribute) in (None, "currentColor", "none", "inherit")
        assert "color" not in (element.get("style") or "")


def test_the_project_has_one_name() -> None:
    # the registry entry, the site's title, the README's title and the distribution
    readme_title = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()[0]
    site_name = re.search(r"^site_name: (.+)$", (ROOT / "mkdocs.yml").read_text(), re.M)
    distribution = re.search(r'^name = "([^"]+)"$', PYPROJECT, re.M)
    assert site_name is not None and distribution is not None
    names = {manifest()["name"], manifest()["id"], site_name[1], readme_title.removeprefix("# ")}
    assert names == {distribution[1]} == {"acp-agent-kit"}
