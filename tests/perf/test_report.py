"""The benchmark report: the spread section (ranges and round-by-round ratios) and the floors."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import driver
from benchmarks.client import QUICK, AgentSpec
from benchmarks.report import render, spread
from benchmarks.scenarios import AgentResult


def result(name: str, **values: list[float]) -> AgentResult:
    out = AgentResult(AgentSpec(name, ["true"]))
    for key, series in values.items():
        for value in series:
            out.add(key, value)
    return out


def test_spread_gives_ranges_and_per_round_ratios() -> None:
    ours = result("acp-agent", s2_median=[200.0, 300.0], s4_read=[100.0, 120.0])
    sdk = result("sdk", s2_median=[400.0, 300.0], s4_read=[100.0, 100.0])
    lines = spread([ours, sdk], sdk)
    s2 = next(line for line in lines if line.startswith("| S2 "))
    s4 = next(line for line in lines if line.startswith("| S4 "))
    assert "| 200 to 300 (0.50x to 1.00x) | 300 to 400 |" in s2
    assert "| 100 to 120 (1.00x to 1.20x) | 100 to 100 |" in s4
    assert "| — | — |" in next(line for line in lines if line.startswith("| S3 "))


def test_spread_is_left_out_with_one_round() -> None:
    ours = result("acp-agent", s2_median=[200.0])
    assert spread([ours], None) == []


def test_no_ratios_when_a_round_is_missing() -> None:
    ours = result("acp-agent", s2_median=[200.0, 300.0])
    sdk = result("sdk", s2_median=[400.0, 300.0, 250.0])
    s2 = next(line for line in spread([ours, sdk], sdk) if line.startswith("| S2 "))
    assert "| 200 to 300 | 250 to 400 |" in s2


def test_the_durable_floor_line_compares_it_with_the_floor() -> None:
    floor = result("floor", s2_median=[100.0, 120.0])
    durable = result("floor-sqlite", s2_median=[150.0, 180.0])
    report = render([floor, durable], QUICK, 1.0, smoke=False, command="x")
    assert "takes 165 µs per S2 turn, 1.50x the floor's 110 µs" in report
    assert "Durable floor" not in render([floor], QUICK, 1.0, smoke=False, command="x")


def test_a_run_writes_no_report_file_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = Path(driver.__file__).with_name("RESULTS.md")
    before = results.read_bytes()
    agent = "nope=" + str(tmp_path / "no-such-agent")
    assert driver.main(["--quick", "--rounds", "1", "--agent", agent]) == 0
    assert results.read_bytes() == before
    assert "# " in capsys.readouterr().out  # the report went to stdout
    assert (
        driver.main(
            ["--quick", "--rounds", "1", "--agent", agent, "--output", str(tmp_path / "r.md")]
        )
        == 0
    )
    assert (tmp_path / "r.md").read_text(encoding="utf-8").startswith("#")
