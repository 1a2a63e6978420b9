"""The packages the wheel installs: ``acp_agent``, and the conformance suite from
``conformance/`` under the name ``acp_agent_conformance`` (a top-level package called
plainly ``conformance`` would clash with anything else of that name). Everything else
is in pyproject.toml."""

from setuptools import find_packages, setup

SUITE = "acp_agent_conformance"
suite = find_packages(include=["conformance", "conformance.*"], exclude=["*.tests", "*.tests.*"])
setup(
    packages=[
        *find_packages(include=["acp_agent", "acp_agent.*"]),
        *(SUITE + name.removeprefix("conformance") for name in suite),
    ],
    package_dir={SUITE: "conformance"},
)
